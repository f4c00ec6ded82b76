"""Federation soak (not a test): three interchanges with real DNS and the test PKI, a
realistic durable mix from a publisher at interchange 1 to consumers at 2 and 3, a consumer that
disconnects and comes back, an interchange killed (SIGKILL) and restarted midway.

    .venv/bin/python benchmarks/soak_federation.py [--minutes 10] [--rate 200] [--json out.json]

Prints per subscription: published, accepted, delivered, lost within TTL (goal 0), duplicates,
latency p50/p99 (goal p99 < 10 ms across one hop when not saturated: the "steady" columns are the
messages sent before the first fault), and each node's memory over time (goal: flat).
Figures in docs/reliability.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from interop_kit.soak import SoakPlan, SoakResult, run_soak
from interop_kit.soak_ledger import format_table

COLUMNS = ["name", "node", "published", "accepted", "delivered", "lost", "expired", "duplicates", "unexpected",
           "latency_p50_ms", "latency_p99_ms", "steady_p50_ms", "steady_p99_ms"]


def _fmt(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def memory_rows(result: SoakResult) -> list[dict[str, object]]:
    """Per node: RSS at the first and last quarter of the run (mean), the peak, the last sample."""
    rows: list[dict[str, object]] = []
    for node, samples in result.memory_mb.items():
        values = [mb for _, mb in samples]
        if len(values) < 4:
            continue
        quarter = len(values) // 4
        rows.append({"node": node, "first_quarter_mb": sum(values[:quarter]) / quarter,
                     "last_quarter_mb": sum(values[-quarter:]) / quarter, "peak_mb": max(values),
                     "last_mb": values[-1], "samples": len(values)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second (default 200)")
    parser.add_argument("--dir", type=Path, default=None, help="working directory (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="write the whole result here")
    parser.add_argument("--drain", type=float, default=60.0, help="seconds consumers may take to catch up")
    args = parser.parse_args()
    plan = SoakPlan(duration_s=args.minutes * 60, rate=args.rate, drain_s=args.drain)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="soak-"))
    print(f"soak: {args.minutes:g} min at {args.rate:g} msg/s in {directory}; load {os.getloadavg()}", flush=True)
    result = run_soak(directory, plan)
    for when, text in result.events:
        print(f"  {when:7.1f} s  {text}")
    print()
    for line in format_table([s.row() for s in result.subscriptions], COLUMNS, _fmt):
        print(line)
    print()
    for line in format_table(memory_rows(result), ["node", "first_quarter_mb", "last_quarter_mb", "peak_mb",
                                                   "last_mb", "samples"], _fmt):
        print(line)
    print(f"\nload average at the end: {os.getloadavg()}; lost within TTL: {result.lost}")
    if args.json is not None:
        args.json.write_text(json.dumps({"plan": asdict(result.plan), "subscriptions": [s.row() for s in result.subscriptions],
                                         "memory_mb": result.memory_mb, "events": result.events}, indent=2))
    return 1 if result.lost else 0


if __name__ == "__main__":
    sys.exit(main())
