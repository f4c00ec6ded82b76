"""Memory of buffered messages: the broker core's resident memory with 1,000 backed-up sources, this
tree against a peer tree (another checkout, e.g. the tree before a change) in the same run.

Each measurement is a child process importing from one tree: a :class:`BrokerCore` (admission,
routing index, sources, and the node's budget where the tree has one) with ``--sources`` sources,
each taking one zoom-5 quadTree tile (IP_066's selector) and nobody consuming; small DENMs (206
encoded bytes: the smallest valid one with its 8 properties) are published round-robin over the
tiles, each a fresh ``bytes`` object as proton hands them over. Two scenarios:

- ``1M``: each source capped at ``--total / --sources`` messages: ``--total`` (1 M) buffered in all;
- ``at cap``: each source at the default cap (10,000 messages, 256 MiB): 10 M offered; a tree
  without a node budget is stopped once its RSS passes ``--ceiling-mb``, and its figure per message
  says what all of them would need.

Reported per tree: messages held, RSS growth (VmRSS after - before filling, MB), RSS per held
message, what the limits counted (MB), messages evicted by the budget, publish CPU µs per message,
and CPU µs per message for a consumer with a selector to drain one source's backlog.
The peer needs its C extension built (``python setup.py build_ext --inplace`` in it), e.g.::

    git archive main | tar -x -C /tmp/base && (cd /tmp/base && ../wt/.venv/bin/python setup.py build_ext --inplace)
    .venv/bin/python benchmarks/bench_memory.py --peer /tmp/base
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def tile(k: int) -> str:
    return "".join(str((k >> (2 * i)) & 3) for i in range(4, -1, -1))


def measure(sources: int, cap: int, offered: int, ceiling_mb: float) -> dict[str, float]:
    """Fill a broker core of the tree this process imports from (see :func:`child`)."""
    import quadtree
    from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
    from interchange.broker.admission import Admission
    from interchange.broker.router import BrokerCore
    from interchange.broker.ttl_policy import TtlPolicy
    from interchange.testing.harness import denm

    specs = [SourceSpec(address=f"s{k}", consumers=frozenset({"c"}), max_messages=cap, max_bytes=256 * MIB,
                        selector=quadtree.selector_for_tiles([tile(k)])) for k in range(sources)]
    addresses = AddressBook()
    addresses.load([TargetSpec(address="in", publishers=frozenset({"p"}))], specs)
    core = BrokerCore(addresses, Admission(TtlPolicy()), clock_ms=lambda: 1_800_000_000_000)
    publisher = core.attach_publisher("p", "in")
    templates: list[bytes] = []
    for k in range(sources):
        message = denm(quad_tree=f",{tile(k)}0123012301230,", body=b"", publicationId=f"NO00001:{k}")
        assert message.properties is not None  # denm() sets them
        del message.properties["latitude"], message.properties["longitude"]
        templates.append(bytes(message.encode()))
    gc.collect()
    before = rss_mb()
    started = time.process_time()
    publish = core.publish
    sent = 0
    while sent < offered:
        for raw in templates:
            publish(publisher, bytes(bytearray(raw)))
        sent += sources
        if sent % (sources * 100) == 0 and rss_mb() - before > ceiling_mb:
            break
    cpu = time.process_time() - started
    gc.collect()
    held = sum(source.depth for source in core.sources.values())
    budget = getattr(core, "budget", None)
    figures = {"offered": sent, "held": held, "rss_mb": rss_mb() - before, "base_mb": before,
               "counted_mb": sum(source.depth_bytes for source in core.sources.values()) / MIB,
               "budget_mb": budget.limit / MIB if budget is not None else 0.0,
               "evicted": budget.evicted if budget is not None else 0, "publish_us": cpu / sent * 1e6}
    return figures | {"drain_us": drain(core.sources["s0"])}


class Link:
    """A consumer link with a selector and all the credit it wants (what a source hands messages to)."""

    identity = "c"

    def __init__(self) -> None:
        import jms_selectors
        self.selector = jms_selectors.compile("messageType = 'DENM' AND causeCode = 1").matches
        self.source = None
        self.sent = 0

    def close(self, condition: str, description: str) -> None:
        raise RuntimeError(description)

    def can_send(self) -> bool:
        return True

    def send(self, message: object) -> None:
        self.sent += 1


def drain(source) -> float:
    """CPU µs per message for a consumer with a selector to take a source's whole backlog (the
    selector reads each message's properties: decoded again where the buffer does not keep them)."""
    link = Link()
    started = time.process_time()
    source.add_link(link)
    source.credit_changed(1_800_000_000_000)
    return (time.process_time() - started) / max(link.sent, 1) * 1e6


def child(root: Path, args: list[str]) -> dict[str, float]:
    """One measuring process importing from the tree at ``root`` (its directory first on the module
    path through PYTHONPATH; -P leaves this script's own folder off it)."""
    path = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-P", __file__, "--measure", *args], check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": path}).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", type=Path, help="the other tree (its extension built); none: this tree only")
    parser.add_argument("--sources", type=int, default=1000)
    parser.add_argument("--total", type=int, default=1_000_000, help="messages buffered in all (scenario 1M)")
    parser.add_argument("--cap", type=int, default=10_000, help="each source's cap (scenario at cap)")
    parser.add_argument("--ceiling-mb", type=float, default=3000, help="stop filling a tree past this RSS growth")
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)  # one run, in a child process
    args = parser.parse_args()
    if args.measure is not None:
        sources, cap, offered, ceiling = args.measure
        print(json.dumps(measure(int(sources), int(cap), int(offered), float(ceiling))))
        return
    trees = [("this", HERE)] + ([("peer", args.peer.resolve())] if args.peer is not None else [])
    scenarios = [(f"{args.total:,} in all", args.total // args.sources, args.total),
                 (f"at cap ({args.cap:,} each)", args.cap, args.cap * args.sources)]
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"{args.sources} sources, 206-byte DENMs, nobody consuming; load before {load}")
    print(f"{'scenario':<24}{'tree':<6}{'offered':>11}{'held':>11}{'RSS MB':>9}{'B/held':>8}{'counted MB':>11}"
          f"{'budget MB':>10}{'evicted':>10}{'µs/pub':>8}{'µs/drain':>9}")
    for label, cap, offered in scenarios:
        for name, root in trees:
            r = child(root, [str(args.sources), str(cap), str(offered), str(args.ceiling_mb)])
            per = r["rss_mb"] * MIB / r["held"] if r["held"] else 0.0
            print(f"{label:<24}{name:<6}{r['offered']:>11,.0f}{r['held']:>11,.0f}{r['rss_mb']:>9.1f}{per:>8.0f}"
                  f"{r['counted_mb']:>11.1f}{r['budget_mb']:>10.0f}{r['evicted']:>10,.0f}{r['publish_us']:>8.2f}"
                  f"{r['drain_us']:>9.2f}",
                  flush=True)
    print(f"load after {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
