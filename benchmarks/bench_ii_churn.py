"""II churn vs BI latency (a script, not a test): does control-plane work stall the data plane?

One node process (broker and II share its event loop). The data plane: an actor publishes small
DENMs at a paced rate to its delivery target, another consumes them from its local subscription;
each body carries its send time. The control plane, in the churn phase: ``--rounds`` rounds (10:
ten times tests/integration/test_ii_stall.py, the largest II test), each one actor POSTing 4,000 capabilities
(actor k of ``--rounds``, each holding 30 deliveries, 300 in all) while neighbour B POSTs 300
subscriptions and DELETEs them one by one. The peer in the same run: the same BI measurement with
no churn, before the churn phase. A probe GETs an actor's capabilities every 100 ms in both
phases: control-plane requests that are not the churn's. Load average is printed before and after.

    .venv/bin/python benchmarks/bench_ii_churn.py [--rounds 10] [--rate 100] [--quiet-s 30]
        [--capabilities 4000 --subscriptions 300]   (per round; smaller for a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
from proton import Message

from certs import TestPki, create_test_pki
from certs.tls import TlsFiles, client_context
from ii_api.peers.discovery import Neighbour
from interchange.broker.client import ClientConnection
from interchange.testing.harness import body_bytes
from interchange.testing.ii_harness import DOMAIN, denm_capability, node_config, seed_neighbours
from node_process import machine_notes, start_node  # (this script's folder)

A, B = f"a.{DOMAIN}", f"b.{DOMAIN}"
PUBLISHER, CONSUMER = "actor-pub", "actor-sub"
CAPABILITIES_PER_ROUND = 4000
DELIVERIES_PER_ACTOR = 30
SUBSCRIPTIONS_PER_ROUND = 300


def churn_actor(k: int) -> str:
    return f"actor-churn-{k}"


class Http:
    """HTTPS calls to the node's II as one certificate of the test PKI."""

    def __init__(self, session: aiohttp.ClientSession, pki: TestPki, cn: str, port: int) -> None:
        self.session, self.cn, self.port = session, cn, port
        self.context = client_context(TlsFiles.from_pki(pki.directory, cn, with_crls=False))

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with self.session.request(method, f"https://127.0.0.1:{self.port}{path}", json=body, ssl=self.context,
                                        server_hostname=A) as response:
            data = await response.read()
            return response.status, json.loads(data) if data else None


@contextlib.asynccontextmanager
async def clients(pki: TestPki, port: int, names: list[str]) -> AsyncIterator[dict[str, Http]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
        yield {name: Http(session, pki, name, port) for name in names}


@dataclass
class Row:
    phase: str
    what: str
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float


def row(phase: str, what: str, values: list[float]) -> Row:
    ordered = sorted(values)
    if not ordered:
        return Row(phase, what, 0, float("nan"), float("nan"), float("nan"))
    return Row(phase, what, len(ordered), ordered[len(ordered) // 2],
               ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], ordered[-1])


# ------------------------------------------------------------------ set-up
async def setup(http: dict[str, Http], rounds: int) -> tuple[str, str]:
    """The data-plane actors' target and source; the churn actors' deliveries."""
    capability = denm_capability("SE00001", "bench", tiles=["1202021"], country="SE")
    status, _ = await http[PUBLISHER].call("POST", f"/{PUBLISHER}/capabilities", {"capabilities": [capability]})
    assert status == 200
    status, body = await http[PUBLISHER].call("POST", f"/{PUBLISHER}/deliveries",
                                              {"deliveries": [{"selector": "publisherId = 'SE00001'"}]})
    assert status == 200, body
    target = body["deliveries"][0]["endpoints"][0]["target"]
    status, body = await http[CONSUMER].call("POST", f"/{CONSUMER}/subscriptions",
                                             {"subscriptions": [{"selector": "publisherId = 'SE00001'"}]})
    assert status == 200, body
    source = body["subscriptions"][0]["endpoints"][0]["source"]
    for k in range(rounds):
        actor = churn_actor(k)
        seed = [denm_capability("NO00001", f"seed-{k}-{i}", tiles=[f"12020{i % 4}"]) for i in range(4)]
        assert (await http[actor].call("POST", f"/{actor}/capabilities", {"capabilities": seed}))[0] == 200
        selectors = [{"selector": f"messageType = 'DENM' AND quadTree LIKE '%,12020{i % 4}%'"}
                     for i in range(DELIVERIES_PER_ACTOR)]
        assert (await http[actor].call("POST", f"/{actor}/deliveries", {"deliveries": selectors}))[0] == 200
    return target, source


# ------------------------------------------------------------------ the planes
class DataPlane:
    """Paced publishing and the latency of each message at the consumer."""

    def __init__(self, publisher: ClientConnection, target: Any, rate: float) -> None:
        self.publisher, self.target, self.rate = publisher, target, rate
        self.sent: dict[int, tuple[int, str]] = {}  #: index -> (send time, phase)
        self.received: dict[int, int] = {}
        self.phase = "warm-up"

    def on_message(self, raw: bytes) -> None:
        now = time.time_ns()
        message = Message()
        message.decode(raw)
        self.received.setdefault(int(body_bytes(message).split(b":", 1)[0]), now)

    async def run(self, stop: asyncio.Event) -> None:
        props = {"publisherId": "SE00001", "publicationId": "SE00001:bench", "originatingCountry": "SE",
                 "protocolVersion": "DENM:1.3.1", "messageType": "DENM", "quadTree": ",120202130121133020,",
                 "causeCode": 1, "subCauseCode": 0, "latitude": 59.9, "longitude": 10.7}
        index, start = 0, time.monotonic()
        while not stop.is_set():
            now = time.time_ns()
            self.sent[index] = (now, self.phase)
            body = f"{index}:".encode() + b"\x00" * 96
            outcome = await self.publisher.publish(self.target, Message(body=body, properties=props, inferred=True,
                                                                         ttl=60.0).encode())
            assert outcome.accepted, outcome
            index += 1
            await asyncio.sleep(max(0.0, start + index / self.rate - time.monotonic()))

    def latencies(self, phase: str) -> list[float]:
        return [(self.received[i] - sent) / 1e6 for i, (sent, p) in self.sent.items()
                if p == phase and i in self.received]

    def lost(self, phase: str) -> int:
        return sum(1 for i, (_, p) in self.sent.items() if p == phase and i not in self.received)


async def probe(http: Http, stop: asyncio.Event, times: dict[str, list[float]], plane: DataPlane) -> None:
    """Another actor's GET every 100 ms: how long other control-plane requests wait."""
    while not stop.is_set():
        began = time.perf_counter()
        status, _ = await http.call("GET", f"/{http.cn}/capabilities")
        assert status == 200
        times.setdefault(plane.phase, []).append((time.perf_counter() - began) * 1e3)
        await asyncio.sleep(0.1)


async def churn(http: dict[str, Http], args: argparse.Namespace, posts: list[float],
                subscription_calls: list[float]) -> None:
    """Each round: 4,000 capabilities by one actor, while B adds 300 subscriptions and deletes them."""
    rounds = args.rounds
    for k in range(rounds):
        actor = churn_actor(k)
        capabilities = [denm_capability("NO00001", f"bulk-{k}-{i}", tiles=[f"1202{i % 4}{i % 3}"])
                        for i in range(args.capabilities)]

        async def register() -> None:
            began = time.perf_counter()
            status, body = await http[actor].call("POST", f"/{actor}/capabilities", {"capabilities": capabilities})  # noqa: B023 (called within this turn of the loop)
            assert status == 200, body
            posts.append(time.perf_counter() - began)

        async def subscriptions() -> None:
            selectors = [{"selector": f"publisherId = 'NO00001' AND quadTree LIKE '%,1202{i % 4}%'"}
                         for i in range(args.subscriptions)]
            began = time.perf_counter()
            status, body = await http[B].call("POST", "/subscriptions",
                                              {"version": "1.2", "name": B, "subscriptions": selectors})
            assert status == 202, body
            subscription_calls.append((time.perf_counter() - began) * 1e3)
            for item in body["subscriptions"]:
                began = time.perf_counter()
                assert (await http[B].call("DELETE", item["path"]))[0] == 204
                subscription_calls.append((time.perf_counter() - began) * 1e3)

        await asyncio.gather(register(), subscriptions())


async def measure(pki: TestPki, amqps: int, ii_port: int, args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    names = [PUBLISHER, CONSUMER, B, "actor-probe"] + [churn_actor(k) for k in range(args.rounds)]
    async with clients(pki, ii_port, names) as http:
        target, source = await setup(http, args.rounds)
        connections = []
        try:
            for cn in (PUBLISHER, CONSUMER):
                context = client_context(TlsFiles.from_pki(pki.directory, cn, with_crls=False))
                connections.append(await ClientConnection.open("127.0.0.1", amqps, context, A, cn))
            sender = connections[0].open_sender(target)
            plane = DataPlane(connections[0], sender, args.rate)
            connections[1].open_receiver(source, plane.on_message, credit=1000)
            stop = asyncio.Event()
            probe_times: dict[str, list[float]] = {}
            running = [asyncio.create_task(plane.run(stop)),
                       asyncio.create_task(probe(http["actor-probe"], stop, probe_times, plane))]
            await asyncio.sleep(3.0)
            plane.phase = "no churn (peer)"
            await asyncio.sleep(args.quiet_s)
            plane.phase = "churn"
            posts: list[float] = []
            subscription_calls: list[float] = []
            began = time.monotonic()
            await churn(http, args, posts, subscription_calls)
            churn_s = time.monotonic() - began
            plane.phase = "after"
            await asyncio.sleep(2.0)
            stop.set()
            await asyncio.gather(*running)
            rows = []
            for phase in ("no churn (peer)", "churn"):
                rows.append(row(phase, "BI latency", plane.latencies(phase)))
                rows.append(row(phase, "II probe GET", probe_times.get(phase, [])))
            rows.append(row("churn", "II subscription POST/DELETE", subscription_calls))
            notes = {"churn_s": churn_s, "capability_posts_s": posts,
                     "lost": {p: plane.lost(p) for p in ("no churn (peer)", "churn")},
                     "capabilities_registered": args.rounds * args.capabilities,
                     "subscriptions_churned": args.rounds * args.subscriptions}
            return rows, notes
        finally:
            for connection in connections:
                await connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds of 4,000 capabilities and 300 subscriptions")
    parser.add_argument("--rate", type=float, default=100.0, help="BI msgs/s (paced, not saturated)")
    parser.add_argument("--quiet-s", type=float, default=30.0, help="length of the no-churn phase")
    parser.add_argument("--capabilities", type=int, default=CAPABILITIES_PER_ROUND, help="capabilities per round")
    parser.add_argument("--subscriptions", type=int, default=SUBSCRIPTIONS_PER_ROUND, help="subscriptions per round")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-ii-churn-") as tmp:
        work = Path(tmp)
        actors = [PUBLISHER, CONSUMER, "actor-probe"] + [churn_actor(k) for k in range(args.rounds)]
        pki = create_test_pki(work / "pki", [A, B], actors)
        seed_neighbours(work / "a", [Neighbour(B, "127.0.0.1", 9, DOMAIN)])  # nobody listens: pushes retry
        path = work / "node.json"
        path.write_text(node_config(pki, A, work / "a").model_dump_json())
        proc, amqps, ii_port = start_node(path)
        try:
            rows, notes = asyncio.run(measure(pki, amqps, ii_port, args))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    load_after = os.getloadavg()
    print(f"# {machine_notes()}; load before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(f"# BI at {args.rate:g} msgs/s; churn: {notes['capabilities_registered']} capabilities in {args.rounds} POSTs "
          f"({', '.join(f'{s:.1f}' for s in notes['capability_posts_s'])} s each), "
          f"{notes['subscriptions_churned']} subscriptions added and deleted, {notes['churn_s']:.0f} s in all; "
          f"not received: {notes['lost']}")
    print(f"{'phase':<16} {'what':<30} {'count':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for r in rows:
        print(f"{r.phase:<16} {r.what:<30} {r.count:>6} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} {r.max_ms:>8.2f}")
    quiet, busy = rows[0], rows[2]
    print(f"# BI latency churn / no churn: p50 {busy.p50_ms / quiet.p50_ms:.2f}x, p99 {busy.p99_ms / quiet.p99_ms:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"load_before": load_before, "load_after": load_after, "notes": notes,
                                         "rows": [asdict(r) for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
