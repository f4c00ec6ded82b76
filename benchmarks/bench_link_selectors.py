"""Cost of link selectors on attach: unbounded compile vs the broker's bounded one.

Six consumers attach with distinct 60 kB selectors (as a hostile actor would send: ``(causeCode = i AND
subCauseCode > i AND messageType = 'Ti') OR ...``, 900 alternatives). The peer in the same run
is the unbounded ``jms_selectors.compile`` the router used before; then the broker's
:class:`interchange.broker.link_selectors.LinkSelectors` on the same texts (refused), and on six
selectors at its limits (8 kB, 1024 expression nodes, accepted and compiled). Prints CPU seconds
per attach and resident memory (RSS) before, after the six and after they are released. Each
case runs in a fresh process so RSS figures do not mix. Not a test: nothing is asserted.

    .venv/bin/python benchmarks/bench_link_selectors.py [--json]
"""
from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import time

import jms_selectors
from interchange.broker.link_selectors import MAX_LENGTH, MAX_NODES, LinkSelectors, SelectorTooLarge


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 1e6


def probe_selector(variant: int, alternatives: int = 900) -> str:
    return " OR ".join(f"(causeCode = {i} AND subCauseCode > {i + variant} AND messageType = 'T{i}')"
                       for i in range(alternatives))


def limit_selector(variant: int) -> str:
    """As large as LinkSelectors accepts: 1024 nodes at most (10 per alternative, plus the OR)."""
    return probe_selector(variant, (MAX_NODES - 1) // 10)


def _run(case: str, queue: multiprocessing.Queue) -> None:
    selectors = LinkSelectors(cache_size=0)
    texts = [limit_selector(v) if case == "bounded, at the limits" else probe_selector(v) for v in range(6)]
    gc.collect()
    before = _rss_mb()
    kept, seconds, refused = [], [], 0
    for text in texts:
        started = time.process_time()
        try:
            kept.append(jms_selectors.compile(text) if case == "unbounded (before)" else selectors.compile(text))
        except SelectorTooLarge:
            refused += 1
        seconds.append(time.process_time() - started)
    peak = _rss_mb()
    kept.clear()
    gc.collect()
    queue.put({"case": case, "chars": len(texts[0]), "refused": refused, "cpu_s_per_attach": max(seconds),
               "rss_before_mb": round(before), "rss_after_six_mb": round(peak), "rss_released_mb": round(_rss_mb())})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for case in ("unbounded (before)", "bounded, 60 kB refused", "bounded, at the limits"):
        queue: multiprocessing.Queue = multiprocessing.Queue()
        process = multiprocessing.Process(target=_run, args=(case, queue))
        process.start()
        results.append(queue.get(timeout=600))
        process.join()
    if args.json:
        print(json.dumps({"max_length": MAX_LENGTH, "max_nodes": MAX_NODES, "results": results}, indent=2))
        return
    print(f"limits: {MAX_LENGTH} characters, {MAX_NODES} nodes")
    for r in results:
        print(f"{r['case']:<24} {r['chars']:>6} chars  refused {r['refused']}/6  worst {r['cpu_s_per_attach']:.3f} s CPU"
              f"  RSS {r['rss_before_mb']} -> {r['rss_after_six_mb']} MB, released {r['rss_released_mb']} MB")


if __name__ == "__main__":
    main()
