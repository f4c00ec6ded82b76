"""Where a node's CPU goes, from a py-spy profile: samples grouped by the part of the code they are in.

    .venv/bin/python benchmarks/profile_categories.py prof.raw [--payloads N]

Reads py-spy's ``--format raw`` output (collapsed stacks: ``frame;frame;... count``, root first) and
puts each sample in the category of the innermost frame that names one (:data:`RULES`, first match
from the leaf). Time in C (OpenSSL, proton-C, syscalls) counts for the Python frame that called it.
py-spy's "active" is not CPU time: a thread waiting in ``epoll`` (on a busy machine) or in a file
syscall is often sampled as active. So samples in the loop's ``select`` are shown apart as
waiting, the thread pool's (the MAPEM store's file writes) apart too, and the event-loop thread's
other samples are the shares; ``--cpu-us`` (the node's measured CPU per payload, from
``bench_tlex_scale.py --profile``) turns the shares into µs per payload.
"""
from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

#: (category, pattern on a frame's "function (file:line)") in the order they are tried per frame
RULES: list[tuple[str, re.Pattern[str]]] = [(name, re.compile(pattern)) for name, pattern in (
    ("TLS records (encrypt/decrypt, handshake state)", r"\((?:[^)]*/)?(?:ssl|sslproto|tls_stream)\.py:"),
    ("log records and metrics", r"\((?:[^)]*/)?(?:observer|message_log|metrics|node_metrics|__init__)\.py:.*|"
                                r"logging/|prometheus_client/"),
    ("admission and routing (scan, validate, selectors, sources)",
     r"\((?:[^)]*/)?(?:admission|amqp_scan|router|routing_index|source|coverage|validation|hop_trace|"
     r"link_selectors)\.py:|jms_selectors/"),
    ("AMQP 1.0 (proton: engines both ends, message codec)",
     r"\((?:[^)]*/)?(?:proton_io|engine|client|sasl|cproton)\.py:|proton/"),
    ("AMQP 0-9-1 client (IF2's amqp091 on pamqp; aio-pika, aiormq)",
     r"aio_pika/|aiormq/|pamqp/|bridges/if2/(?:amqp091|amqp091_io|rabbit)\.py:"),
    ("the bridge's own work (TLEX stream, IF2 keys: decode, map, encode)", r"bridges/tlex/|bridges/if2/"),
    ("event loop (wake-ups, callbacks, socket calls)", r"asyncio/|selectors\.py:|socket\.py:"),
)]
OTHER = "other"
WAITING = "waiting in epoll (not CPU; apart)"
THREADS = "thread pool (MAPEM store file writes; apart)"


def frame_category(frame: str) -> str | None:
    for name, pattern in RULES:
        if pattern.search(frame):
            return name
    return None


def categorise(path: Path) -> Counter[str]:
    """Samples per category (and "total")."""
    counts: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if "selectors.py:" in frames[-1] and "select" in frames[-1]:
            category = WAITING
        elif any("concurrent/futures/thread.py" in frame for frame in frames):
            category = THREADS
        else:
            category = next((c for c in map(frame_category, reversed(frames)) if c is not None), OTHER)
        counts[category] += int(count)
        counts["total"] += int(count)
    return counts


def render(counts: Counter[str], cpu_us: float | None = None) -> str:
    """The loop thread's categories as shares (and µs per payload of ``cpu_us``), then the two apart."""
    apart = (WAITING, THREADS)
    active = sum(n for name, n in counts.items() if name not in (*apart, "total")) or 1
    lines = ["| where (event-loop thread) | share | µs per payload |", "|---|---:|---:|"]
    for name, samples in counts.most_common():
        if name in (*apart, "total"):
            continue
        per = f"{samples / active * cpu_us:.1f}" if cpu_us else "-"
        lines.append(f"| {name} | {samples / active:.1%} | {per} |")
    lines.append(f"| all ({active} samples) | 100% | {cpu_us:.1f} |" if cpu_us else f"| all ({active} samples) | 100% | - |")
    for name in apart:
        lines.append(f"| {name} | {counts.get(name, 0)} samples | - |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", type=Path)
    parser.add_argument("--cpu-us", type=float, help="the node's CPU per payload: adds µs per payload")
    args = parser.parse_args()
    print(render(categorise(args.raw), args.cpu_us), end="")


if __name__ == "__main__":
    main()
