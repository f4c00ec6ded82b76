"""TLEX bridge at national scale: N traffic lights x 10 Hz through one node, with a generator and
a consumer that are not the bottleneck.

    .venv/bin/python benchmarks/bench_tlex_scale.py --controllers 1000           # 10,000 payloads/s
    .venv/bin/python benchmarks/bench_tlex_scale.py --controllers 1000 --multiplex 100   # via 10 TLC sessions
    .venv/bin/python benchmarks/bench_tlex_scale.py --controllers 100 --profile prof.txt

Three processes besides this one: the generator (``benchmarks/tlex_loadgen.py``: a streaming
service playing the controllers from pre-encoded frames, stamped with each payload's *scheduled*
time), this process (first the peer, then the node: broker + II + bridge), and the C consumer
(``build/loadgen run --producers 0 --tlex-stamps``) on a BI source subscribed to SPATEM and MAPEM.

Peer, same run: a plain Broker-session client of the generator in this process (the path without
bridge and broker); "added" = bridged percentile - peer's. Node CPU per payload = this process's
CPU time over the window / payloads the bridge published in it; the consumer's and the generator's
CPU per payload are reported apart, with the generator's lag (so a run shows which side limits).
Loss: sequence numbers missing per controller between the first and last seen in the window.
``--profile FILE`` samples the node during the bridged window with py-spy (``pip install py-spy``)
and writes where its time goes (``benchmarks/profile_categories.py``). Not a test: it prints.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_tlex import CONSUMER, NODE, cpu_seconds, node_config, peer_phase, subscribe

ROOT = Path(__file__).resolve().parents[1]
LOADGEN = ROOT / "build" / "loadgen"
_SAMPLE = struct.Struct("=qII")  # loadgen's stamp_sample_t: latency ns, station, sequence


class Stalls:
    """The node's loop lag (a 10 ms sleeper: how late it woke) and its garbage collections, over the window."""

    def __init__(self) -> None:
        self.lags_ms: list[float] = []
        self.collections: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._started = 0.0
        self._task: asyncio.Task | None = None

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.collections[info["generation"]].append((time.perf_counter() - self._started) * 1e3)

    async def _sleeper(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            self.lags_ms.append((loop.time() - before - 0.01) * 1e3)

    def start(self) -> None:
        gc.callbacks.append(self._gc)
        self._task = asyncio.get_running_loop().create_task(self._sleeper())

    def stop(self) -> dict[str, Any]:
        gc.callbacks.remove(self._gc)
        if self._task is not None:
            self._task.cancel()
        lags = sorted(self.lags_ms) or [0.0]
        return {"lag_p99_ms": round(lags[int(0.99 * (len(lags) - 1))], 1), "lag_max_ms": round(lags[-1], 1),
                "gc": {g: (len(t), round(max(t, default=0.0), 1)) for g, t in self.collections.items()}}


def ensure_loadgen() -> Path:
    source = ROOT / "benchmarks" / "loadgen" / "loadgen.c"
    if not LOADGEN.exists() or LOADGEN.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["sh", str(ROOT / "benchmarks" / "loadgen" / "build.sh"), str(LOADGEN)], check=True,
                       stdout=subprocess.DEVNULL)
    return LOADGEN


def stamp_summary(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    samples = [_SAMPLE.unpack_from(data, i) for i in range(0, len(data) - len(data) % _SAMPLE.size, _SAMPLE.size)]
    latencies = sorted(s[0] for s in samples)
    seqs: dict[int, set[int]] = {}
    for _, station, seq in samples:
        seqs.setdefault(station, set()).add(seq)
    expected = sum(max(s) - min(s) + 1 for s in seqs.values())

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1e6 if latencies else float("nan")

    return {"received": len(samples), "controllers": len(seqs), "lost": expected - sum(len(s) for s in seqs.values()),
            "duplicates": len(samples) - sum(len(s) for s in seqs.values()),
            "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": latencies[-1] / 1e6 if latencies else float("nan")}


async def consumer_phase(tmp: Path, pki: Any, node: Any, source: str, seconds: float, warmup: float,
                         profile: Path | None) -> dict[str, Any]:
    """The C consumer on ``source``; returns its figures and the node's over the same window."""
    files = pki.identity(CONSUMER)
    consumers = tmp / "consumers.txt"
    consumers.write_text(f"{source}\n")
    stamps = tmp / "stamps.bin"
    proc = await asyncio.create_subprocess_exec(
        str(ensure_loadgen()), "run", "--url", f"amqps://127.0.0.1:{node.amqps_port}", "--cert", str(files.chain),
        "--key", str(files.key), "--ca", str(pki.trust_bundle), "--vhost", NODE, "--producers", "0",
        "--consumers", str(consumers), "--consumer-credit", "5000", "--duration", str(seconds),
        "--warmup", str(warmup), "--tlex-stamps", str(stamps), "--setup-timeout", "30",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert (await proc.stderr.readline()).strip() == b"READY"
    await asyncio.sleep(warmup)  # the consumer counts from now on
    bridge = node.tlex
    published0 = sum(c.published for c in bridge.counters.tlcs.values())
    cpu0 = cpu_seconds()
    stalls = Stalls()
    stalls.start()
    spy = None
    if profile is not None:
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(os.getpid()),
                                "--duration", str(int(seconds)), "--rate", "200", "--format", "raw", "--nonblocking",
                                "--output", str(profile.with_suffix(".raw"))],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done = await proc.stderr.readline()
    cpu = cpu_seconds() - cpu0
    loop_figures = stalls.stop()
    published = sum(c.published for c in bridge.counters.tlcs.values()) - published0
    assert done.strip() == b"DONE", done
    report = json.loads((await proc.stdout.read()).decode())
    await proc.wait()
    if spy is not None:
        spy.wait(timeout=60)
    result = stamp_summary(stamps)
    result.update(rate=result["received"] / seconds, node_cpu_us=cpu / max(1, published) * 1e6,
                  published=published, consumer_cpu_us=report["cpu_s"] / max(1, report["deliveries"]) * 1e6,
                  consumer_errors=report["errors"],
                  bridge_dropped=sum(c.dropped for c in bridge.counters.tlcs.values()), loop=loop_figures)
    return result


async def bridge_phase(tmp: Path, facts: dict[str, Any], args: argparse.Namespace, variant: str,
                       round_: int) -> dict[str, Any]:
    """One node (fresh data directory) with the bridge set as ``variant`` says: "<bi_door>/<mapem_store_interval_s>"."""
    from interchange.app.node import start_node

    door, interval = variant.split("/")
    tmp = tmp / f"{variant.replace('/', '-')}-{round_}"
    tmp.mkdir()
    pki, config = node_config(tmp, facts)
    tlex = config.tlex.model_copy(update={"bi_door": door, "mapem_store_interval_s": float(interval)})
    node = await start_node(config.model_copy(update={"tlex": tlex}))
    node.freeze_startup_heap()
    try:
        source = await subscribe(pki, node)
        profile = args.profile.with_name(f"{args.profile.stem}-{tmp.name}{args.profile.suffix}") if args.profile else None
        result = await consumer_phase(tmp, pki, node, source, args.seconds, args.warmup, profile)
        result["profile"] = str(profile) if profile else None
        return result
    finally:
        await node.close()


async def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-tlex-scale-"))
    gen = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "tlex_loadgen.py"), "--dir", str(tmp / "sim"),
                            "--controllers", str(args.controllers), "--hz", str(args.hz), "--phase", args.phase,
                            "--mapem-interval", str(args.mapem_interval), "--tick-ms", str(args.tick_ms),
                            "--multiplex", str(args.multiplex)],
                           stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert gen.stdout is not None
        print(gen.stdout.readline().strip())
        facts = json.loads((tmp / "sim" / "sim.json").read_text())
        load = os.getloadavg()
        print(f"{args.controllers} controllers x {args.hz:g} Hz ({args.phase}), {args.seconds:g} s windows, "
              f"cpus={os.cpu_count()}, load {load[0]:.2f}", flush=True)
        peer = await peer_phase(facts, args.seconds, args.warmup)
        variants = [] if args.peer_only else [(v, await bridge_phase(tmp, facts, args, v, r))
                                              for r in range(args.rounds) for v in args.variants.split(",")]
    finally:
        gen.terminate()
        out = gen.communicate(timeout=30)[0].strip().splitlines()
    generator = json.loads(out[-1]) if out else {}
    rows = [("path", "payloads/s", "lost", "p50 ms", "p99 ms", "max ms", "CPU us/payload")]
    rows.append(("peer: generator -> Broker-session client", f"{peer['rate']:.0f}", str(peer["lost"]),
                 f"{peer['p50_ms']:.2f}", f"{peer['p99_ms']:.2f}", f"{peer['max_ms']:.1f}", f"{peer['cpu_us']:.0f}"))
    if not variants:  # --peer-only: the generator's own limits
        print("\n".join("  ".join(row) for row in rows))
        print(f"generator: {generator.get('cpu_us_per_payload')} us CPU per payload, lag p50/p99/max "
              f"{generator.get('lag_ms')} ms; load {os.getloadavg()[0]:.2f}")
        return
    for variant, bridged in variants:
        rows.append((f"bridged ({variant}): generator -> node -> C consumer", f"{bridged['rate']:.0f}",
                     str(bridged["lost"]), f"{bridged['p50_ms']:.2f}", f"{bridged['p99_ms']:.2f}",
                     f"{bridged['max_ms']:.1f}", f"node {bridged['node_cpu_us']:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    for variant, bridged in variants:
        print(f"{variant}: added (bridged - peer) p50 {bridged['p50_ms'] - peer['p50_ms']:.2f} ms, "
              f"p99 {bridged['p99_ms'] - peer['p99_ms']:.2f} ms; duplicates {bridged['duplicates']}, bridge dropped "
              f"{bridged['bridge_dropped']}; consumer {bridged['consumer_cpu_us']:.1f} us CPU per message; node loop "
              f"lag p99 {bridged['loop']['lag_p99_ms']} ms, max {bridged['loop']['lag_max_ms']} ms; collections "
              f"(count, longest ms) by generation {bridged['loop']['gc']}")
    print(f"generator: {generator.get('cpu_us_per_payload')} us CPU per payload, {generator.get('rate')} payloads/s "
          f"over its run, lag p99 {generator.get('lag_ms', {}).get('p99')} ms; load {os.getloadavg()[0]:.2f}")
    if args.profile is not None:
        from profile_categories import categorise, render

        for variant, bridged in variants:
            profile = Path(bridged["profile"])
            table = render(categorise(profile.with_suffix(".raw")), bridged["node_cpu_us"])
            profile.write_text(table)
            print(f"profile ({variant}):\n{table}")
    if args.json:
        Path(args.json).write_text(json.dumps({"peer": peer, "bridged": variants, "generator": generator,
                                               "args": {k: str(v) for k, v in vars(args).items()}}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--controllers", type=int, default=1000)
    parser.add_argument("--hz", type=float, default=10.0)
    parser.add_argument("--phase", choices=("staggered", "aligned"), default="staggered")
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement window per phase")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--mapem-interval", type=float, default=2.0)
    parser.add_argument("--tick-ms", type=float, default=1.0, help="the generator's write interval")
    parser.add_argument("--profile", type=Path, help="py-spy the node over the bridged window; the table to this file")
    parser.add_argument("--variants", default="in-process/30", help=(
        "bridged phases, same run, comma-separated <bi_door>/<mapem_store_interval_s>: e.g. amqps/0,in-process/30 "
        "(the bridge before and after its in-process door and MAPEM store interval)"))
    parser.add_argument("--multiplex", type=int, default=0, metavar="N", help=(
        "the controllers in TLC multiplex sessions of N identifiers, routed by the service (0: the service plays them)"))
    parser.add_argument("--rounds", type=int, default=1, help="the variants this many times, interleaved")
    parser.add_argument("--peer-only", action="store_true", help="no node: the generator's limits against the peer")
    parser.add_argument("--json", help="write the raw results here")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
