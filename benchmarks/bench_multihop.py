"""Multi-hop federation benchmark (a script, not a test): per-hop latency on a line of four
interchanges, against a plain one-hop federation measured in the same run.

Set-up: six nodes, each its own process (``interchange broker --config``), real DNS (dnsmasq, one
domain per link, as in interchange/testing/multihop_harness.py, whose DNS fixture this script reuses), a
generated test PKI, all on 127.0.0.1:

- the line A - B - C - D, ``[ii.multihop]`` on (hop limit 3, the tightest that reaches D): an actor
  publishes DENMs at A, an actor at each of A, B, C, D subscribes to every DENM there, so each
  message is received 0, 1, 2 and 3 hops from its publisher (re-exported by B and C, hop trace in
  its annotations);
- the peer E - F, multi-hop off (what every federation does today): an actor publishes at E, actors
  at E and F subscribe.

Both publishers send paced (``--rate`` msgs/s each, not saturated), interleaved, ``--messages``
each; every body carries its send time (time.time_ns). For each message: the latency to each
subscriber (receive - send); per hop the time it added, t(k hops) - t(k-1 hops), the first against
the local subscriber at the publishing node (the copy k hops away travels over links of its own,
so hops after the first overlap the previous copy's path: an approximation); and the line's added
time per hop, (t(D) - t(A)) / 3, which is exact on average. The goal: p99 under 10 ms per hop.
Load average is printed before and after (the machine is shared).

    .venv/bin/python benchmarks/bench_multihop.py [--messages 2000] [--rate 100] [--json FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from proton import Message

from certs import TestPki, create_test_pki
from certs.tls import TlsFiles, client_context
from interchange.broker.client import ClientConnection
from interchange.ground.ports import free_port
from interchange.testing.dns_fixtures import DnsmasqServer, DnsRecords, Srv, find_dnsmasq
from interchange.testing.harness import body_bytes
from node_process import actor_api, start_node  # (this script's folder)

DOMAIN = "bench.test"
A, B, C, D, E, F = (f"{n}.{DOMAIN}" for n in "abcdef")
LINE = [A, B, C, D]
PEER = [E, F]
LINKS = [(A, B), (B, C), (C, D), (E, F)]
HOP_LIMIT = 3
PUBLISHERS = {A: "NO00001", E: "SE00001"}
TILE = "120202130121133020"


def actor(node: str) -> str:
    return f"actor-{node[0]}"


def link_domain(x: str, y: str) -> str:
    return f"{x[0]}{y[0]}.{DOMAIN}"


def properties(publisher: str) -> dict[str, Any]:
    return {"publisherId": publisher, "publicationId": f"{publisher}:denm-bench", "originatingCountry": publisher[:2],
            "protocolVersion": "DENM:1.3.1", "messageType": "DENM", "quadTree": f",{TILE},", "causeCode": 1,
            "subCauseCode": 0, "latitude": 51.485992, "longitude": 4.735311}


def capability(publisher: str) -> dict[str, Any]:
    props = properties(publisher)
    return {"application": {"messageType": "DENM", "publisherId": publisher, "publicationId": props["publicationId"],
                            "originatingCountry": props["originatingCountry"], "protocolVersion": "DENM:1.3.1",
                            "quadTree": ["1202021"], "causeCode": [1]}, "metadata": {}}


# ------------------------------------------------------------------ set-up
def node_config(pki: TestPki, name: str, workdir: Path, ii_port: int, dns: DnsmasqServer) -> Path:
    ident = pki.identity(name)
    domains = [link_domain(x, y) for x, y in LINKS if name in (x, y)]
    config = {
        "name": name, "data_dir": str(workdir / name / "var"),
        "tls": {"cert_chain": str(ident.chain), "key": str(ident.key), "trust_bundle": str(pki.trust_bundle),
                "crls": [str(c) for c in pki.crls]},
        "broker": {"host": "127.0.0.1", "port": 0},
        "log": {"path": str(workdir / name / "node.log"), "level": "warning", "properties": False, "payload": False},
        "ii": {"host": "127.0.0.1", "port": ii_port, "public_host": "127.0.0.1", "retry_min_s": 0.1,
               "retry_max_s": 1.0, "federation_backoff_s": 0.1,
               "discovery": {"dns_server": dns.host, "dns_port": dns.port, "domains": domains, "interval_s": 1.0},
               "multihop": {"enabled": name in LINE, "hop_limit": HOP_LIMIT}},
    }
    (workdir / name).mkdir(parents=True, exist_ok=True)
    path = workdir / name / "node.json"
    path.write_text(json.dumps(config))
    return path


async def actor_setup(pki: TestPki, node: str, ii_port: int, publish: bool) -> tuple[str | None, str]:
    """The node's actor: a delivery target if it publishes, and its subscription's source."""
    async with actor_api(pki.directory, actor(node), node, ii_port) as post:
        target = None
        if publish:
            await post("/capabilities", {"capabilities": [capability(PUBLISHERS[node])]})
            delivery = await post("/deliveries", {"deliveries": [{"selector": "messageType = 'DENM'"}]})
            target = delivery["deliveries"][0]["endpoints"][0]["target"]
        sub = await post("/subscriptions", {"subscriptions": [{"selector": "messageType = 'DENM'"}]})
    return target, sub["subscriptions"][0]["endpoints"][0]["source"]


# ------------------------------------------------------------------ measuring
class Subscriber:
    """Receive times by (publisher, index) at one node."""

    def __init__(self) -> None:
        self.times: dict[tuple[str, int], int] = {}

    def on_message(self, raw: bytes) -> None:
        now = time.time_ns()
        message = Message()
        message.decode(raw)
        publisher, index, _ = body_bytes(message).split(b":", 2)
        self.times.setdefault((publisher.decode(), int(index)), now)


@dataclass
class Row:
    path: str  #: what is measured
    messages: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def row(path: str, values: list[float]) -> Row:
    ordered = sorted(values)
    if not ordered:
        return Row(path, 0, float("nan"), float("nan"), float("nan"))
    return Row(path, len(ordered), ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
               ordered[-1])


def rows(sent: dict[tuple[str, int], int], subscribers: dict[str, Subscriber]) -> list[Row]:
    out = []
    for chain in (LINE, PEER):
        publisher = PUBLISHERS[chain[0]]
        keys = [k for k in sent if k[0] == publisher]
        times = {node: subscribers[node].times for node in chain}
        for hops, node in enumerate(chain):
            out.append(row(f"{chain[0][0].upper()} -> {node[0].upper()} ({hops} hops, end to end)",
                           [(times[node][k] - sent[k]) / 1e6 for k in keys if k in times[node]]))
        if len(chain) > 2:  # the whole line's added time shared by its hops
            first, last, hops_n = chain[0], chain[-1], len(chain) - 1
            out.append(row(f"per hop, {first[0].upper()} -> {last[0].upper()} / {hops_n}",
                           [(times[last][k] - times[first][k]) / 1e6 / hops_n for k in keys
                            if k in times[last] and k in times[first]]))
        for hops in range(1, len(chain)):
            before, after = chain[hops - 1], chain[hops]
            out.append(row(f"hop {hops}: {before[0].upper()} -> {after[0].upper()} (added)",
                           [(times[after][k] - times[before][k]) / 1e6 for k in keys
                            if k in times[after] and k in times[before]]))
    return out


async def warm_up(connections: dict[str, ClientConnection], targets: dict[str, Any],
                  subscribers: dict[str, Subscriber]) -> None:
    """Publish until every subscriber got a message from its chain's publisher (links all up)."""
    deadline = time.monotonic() + 60
    index = -1
    while not all(any(p == PUBLISHERS[chain[0]] for p, _ in subscribers[n].times) for chain in (LINE, PEER)
                  for n in chain):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not all subscribers reached: { {n: len(s.times) for n, s in subscribers.items()} }")
        for node in PUBLISHERS:
            await send(connections[node], targets[node], PUBLISHERS[node], index)
        index -= 1
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    for subscriber in subscribers.values():
        subscriber.times.clear()


async def send(connection: ClientConnection, target: Any, publisher: str, index: int) -> int:
    now = time.time_ns()
    body = f"{publisher}:{index}:{now}:".encode() + b"\x00" * 64  # ~100 bytes, like a small DENM
    outcome = await connection.publish(target, Message(body=body, properties=properties(publisher),
                                                       inferred=True, ttl=60.0).encode())
    assert outcome.accepted, outcome
    return now


async def measure(pki: TestPki, ports: dict[str, tuple[int, int]], args: argparse.Namespace) -> list[Row]:
    apis = await asyncio.gather(*(actor_setup(pki, n, ports[n][1], n in PUBLISHERS) for n in LINE + PEER))
    connections: dict[str, ClientConnection] = {}
    subscribers = {n: Subscriber() for n in LINE + PEER}
    targets: dict[str, Any] = {}
    try:
        for node, (target, source) in zip(LINE + PEER, apis):
            context = client_context(TlsFiles.from_pki(pki.directory, actor(node), with_crls=False))
            connections[node] = await ClientConnection.open("127.0.0.1", ports[node][0], context, node, actor(node))
            connections[node].open_receiver(source, subscribers[node].on_message, credit=1000)
            if target is not None:
                targets[node] = connections[node].open_sender(target)
        await warm_up(connections, targets, subscribers)
        sent: dict[tuple[str, int], int] = {}
        interval, start = 1.0 / args.rate, time.monotonic()
        for i in range(args.messages):
            for node, publisher in PUBLISHERS.items():
                sent[(publisher, i)] = await send(connections[node], targets[node], publisher, i)
            await asyncio.sleep(max(0.0, start + (i + 1) * interval - time.monotonic()))
        await asyncio.sleep(2.0)  # the last ones arrive
        lost = {n: sum(1 for k in sent if k[0] == PUBLISHERS[(LINE if n in LINE else PEER)[0]]
                       and k not in s.times) for n, s in subscribers.items()}
        if any(lost.values()):
            print(f"# not received (within 2 s of the last send): {lost}")
        return rows(sent, subscribers)
    finally:
        for connection in connections.values():
            await connection.close()


def machine_notes() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    return f"{os.cpu_count()} cores, {model}; Python {platform.python_version()}; kernel {platform.release()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages each publisher sends")
    parser.add_argument("--rate", type=float, default=100.0, help="msgs/s of each publisher (not saturated)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-multihop-") as tmp:
        work = Path(tmp)
        nodes = LINE + PEER
        pki = create_test_pki(work / "pki", nodes, [actor(n) for n in nodes])
        dns = DnsmasqServer(work / "dns", find_dnsmasq())
        ii_ports = {n: free_port() for n in nodes}
        dns.start(DnsRecords(srv=[Srv(link_domain(x, y), end, ii_ports[end]) for x, y in LINKS for end in (x, y)],
                             hosts={n: "127.0.0.1" for n in nodes}))
        procs: list[subprocess.Popen[str]] = []
        try:
            ports = {}
            for node in nodes:
                proc, amqps, _ = start_node(node_config(pki, node, work, ii_ports[node], dns))
                procs.append(proc)
                ports[node] = (amqps, ii_ports[node])
            results = asyncio.run(measure(pki, ports, args))
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(30)
            dns.stop()
    load_after = os.getloadavg()
    print(f"# {machine_notes()}; load before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(f"# {args.messages} messages per publisher at {args.rate:g} msgs/s each")
    print(f"{'path':<42} {'msgs':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for r in results:
        print(f"{r.path:<42} {r.messages:>6} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.max_ms:>8.2f}")
    line_hops = [r for r in results if r.path.startswith(("hop", "per hop")) and " -> F" not in r.path]
    peer_hop = next(r for r in results if r.path.startswith("hop 1: E"))
    line_hop = next(r for r in results if r.path.startswith("hop 1: A"))
    worst = max(line_hops, key=lambda r: r.p99_ms)
    print(f"# worst line hop p99 {worst.p99_ms:.2f} ms (goal < 10 ms: {'met' if worst.p99_ms < 10 else 'NOT met'}); "
          f"line hop 1 / plain one-hop peer: p50 {line_hop.p50_ms / peer_hop.p50_ms:.2f}x, "
          f"p99 {line_hop.p99_ms / peer_hop.p99_ms:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"load_before": load_before, "load_after": load_after,
                                         "rows": [asdict(r) for r in results]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
