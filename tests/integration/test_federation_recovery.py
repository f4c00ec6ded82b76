"""Federation recovers by itself within seconds: a neighbour that restarts without its subscriptions
(same capabilities, nothing else changed) refuses the data link of a subscription it no longer knows;
the refusal makes the subscriber poll that subscription at once, and, answered 404, subscribe anew,
so data flows again within 10 s (not at the next status poll, 300 s here). Every link state change
is in the JSON log.

Three real nodes in-process (tests/test_ii_federation_e2e.py's harness: dnsmasq, the test PKI)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from interchange.testing.broker_harness import complete_records
from certs import TestPki
from interchange.testing.dns_fixtures import DnsmasqServer
from ii_api.storage.store import Store
from interchange.testing.ii_harness import A, C, Consumer, denm_capability, denm_message, publish, wait_for
from interchange.ground.ports import free_port
from test_ii_federation_e2e import DENM_HERE, Federation, make_federation, register_publisher

RECOVERY_S = 10.0


@pytest.fixture
async def federation(pki: TestPki, tmp_path, dnsmasq: DnsmasqServer) -> AsyncIterator[Federation]:
    made = await make_federation(pki, tmp_path, dnsmasq, {A: {"amqps_port": free_port()}})  # the same after a restart
    try:
        yield made
    finally:
        await made.close()


def _link_connected(federation: Federation) -> bool:
    return any(link["connected"] for o in federation.nodes[C].ii.status()["outgoing"] for link in o["links"])


def _both_links_up(log: Path) -> list[dict] | None:
    """The log's records once it holds two ``federation_link_up`` (the log is written by a thread, a few ms
    after the event): the link before the restart and the new subscription's link after it."""
    records = complete_records(log)
    return records if sum(r["event"] == "federation_link_up" for r in records) >= 2 else None


async def test_neighbour_restarted_empty_is_resubscribed_within_seconds(federation: Federation) -> None:
    pki, nodes = federation.pki, federation.nodes
    actor_c = federation.https("actor-c", C)
    target = await register_publisher(federation.https("actor-a", A), denm_capability())
    await wait_for(lambda: nodes[C].ii.neighbour_capabilities(A), "A's capabilities at C")
    _, body = await actor_c.post("/actor-c/subscriptions", {"subscriptions": [{"selector": DENM_HERE}]})
    source = body["subscriptions"][0]["endpoints"][0]["source"]
    await wait_for(lambda: _link_connected(federation), "C's data link to A")
    consumer = await asyncio.to_thread(Consumer, pki, "actor-c", nodes[C].amqps_port, C, source)
    try:
        await asyncio.to_thread(publish, pki, "actor-a", nodes[A].amqps_port, A, target, [denm_message(body=b"before")])
        assert (got := await asyncio.to_thread(consumer.receive)) is not None and bytes(got.body) == b"before"
        # A restarts without its subscriptions (restored from a backup, say): it knows neither C's
        # subscription nor its source, and offers the same capabilities as before, so nothing but
        # the refused data link tells C
        await federation.stop(A)
        with Store.open(federation.workdir / A) as store:
            assert store.incoming.delete_owned_by(C)
        restarted = time.monotonic()
        await federation.start(A)
        delivered = None
        n = 0
        while delivered is None and time.monotonic() - restarted < RECOVERY_S + 5:
            n += 1
            await asyncio.to_thread(publish, pki, "actor-a", nodes[A].amqps_port, A, target,
                                    [denm_message(body=b"after-%d" % n)])
            got = await asyncio.to_thread(consumer.receive, 0.2)
            if got is not None:
                delivered = time.monotonic() - restarted
    finally:
        await asyncio.to_thread(consumer.close)
    print(f"\nneighbour restarted empty: delivering again after {delivered} s")
    assert delivered is not None and delivered <= RECOVERY_S, f"delivering again only after {delivered} s"
    records = await wait_for(lambda: _both_links_up(federation.workdir / C / "node.log"),
                             "C's log: the data link up before the restart and again after it")
    downs = [r["details"] for r in records if r["event"] == "federation_link_down"]
    assert any(A == d["neighbour"] and "sub-" in d["source"] and d["reason"] for d in downs), downs


async def test_neighbour_that_forgot_a_subscription_is_resubscribed_at_once(federation: Federation) -> None:
    """The same without a restart: A forgets C's subscription and drops its source (as when a
    departed neighbour's grace ends) and tells C nothing else; only the refused data link does."""
    pki, nodes = federation.pki, federation.nodes
    actor_c = federation.https("actor-c", C)
    target = await register_publisher(federation.https("actor-a", A), denm_capability())
    await wait_for(lambda: nodes[C].ii.neighbour_capabilities(A), "A's capabilities at C")
    _, body = await actor_c.post("/actor-c/subscriptions", {"subscriptions": [{"selector": DENM_HERE}]})
    source = body["subscriptions"][0]["endpoints"][0]["source"]
    await wait_for(lambda: _link_connected(federation), "C's data link to A")
    consumer = await asyncio.to_thread(Consumer, pki, "actor-c", nodes[C].amqps_port, C, source)
    service = nodes[A].ii
    assert service is not None
    try:
        async with service.lock:
            await service.incoming.expire(C)
        forgot = time.monotonic()
        delivered, n = None, 0
        while delivered is None and time.monotonic() - forgot < RECOVERY_S + 5:
            n += 1
            await asyncio.to_thread(publish, pki, "actor-a", nodes[A].amqps_port, A, target,
                                    [denm_message(body=b"after-%d" % n)])
            if await asyncio.to_thread(consumer.receive, 0.2) is not None:
                delivered = time.monotonic() - forgot
    finally:
        await asyncio.to_thread(consumer.close)
    print(f"\nneighbour forgot the subscription: delivering again after {delivered} s")
    assert delivered is not None and delivered <= RECOVERY_S, f"delivering again only after {delivered} s"
