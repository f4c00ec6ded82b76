"""Multi-hop federation end to end: real nodes, real DNS (one domain per link), the test
PKI. Re-export happens only between nodes that both switched it on and announced it; what passes
carries the hop trace, and the bare message arrives byte for byte (IP_014/015)."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from certs import TestPki
from ii_api.decisions.multihop import ANNOUNCE_KEY
from interchange.broker.hop_trace import LIMIT_KEY
from interchange.testing.dns_fixtures import DnsmasqServer
from interchange.testing.ii_harness import A, B, C, denm_message, publish, wait_for
from interchange.testing.multihop_harness import MultihopFederation, running, trace_of

NO, SE = "NO00001:denm-1", "SE00001:denm-1"
ON = {"enabled": True, "hop_limit": 4}


@pytest.fixture
async def line_on(pki: TestPki, tmp_path: Path, dnsmasq: DnsmasqServer) -> AsyncIterator[MultihopFederation]:
    async with running(pki, tmp_path, dnsmasq, [(A, B), (B, C)], {A: ON, B: ON, C: ON}) as federation:
        yield federation


@pytest.fixture
async def line_c_off(pki: TestPki, tmp_path: Path, dnsmasq: DnsmasqServer) -> AsyncIterator[MultihopFederation]:
    async with running(pki, tmp_path, dnsmasq, [(A, B), (B, C)], {A: ON, B: ON}) as federation:
        yield federation


async def test_imported_data_is_re_exported_along_a_line(line_on: MultihopFederation) -> None:
    f = line_on
    target = await f.publisher(A, "actor-a", "NO00001")
    await f.wait_offered({(B, A): {NO}, (C, B): {NO}})  # C learns A's capability from B (route via A)
    ii_b = f.nodes[B].ii
    assert ii_b is not None and ii_b.capabilities_message(C).to_json()["capabilities"][0][
        "custom-croadsix-route"] == {"via": [A]}
    source = await f.subscribe(C, "actor-c")
    consumer = await f.consumer("actor-c", C, source)
    await wait_for(lambda: f.created_links(C).get(B) and f.created_links(B).get(A), "links C->B and B->A")
    sent = [denm_message("NO00001", "denm-1", body=f"m{i}".encode()) for i in range(20)]
    outcomes = await asyncio.to_thread(publish, f.pki, "actor-a", f.nodes[A].amqps_port, A, target, sent)
    assert outcomes == ["accepted"] * len(sent)
    got = []
    for _ in sent:
        message = await asyncio.to_thread(consumer.receive)
        assert message is not None, f"only {len(got)} of {len(sent)} arrived"
        got.append(message)
    assert await asyncio.to_thread(consumer.receive, 1.0) is None  # exactly once
    assert [bytes(m.body) for m in got] == [bytes(m.body) for m in sent]
    assert all(m.properties == s.properties for m, s in zip(got, sent))
    assert all(trace_of(m) == [A, B, C] and m.annotations[LIMIT_KEY] == 4 for m in got)


async def test_a_neighbour_without_multihop_is_never_sent_re_exported_data(line_c_off: MultihopFederation) -> None:
    f = line_c_off
    target_a = await f.publisher(A, "actor-a", "NO00001")
    target_b = await f.publisher(B, "actor-b", "SE00001", country="SE")
    await f.wait_offered({(B, A): {NO}, (C, B): {SE}, (A, B): {SE}})  # to A (multi-hop) B would re-export C's
    ii_b = f.nodes[B].ii
    assert ii_b is not None and ANNOUNCE_KEY in ii_b.capabilities_message(C).to_json()
    assert f.offered(C, B) == {SE}  # not A's: C did not announce multi-hop
    # B's own actor imports A's data, and C's actor subscribes to every DENM at B
    source_b = await f.subscribe(B, "actor-b")
    source_c = await f.subscribe(C, "actor-c")
    consumer_b = await f.consumer("actor-b", B, source_b)
    consumer_c = await f.consumer("actor-c", C, source_c)
    await wait_for(lambda: f.created_links(C).get(B) and f.created_links(B).get(A), "links C->B and B->A")
    sources = f.nodes[B].core.sources
    assert {s.spec.scope.value for a, s in sources.items() if a.startswith("ii-sub-")} == {"local"}  # IP_109
    for actor, node, target, publisher in (("actor-a", A, target_a, "NO00001"), ("actor-b", B, target_b, "SE00001")):
        message = denm_message(publisher, "denm-1", body=publisher.encode(), country=publisher[:2])
        outcomes = await asyncio.to_thread(publish, f.pki, actor, f.nodes[node].amqps_port, node, target, [message])
        assert outcomes == ["accepted"]
    at_b = sorted([bytes((await asyncio.to_thread(consumer_b.receive)).body) for _ in range(2)])  # type: ignore[union-attr]
    assert at_b == [b"NO00001", b"SE00001"]
    first = await asyncio.to_thread(consumer_c.receive)
    assert first is not None and bytes(first.body) == b"SE00001" and trace_of(first) == []  # B's own: no trace
    assert await asyncio.to_thread(consumer_c.receive, 1.5) is None  # A's message never reaches C
