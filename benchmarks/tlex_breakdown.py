"""Where the TLEX bridged path's latency goes: bench_tlex.py's phases with three timestamps per payload.

    .venv/bin/python benchmarks/tlex_breakdown.py [--phase staggered|aligned] [--seconds 15] [--no-freeze]

A diagnostic, not a benchmark of record (bench_tlex.py is): it runs bench_tlex's peer and bridged
phases unchanged and, in the node process, wraps three internal hooks to stamp each payload (by its
station and sequence number) when it

1. reaches the bridge (the Broker session's payload callback): *simulator -> bridge*;
2. is handed by the broker to the consumer's link (``ConsumerLinkState.send``; written to the socket
   at the end of that loop turn): *bridge -> broker send*, the node's own work and queueing;
3. is received by the consumer process: *broker send -> consumer*, TLS out, the kernel and the
   consumer process (proton's BlockingConnection).

It also records, inside the measurement window: the node's garbage collections (``gc.callbacks``),
its event-loop lag (a 2 ms sleeper: how late it wakes), and how many messages each drain of the
bridge's publish queue carried. ``--no-freeze`` skips ``RunningNode.freeze_startup_heap`` to see the
full collections of an unfrozen heap.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_tlex
import interchange.app.node as node_module
import interchange.broker.engine as engine
from interchange.bridges.tlex.payloads import read_stamp

ROOT = Path(__file__).resolve().parents[1]


class Probes:
    """The hooks' records, keyed by (station, sequence); times are wall-clock ns."""

    def __init__(self) -> None:
        self.arrivals: dict[tuple[int, int], tuple[int, int]] = {}  #: -> (latency so far, time)
        self.departures: dict[tuple[int, int], int] = {}
        self.drains: list[int] = []
        self.lags: list[tuple[float, int]] = []  #: (ms late, time)
        self.collections: list[tuple[int, float, int]] = []  #: (generation, ms, time)
        self._gc_started = 0.0

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.collections.append((info["generation"], (time.perf_counter() - self._gc_started) * 1e3,
                                     time.time_ns()))

    async def watch_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.002)
            self.lags.append(((loop.time() - before - 0.002) * 1e3, time.time_ns()))

    def install(self, freeze: bool) -> None:
        probes = self
        send = engine.ConsumerLinkState.send

        def departing(link: Any, message: Any) -> None:
            raw = bytes(message.raw)
            data = raw.rfind(b"\x00\x53\x75")  # the data section: the payload follows its size
            if data >= 0:
                offset = data + 5 if raw[data + 3] == 0xA0 else data + 8
                _, station, seq = read_stamp(raw[offset:])
                probes.departures[(station, seq)] = time.time_ns()
            send(link, message)

        engine.ConsumerLinkState.send = departing  # type: ignore[method-assign, assignment]
        start_node = node_module.start_node

        async def started(config: Any, *args: Any) -> Any:
            node = await start_node(config, *args)
            bridge = node.tlex
            assert bridge is not None and bridge.supervisor is not None, "the node runs no TLEX bridge"
            supervisor = bridge.supervisor
            on_payload, drain = supervisor._on_payload, bridge._drain

            def arriving(payload: Any) -> None:
                now = time.time_ns()
                sent, station, seq = read_stamp(payload.payload)
                probes.arrivals[(station, seq)] = (now - sent, now)
                on_payload(payload)

            def draining() -> None:
                queued = len(bridge.outbound.queue)
                drain()
                probes.drains.append(queued - len(bridge.outbound.queue))

            supervisor._on_payload, bridge._drain = arriving, draining  # type: ignore[method-assign]
            return node

        node_module.start_node = started  # type: ignore[assignment]  # bench_tlex imports it from the module at call time
        if not freeze:
            node_module.RunningNode.freeze_startup_heap = lambda self: None  # type: ignore[method-assign]


#: the simulator on any free ports (its defaults are fixed, for a node's [tlex]; a benchmark may run beside one)
ANY_PORTS = ("--api-port", "0", "--tls-port", "0", "--plain-port", "0")


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def line(name: str, values: list[float]) -> str:
    return (f"  {name:24s} p50 {pct(values, .5):7.2f}  p90 {pct(values, .9):7.2f}  p99 {pct(values, .99):7.2f}  "
            f"max {max(values, default=float('nan')):7.1f} ms")


async def run(args: argparse.Namespace) -> None:
    probes = Probes()
    probes.install(freeze=not args.no_freeze)
    tmp = Path(tempfile.mkdtemp(prefix="tlex-breakdown-"))
    sim = subprocess.Popen([sys.executable, "-m", "interchange", "tlex-sim", "--dir", str(tmp / "sim"), *ANY_PORTS,
                            "--controllers", str(args.controllers), "--spatem-hz", "10", "--stamp",
                            "--mapem-interval", "2", "--phase", args.phase], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert sim.stdout is not None
        sim.stdout.readline()
        facts = json.loads((tmp / "sim" / "sim.json").read_text())
        peer = await bench_tlex.peer_phase(facts, args.seconds, 3.0)
        gc.callbacks.append(probes.on_gc)
        watcher = asyncio.create_task(probes.watch_loop())
        bridged = await bench_tlex.bridge_phase(tmp, facts, args.seconds, 3.0)
        watcher.cancel()
        gc.callbacks.remove(probes.on_gc)
    finally:
        sim.terminate()
        sim.communicate(timeout=30)
    samples = json.loads((tmp / "consumer.json").read_text())["samples"]
    both = [(s, probes.arrivals[(s[0], s[1])], probes.departures[(s[0], s[1])]) for s in samples
            if (s[0], s[1]) in probes.arrivals and (s[0], s[1]) in probes.departures]
    first, last = min(a[1] for _, a, _ in both), max(a[1] for _, a, _ in both)
    print(f"{args.controllers} controllers x 10 Hz, {args.phase} phases; peer p50 {peer['p50_ms']:.2f} p99 "
          f"{peer['p99_ms']:.2f} ms; bridged p50 {bridged['p50_ms']:.2f} p99 {bridged['p99_ms']:.2f} ms, lost "
          f"{bridged['lost']}, node {bridged['cpu_us']:.0f} us/payload, consumer {bridged['consumer_cpu_us']:.0f} us/msg")
    print(line("simulator -> bridge", [a[0] / 1e6 for _, a, _ in both]))
    print(line("bridge -> broker send", [(d - a[1]) / 1e6 for _, a, d in both]))
    print(line("broker send -> consumer", [(s[2] - a[0] - (d - a[1])) / 1e6 for s, a, d in both]))
    print(line("total", [s[2] / 1e6 for s, _, _ in both]))
    lags = [ms for ms, at in probes.lags if first <= at <= last]
    print(f"  node loop lag (2 ms sleeper): p50 {pct(lags, .5):.2f} p99 {pct(lags, .99):.2f} max "
          f"{max(lags, default=0):.1f} ms; {sum(ms > 5 for ms in lags)} wake-ups > 5 ms late")
    drains = [n for n in probes.drains if n]
    print(f"  publish-queue drains: {len(drains)}, {sum(drains) / max(1, len(drains)):.2f} messages each on "
          f"average, at most {max(drains, default=0)}")
    for generation in (0, 1, 2):
        runs = [ms for g, ms, at in probes.collections if g == generation and first <= at <= last]
        if runs:
            print(f"  gc generation {generation}: {len(runs)} in the window, p50 {pct(runs, .5):.2f} ms, "
                  f"max {max(runs):.2f} ms")
    started = time.perf_counter()
    gc.collect()
    print(f"  a full collection after the run: {(time.perf_counter() - started) * 1e3:.1f} ms "
          f"({gc.get_freeze_count()} objects frozen)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", choices=("staggered", "aligned"), default="staggered")
    parser.add_argument("--controllers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--no-freeze", action="store_true", help="do not freeze the node's start-up heap")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
