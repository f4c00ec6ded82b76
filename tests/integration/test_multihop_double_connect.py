"""Two interchanges that federate with each other at the same moment (the RVI core
protocol's "double connect"): started together, discovering each other in the same round, their
actors' capabilities and subscriptions registered at both at once, so each pushes capabilities to
and subscribes at the other at the same moment while both publish.

A link belongs to one subscription and is opened only by the subscriber (why there is nothing to
resolve: :mod:`ii_api.peers.federation`), so what must hold is: one subscription each way, one link per
subscription (connected once, the only consumer of its source), nothing lost of what was published
once the subscription's source existed, nothing duplicated, no hop drop. Both with multi-hop
federation on and off (a plain federation, the default)."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from proton import Message
from proton.utils import BlockingConnection, BlockingSender

from certs import TestPki
from interchange.testing.broker_harness import complete_records
from interchange.testing.dns_fixtures import DnsmasqServer
from interchange.testing.ii_harness import A, B, Consumer, amqp_connect, denm_message
from interchange.testing.multihop_harness import MultihopFederation

ON = {"enabled": True, "hop_limit": 4}
ACTORS = {A: ("actor-a", "NO00001", "NO"), B: ("actor-b", "SE00001", "SE")}
AFTER_SETTLED = 10  #: messages each side publishes once both links are up
QUIET_S = 1.5
T = TypeVar("T")


@dataclass
class Publisher:
    """One actor publishing over one connection, from one worker thread (proton's blocking API is
    not shared between threads); remembers, per message, whether the other node's subscription
    had its source here when it was sent."""

    f: MultihopFederation
    node: str
    target: str
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1))
    connection: BlockingConnection | None = None
    sender: BlockingSender | None = None
    sent: list[tuple[bytes, bool]] = field(default_factory=list)  #: (body, the remote source existed)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def open(self) -> None:
        actor = ACTORS[self.node][0]
        self.connection = await self._call(amqp_connect, self.f.pki, actor, self.f.nodes[self.node].amqps_port,
                                           self.node)
        self.sender = await self._call(self.connection.create_sender, self.target)

    def source_exists(self) -> bool:
        return any(a.startswith("ii-sub-") for a in self.f.nodes[self.node].core.sources)

    async def send(self) -> None:
        _, publisher, country = ACTORS[self.node]
        body = f"{self.node}:{len(self.sent)}".encode()
        before = self.source_exists()  # checked before sending: the message meets at least this state
        assert self.sender is not None
        await self._call(self.sender.send, denm_message(publisher, body=body, country=country))
        self.sent.append((body, before))

    async def close(self) -> None:
        if self.connection is not None:
            await self._call(self.connection.close)
        self.executor.shutdown()


def _drain(consumer: Consumer) -> list[Message]:
    got = []
    while (message := consumer.receive(QUIET_S)) is not None:
        got.append(message)
    return got


def _requested_ms(f: MultihopFederation, node: str) -> int:
    """When ``node`` requested its (only) subscription at the other, from its JSON log."""
    for entry in complete_records(f.workdir / node / "node.log"):
        if entry.get("event") == "ii_subscription_requested":
            return int(entry["timestampMs"])
    raise AssertionError(f"{node} requested no subscription")


def _link_facts(f: MultihopFederation, node: str) -> tuple[int, list[int], int]:
    """(subscriptions at neighbours, connects of their links, consumer links on the sources served here)."""
    ii = f.nodes[node].ii
    assert ii is not None
    runners = ii.outgoing.runners()
    connects = [status.connects for runner in runners for status in runner.links()]
    sources = [s for a, s in f.nodes[node].core.sources.items() if a.startswith("ii-sub-")]
    return len(runners), connects, sum(len(s.links) for s in sources)


@pytest.mark.parametrize("multihop", [ON, {}], ids=["multihop", "plain"])
async def test_nodes_subscribing_at_each_other_at_once_get_one_link_per_subscription(
        pki: TestPki, tmp_path: Path, dnsmasq: DnsmasqServer, multihop: dict[str, Any]) -> None:
    f = MultihopFederation(pki, tmp_path, dnsmasq, [(A, B)], {A: multihop, B: multihop})
    publishers: list[Publisher] = []
    try:
        # Started together, not yet linked in DNS: each actor publishes and subscribes at its own node.
        await f.start_all(together=True, linked=False)
        targets = await asyncio.gather(*(f.publisher(n, ACTORS[n][0], ACTORS[n][1], ACTORS[n][2]) for n in (A, B)))
        sources = await asyncio.gather(*(f.subscribe(n, ACTORS[n][0]) for n in (A, B)))
        consumers = await asyncio.gather(*(f.consumer(ACTORS[n][0], n, s) for n, s in zip((A, B), sources)))
        publishers = [Publisher(f, n, t) for n, t in zip((A, B), targets)]
        await asyncio.gather(*(p.open() for p in publishers))
        # Both publish while they find each other in the same discovery round (their timers started
        # together), push capabilities to each other and subscribe at each other at once.
        settled = asyncio.Event()

        async def keep_publishing() -> None:
            while not settled.is_set():
                await asyncio.gather(*(p.send() for p in publishers))

        publishing = asyncio.create_task(keep_publishing())
        try:
            await f.relink([(A, B)])
            await f.wait_settled({A: {B: 1}, B: {A: 1}})
        finally:
            settled.set()
            await publishing
        for _ in range(AFTER_SETTLED):
            await asyncio.gather(*(p.send() for p in publishers))
        received = dict(zip((A, B), await asyncio.gather(*(asyncio.to_thread(_drain, c) for c in consumers))))
        racing = [sum(1 for _, existed in p.sent[:-AFTER_SETTLED] if existed) for p in publishers]
        assert all(racing), f"no message was published while a link was being opened ({racing})"
        requested = [_requested_ms(f, n) for n in (A, B)]
        assert abs(requested[0] - requested[1]) < 2000, requested  # each right after the later discovery (1 s rounds)

        for here, there in ((A, B), (B, A)):
            bodies = [bytes(m.body) for m in received[here]]
            assert len(bodies) == len(set(bodies)), f"duplicates at {here}"
            mine = {b for b, _ in next(p for p in publishers if p.node == here).sent}
            theirs = next(p for p in publishers if p.node == there).sent
            assert mine <= set(bodies), f"local messages lost at {here}"
            must = {b for b, source_existed in theirs if source_existed}
            assert len(must) >= AFTER_SETTLED and must <= set(bodies), f"lost at {here}: {sorted(must - set(bodies))}"
            assert set(bodies) <= mine | {b for b, _ in theirs}
            # one subscription each way, its one link connected once, the only consumer of its source
            assert _link_facts(f, here) == (1, [1], 1), _link_facts(f, here)
            ii = f.nodes[here].ii
            assert ii is not None and len((await ii.incoming.list_incoming(there)).subscriptions) == 1
        assert f.hop_drops() == {A: {"loop": 0, "hop_limit": 0}, B: {"loop": 0, "hop_limit": 0}}
        # Duplicates are checked at import with multi-hop only (plain federation keeps every message).
        assert all((node.core.duplicates is not None) == bool(multihop) for node in f.nodes.values())
        assert all(node.core.observer.duplicate_dropped_count == 0 for node in f.nodes.values())  # one path each
    finally:
        for publisher in publishers:
            await publisher.close()
        await f.close()
