"""Start-up of a node bridging N traffic lights (a script, not a test): time, CPU, RSS, loop pauses.

    .venv/bin/python benchmarks/bench_tlex_start.py                          # 2,000 controllers
    .venv/bin/python benchmarks/bench_tlex_start.py --controllers 100 --processes 2

The simulator (``interchange tlex-sim --virtual``: the service plays the controllers, 0.2 Hz
SPATEM, each its own phase, MAPEM first) runs in its own process; each phase runs the node in a
fresh process of its own (so RSS is the node's alone):

1. **peer**: the same node without ``[tlex]`` (what the node costs by itself);
2. **fresh**: an empty data directory: the bridge registers 3 capabilities per controller, its
   delivery and its SREM subscriptions;
3. **restart**: the same data directory (everything registered is kept);
4. **replace**: the same, with another SPATEM protocol version (the bridge replaces a third of
   its capabilities: a DELETE and a POST each).

Per phase: seconds until ``start_node`` returned (the bridge registered, its Broker session
being opened) and until the bridge's stream is up, the node process's CPU seconds meanwhile, the
longest pause of its event loop meanwhile (a 10 ms sleeper; includes waiting for a CPU on a loaded
machine), RSS after 3 s of traffic and the peak (VmHWM). Load average before and after.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


#: the simulator on any free ports (its defaults are fixed, for a node's [tlex]; a benchmark may run beside one)
ANY_PORTS = ("--api-port", "0", "--tls-port", "0", "--plain-port", "0")


def memory_kb() -> dict[str, int]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


async def node_phase(config_path: Path) -> dict[str, Any]:
    """In the node's own process: start it, measure, stop it."""
    from interchange.app.config import NodeConfig
    from interchange.app.node import start_node

    config = NodeConfig.model_validate_json(config_path.read_text())
    longest = 0.0

    async def watch() -> None:
        nonlocal longest
        while True:
            began = time.perf_counter()
            await asyncio.sleep(0.01)
            longest = max(longest, time.perf_counter() - began - 0.01)

    watcher = asyncio.create_task(watch())
    began, cpu = time.perf_counter(), time.process_time()
    node = await start_node(config)
    started = time.perf_counter() - began
    streaming = None
    if node.tlex is not None and node.tlex.supervisor is not None:
        await asyncio.wait_for(node.tlex.supervisor.connected.wait(), 60)
        streaming = time.perf_counter() - began
    result: dict[str, Any] = {"start_s": started, "stream_up_s": streaming, "cpu_s": time.process_time() - cpu,
                              "longest_pause_ms": longest * 1000}
    watcher.cancel()
    node.freeze_startup_heap()  # as `interchange broker` does after start-up
    await asyncio.sleep(3)
    assert node.ii is not None
    result.update(capabilities=len(node.ii.actor_capabilities), **memory_kb())
    await node.close()
    return result


def run_phase(name: str, config: Any, tmp: Path) -> dict[str, Any]:
    path = tmp / f"{name}.json"
    path.write_text(config.model_dump_json())
    out = subprocess.run([sys.executable, __file__, "--node", str(path)], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(args: argparse.Namespace) -> None:
    import bench_tlex

    tmp = Path(tempfile.mkdtemp(prefix="bench-tlex-start-"))
    load = os.getloadavg()
    sim = subprocess.Popen([sys.executable, "-m", "interchange", "tlex-sim", "--dir", str(tmp / "sim"), *ANY_PORTS, "--virtual",
                            "--controllers", str(args.controllers), "--spatem-hz", "0.2"],
                           stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert sim.stdout is not None
        print(sim.stdout.readline().strip())
        facts = json.loads((tmp / "sim" / "sim.json").read_text())
        _, config = bench_tlex.node_config(tmp, facts)
        config = config.model_copy(update={"broker": config.broker.model_copy(update={"processes": args.processes})})
        assert config.tlex is not None
        replaced = config.tlex.model_copy(update={"protocol_versions": {**config.tlex.protocol_versions,
                                                                        "SPATEM": "SPATEM:2.2.1"}})
        peer = config.model_copy(update={"tlex": None, "data_dir": tmp / "peer"})
        rows = [("peer (no [tlex])", run_phase("peer", peer, tmp)),
                ("fresh", run_phase("fresh", config, tmp)),
                ("restart", run_phase("restart", config, tmp)),
                ("replace (new SPATEM version)", run_phase("replace", config.model_copy(update={"tlex": replaced}), tmp))]
    finally:
        sim.terminate()
        sim.communicate(timeout=30)
    print(f"{args.controllers} controllers, broker.processes {args.processes}; load average before "
          f"{load[0]:.2f}, after {os.getloadavg()[0]:.2f}; cpus={os.cpu_count()}")
    print("phase | capabilities | start s | stream up s | CPU s | longest pause ms | RSS MB | peak RSS MB")
    for name, r in rows:
        stream = f"{r['stream_up_s']:.1f}" if r["stream_up_s"] is not None else "-"
        print(f"{name} | {r['capabilities']} | {r['start_s']:.1f} | {stream} | {r['cpu_s']:.1f} | "
              f"{r['longest_pause_ms']:.0f} | {r['VmRSS'] / 1024:.0f} | {r['VmHWM'] / 1024:.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--controllers", type=int, default=2000)
    parser.add_argument("--processes", type=int, default=1, help="broker.processes of the node")
    parser.add_argument("--node", type=Path, help=argparse.SUPPRESS)  # one phase, in its own process
    arguments = parser.parse_args()
    if arguments.node is not None:
        print(json.dumps(asyncio.run(node_phase(arguments.node))))
    else:
        main(arguments)
