"""Admission of this tree against a peer tree (another checkout), interleaved: best of alternating runs.

On a shared machine single runs of bench_scan.py vary up to 2x; this alternates the two trees in
separate processes ``--alternations`` times and reports each figure's best, and the ratio. Each
process measures, for the tree it runs from: ``validate_application_properties`` of the bench's
DENM, and ``Admission.admit`` of bench_scan's 5,000 distinct DENMs and of one repeated DENM through
the C accelerator and the pure-Python path (best of 7 rounds). The peer needs its extension built
(``python setup.py build_ext --inplace`` in it), e.g. a ``git archive <commit>`` of the tree before
a change:

    .venv/bin/python benchmarks/bench_admission_peer.py --peer /tmp/base [--alternations 8]
"""
from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import timeit
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
MEASURES = ("validate, valid DENM", "admission, C, distinct", "admission, C, repeated",
            "admission, pure Python, distinct", "admission, pure Python, repeated")


def measure() -> list[float]:
    """The figures of :data:`MEASURES` (µs per message) for the tree this process imports from (see
    :func:`child`)."""
    import bench_scan
    from interchange.broker.admission import Admission
    from interchange.broker.amqp_scan import scan_message
    from interchange.broker.ttl_policy import TtlPolicy
    from interchange.broker.validation import validate_application_properties as validate

    def best(function, number: int) -> float:
        return min(timeit.repeat(function, number=number, repeat=7)) / number * 1e6

    scanned = scan_message(bench_scan.encode(200))
    props, types = scanned.application_properties, scanned.application_property_types
    assert validate(props, types) == []
    pool = bench_scan.encode_distinct(5000)
    messages, one = itertools.cycle(pool), pool[0]
    c = Admission(TtlPolicy(), accelerated=True).admit
    py = Admission(TtlPolicy(), accelerated=False).admit
    return [best(lambda: validate(props, types), 20000),
            best(lambda: c(next(messages), "p", False, None, 0), 20000), best(lambda: c(one, "p", False, None, 0), 20000),
            best(lambda: py(next(messages), "p", False, None, 0), 5000), best(lambda: py(one, "p", False, None, 0), 20000)]


def child(root: Path) -> str:
    """One measuring process importing from the tree at ``root``: its directory and its benchmarks/
    first on the module path (PYTHONPATH; -P leaves this script's own folder off it), ahead of the
    installed project."""
    path = os.pathsep.join([str(root), str(root / "benchmarks"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-P", __file__, "--measure", str(root)], check=True, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": path}).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", type=Path, help="the other tree (its extension built)")
    parser.add_argument("--alternations", type=int, default=8)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # one run, in a child process
    args = parser.parse_args()
    if args.measure is not None:
        print(" ".join(f"{x:.3f}" for x in measure()))
        return
    if args.peer is None:
        parser.error("--peer is required")
    figures: dict[str, list[list[float]]] = {"peer": [], "this": []}
    for _ in range(args.alternations):
        for name, root in (("peer", args.peer.resolve()), ("this", HERE)):
            out = child(root)
            figures[name].append([float(x) for x in out.split()])
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    print(f"best of {args.alternations} alternations (µs per message), load {' '.join(load)}")
    print(f"{'measure':<36}{'peer':>10}{'this':>10}{'ratio':>8}")
    for i, label in enumerate(MEASURES):
        peer, this = (min(run[i] for run in figures[name]) for name in ("peer", "this"))
        print(f"{label:<36}{peer:>10.2f}{this:>10.2f}{this / peer:>8.2f}")


if __name__ == "__main__":
    main()
