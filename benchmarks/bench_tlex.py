"""TLEX bridge benchmark: simulated controllers -> TCPStreaming (TLS 1.2) -> bridge -> AMQPS -> BI consumer.

    .venv/bin/python benchmarks/bench_tlex.py                       # 100 controllers x 10 Hz SPATEM, 20 s
    .venv/bin/python benchmarks/bench_tlex.py --controllers 20 --seconds 10

Three processes: the simulator with its controllers (``interchange tlex-sim --stamp``), this
process (the node: broker + II + bridge), and a consumer (this script with ``--consume``) attached
to a BI source subscribed to SPATEM and MAPEM. Each payload carries its send time, the
controller's station id and a sequence number (:func:`~interchange.bridges.tlex.payloads.stamped`):
latency is consumer receipt minus send time (same host clock); loss is the sequence numbers
missing between the first and the last one seen per controller.

Peer in the same run: the same streams received by a plain Broker-session client of the
simulator (no bridge, no broker), measured first. The bridge's *added* latency is the bridged
path's percentile minus the peer's. CPU per payload is this process's CPU time (bridge + broker +
the idle II) over the window divided by the payloads the bridge published; the consumer process's
CPU per message is reported too (it is on the bridged path only). Not a test: it prints.

The controllers run on staggered phases by default (each its own offset in the 10 Hz period, as
independent controllers do); ``--phase aligned`` makes all of them fire at one tick, a burst of
every controller per period (see ``interchange.bridges.tlex.controllers``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

NODE = "bench.interchange.test"
BRIDGE, CONSUMER = "tlex-bridge", "bench-consumer"
SELECTOR = "messageType IN ('SPATEM', 'MAPEM')"


#: the simulator on any free ports (its defaults are fixed, for a node's [tlex]; a benchmark may run beside one)
ANY_PORTS = ("--api-port", "0", "--tls-port", "0", "--plain-port", "0")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def summarise(samples: list[tuple[int, int, int]]) -> dict[str, Any]:
    """samples: (station, sequence, latency ns) -> count, loss, p50/p99/max latency (ms)."""
    latencies = sorted(s[2] for s in samples)
    by_station: dict[int, list[int]] = {}
    for station, seq, _ in samples:
        by_station.setdefault(station, []).append(seq)
    expected = sum(max(seqs) - min(seqs) + 1 for seqs in by_station.values())
    received = sum(len(set(seqs)) for seqs in by_station.values())

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] / 1e6 if latencies else float("nan")

    return {"received": len(samples), "controllers": len(by_station), "lost": expected - received,
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": latencies[-1] / 1e6 if latencies else float("nan")}


# --------------------------------------------------------------------------- consumer process
def consume(args: argparse.Namespace) -> None:
    from proton import SSLDomain, Timeout
    from proton.utils import BlockingConnection

    from certs.tls import TlsFiles, proton_ssl_domain
    from interchange.bridges.tlex.payloads import read_stamp
    from interchange.testing.harness import body_bytes

    files = TlsFiles.from_pki(args.pki, CONSUMER, with_crls=False)
    connection = BlockingConnection(f"amqps://127.0.0.1:{args.port}", virtual_host=NODE, allowed_mechs="EXTERNAL",
                                    ssl_domain=proton_ssl_domain(files, SSLDomain.MODE_CLIENT), timeout=30)
    receiver = connection.create_receiver(args.source, credit=2000)
    samples, start, end, cpu0 = [], None, None, None
    print("ready", flush=True)
    while end is None or time.monotonic() < end:
        try:
            message = receiver.receive(timeout=1.0)
        except Timeout:
            continue
        now = time.time_ns()
        receiver.accept()
        sent, station, seq = read_stamp(body_bytes(message))
        if start is None:
            start = time.monotonic()
            end = start + args.warmup + args.seconds
        if time.monotonic() >= start + args.warmup:
            cpu0 = cpu_seconds() if cpu0 is None else cpu0
            samples.append((station, seq, now - sent))
    cpu = cpu_seconds() - cpu0 if cpu0 is not None else 0.0
    connection.close()
    Path(args.out).write_text(json.dumps({"samples": samples, "cpu_us": cpu / max(1, len(samples)) * 1e6}))


# --------------------------------------------------------------------------- phases
async def peer_phase(facts: dict[str, Any], seconds: float, warmup: float) -> dict[str, Any]:
    """A Broker-session client straight at the simulator: the path without bridge and broker."""
    from certs.tls import streaming_client_context, web_client_context
    from interchange.bridges.tlex.payloads import read_stamp
    from interchange.bridges.tlex.rest import StreamingServiceClient, session_request
    from interchange.bridges.tlex.stream import SessionSupervisor

    samples: list[tuple[int, int, int]] = []
    window = {"on": False}

    def on_payload(payload: Any) -> None:
        now = time.time_ns()
        if window["on"]:
            sent, station, seq = read_stamp(payload.payload)
            samples.append((station, seq, now - sent))

    trust = Path(facts["trust_bundle"])
    async with StreamingServiceClient(facts["api_url"], facts["broker_authorization"], server_hostname=facts["server_name"],
                                      ssl_context=web_client_context(trust)) as api:
        request = session_request(facts["domain"], "broker", [c["tlc_id"] for c in facts["controllers"]])
        supervisor = SessionSupervisor(api, request, stream_ssl=streaming_client_context(trust), on_payload=on_payload,
                                       server_hostname=facts["server_name"])
        task = asyncio.create_task(supervisor.run())
        await asyncio.wait_for(supervisor.connected.wait(), 10)
        await asyncio.sleep(warmup)
        window["on"], cpu0 = True, cpu_seconds()
        await asyncio.sleep(seconds)
        window["on"], cpu = False, cpu_seconds() - cpu0
        supervisor.close_stream("benchmark phase over")
        await asyncio.sleep(0.2)
        task.cancel()
    result = summarise(samples)
    result.update(rate=len(samples) / seconds, cpu_us=cpu / max(1, len(samples)) * 1e6)
    return result


def node_config(tmp: Path, facts: dict[str, Any]) -> Any:
    from certs import create_test_pki
    from ii_api.settings.config import IIConfig
    from interchange.bridges.tlex.config import ControllerConfig, TlexBridgeConfig
    from interchange.app.config import BrokerConfig, LogConfig, NodeConfig, TlsConfig

    pki = create_test_pki(tmp / "pki", [NODE], [BRIDGE, CONSUMER])
    identity = pki.identity(NODE)
    controllers = [ControllerConfig(tlc_id=c["tlc_id"], intersections=c["intersections"],
                                    latitude=52.0 + (i % 10) * 0.004, longitude=4.3 + (i // 10) * 0.006)
                   for i, c in enumerate(facts["controllers"])]  # a city's grid of crossings
    tlex = TlexBridgeConfig(api_url=facts["api_url"], authorization=facts["broker_authorization"],
                            server_name=facts["server_name"], trust_bundle=Path(facts["trust_bundle"]),
                            domain=facts["domain"], actor=pki.identity(BRIDGE).directory, publisher_id="NL00001",
                            originating_country="NL", controllers=controllers)
    return pki, NodeConfig(
        name=NODE, data_dir=tmp / "node",
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle, crls=list(pki.crls)),
        broker=BrokerConfig(host="127.0.0.1", port=0), log=LogConfig(path=tmp / "node" / "node.log", level="warning"),
        ii=IIConfig(host="127.0.0.1", port=0, public_host="127.0.0.1"), tlex=tlex)


async def subscribe(pki: Any, node: Any) -> str:
    import aiohttp

    from certs.tls import TlsFiles, client_context

    context = client_context(TlsFiles.from_pki(pki.directory, CONSUMER, with_crls=False))
    async with aiohttp.ClientSession() as http:
        async with http.post(f"https://127.0.0.1:{node.ii_port}/{CONSUMER}/subscriptions", ssl=context,
                             server_hostname=NODE, json={"subscriptions": [{"selector": SELECTOR}]}) as response:
            body = await response.json()
    return str(body["subscriptions"][0]["endpoints"][0]["source"])


async def bridge_phase(tmp: Path, facts: dict[str, Any], seconds: float, warmup: float) -> dict[str, Any]:
    from interchange.app.node import start_node

    pki, config = node_config(tmp, facts)
    node = await start_node(config)
    node.freeze_startup_heap()  # as `interchange broker` does after start-up
    out = tmp / "consumer.json"
    try:
        source = await subscribe(pki, node)
        consumer = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--consume", "--port", str(node.amqps_port), "--source", source,
            "--pki", str(pki.directory), "--out", str(out), "--seconds", str(seconds), "--warmup", str(warmup),
            stdout=asyncio.subprocess.PIPE)
        assert consumer.stdout is not None
        await consumer.stdout.readline()  # "ready"
        bridge = node.tlex
        assert bridge is not None
        await asyncio.sleep(warmup + 1.0)
        published0 = sum(c.published for c in bridge.counters.tlcs.values())
        cpu0 = cpu_seconds()
        await asyncio.sleep(seconds - 2.0)
        cpu = cpu_seconds() - cpu0
        published = sum(c.published for c in bridge.counters.tlcs.values()) - published0
        await consumer.wait()
        dropped = sum(c.dropped for c in bridge.counters.tlcs.values())
    finally:
        await node.close()
    received = json.loads(out.read_text())
    result = summarise([tuple(s) for s in received["samples"]])
    result.update(rate=result["received"] / seconds, cpu_us=cpu / max(1, published) * 1e6,
                  bridge_dropped=dropped, consumer_cpu_us=received["cpu_us"])
    return result


def hot_path_us(count: int = 20_000) -> float:
    """CPU of the bridge's own work per payload, no I/O: decode a 0x05 frame, map it (Translator.to_bi),
    encode the AMQP message (encode_message)."""
    from pathlib import Path as P

    from interchange.bridges.tlex.outbound import MessageEncoder
    from interchange.bridges.tlex.codec import Payload, StreamDecoder, encode
    from interchange.bridges.tlex.config import ControllerConfig, TlexBridgeConfig
    from interchange.bridges.tlex.payloads import stand_in
    from interchange.bridges.tlex.publication import Translator

    config = TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=P("a"), publisher_id="NL00001",
                              originating_country="NL", controllers=[ControllerConfig(
                                  tlc_id="NLSM0001", intersections=["5-100"], latitude=51.48, longitude=4.73)])
    translator = Translator(config)
    translator.to_bi(Payload(5, 1, stand_in("MAPEM", 1, "5-100", 0), "NLSM0001"), 0)
    frames = [encode(Payload(4, 1, stand_in("SPATEM", 1, "5-100", i), "NLSM0001")) for i in range(100)]
    decoder, encoder = StreamDecoder(expect_preamble=False), MessageEncoder()
    start = time.process_time()
    for i in range(count):
        for payload in decoder.feed(frames[i % 100]):
            messages = translator.to_bi(payload, i)  # type: ignore[arg-type]
            assert isinstance(messages, list)
            for message in messages:
                encoder.encode(message)
    return (time.process_time() - start) / count * 1e6


async def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-tlex-"))
    sim_dir = tmp / "sim"
    sim = subprocess.Popen([sys.executable, "-m", "interchange", "tlex-sim", "--dir", str(sim_dir), *ANY_PORTS, "--controllers",
                            str(args.controllers), "--spatem-hz", str(args.hz), "--stamp",
                            "--mapem-interval", str(args.mapem_interval), "--phase", args.phase], stdout=subprocess.PIPE,
                           text=True, cwd=ROOT)
    try:
        assert sim.stdout is not None
        print(sim.stdout.readline().strip())
        facts = json.loads((sim_dir / "sim.json").read_text())
        print(f"{args.controllers} controllers x {args.hz:g} Hz SPATEM ({args.phase} phases, "
              f"MAPEM every {args.mapem_interval:g} s), "
              f"{args.seconds:g} s windows; "
              f"cpus={os.cpu_count()}")
        peer = await peer_phase(facts, args.seconds, args.warmup)
        bridged = await bridge_phase(tmp, facts, args.seconds, args.warmup)
    finally:
        sim.terminate()
        print(sim.communicate(timeout=30)[0].strip())
    rows = [("path", "payloads/s", "lost", "p50 ms", "p99 ms", "max ms", "CPU us/payload")]
    for name, r in (("peer: simulator -> Broker-session client", peer),
                    ("bridged: simulator -> bridge -> broker -> consumer", bridged)):
        rows.append((name, f"{r['rate']:.0f}", str(r["lost"]), f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
                     f"{r['max_ms']:.1f}", f"{r['cpu_us']:.0f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    print(f"added latency (bridged - peer): p50 {bridged['p50_ms'] - peer['p50_ms']:.2f} ms, "
          f"p99 {bridged['p99_ms'] - peer['p99_ms']:.2f} ms; bridge dropped {bridged['bridge_dropped']} "
          f"(SPATEMs before a MAPEM, IP_104); the BI consumer process used {bridged['consumer_cpu_us']:.0f} us CPU "
          f"per message")
    hot = hot_path_us()
    print(f"bridge hot path (decode frame + map + encode AMQP message, no I/O): {hot:.1f} us CPU per payload")
    if args.json:
        Path(args.json).write_text(json.dumps({"peer": peer, "bridged": bridged, "hot_path_us": hot,
                                               "args": vars(args)}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--controllers", type=int, default=100)
    parser.add_argument("--hz", type=float, default=10.0)
    parser.add_argument("--phase", choices=("staggered", "aligned"), default="staggered",
                        help="controllers' SPATEM ticks: each its own phase (independent controllers), or all "
                             "aligned (one burst of every controller per 1/hz: the worst case)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement window per phase")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--mapem-interval", type=float, default=2.0,
                        help="MAPEM repetition; the bridge publishes a controller's SPATEM only after its MAPEM (IP_104)")
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--consume", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    parser.add_argument("--pki", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consume:
        consume(args)
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
