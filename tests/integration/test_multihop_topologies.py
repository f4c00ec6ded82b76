"""Multi-hop federation on a ring of three and a line of four: real nodes, real DNS (one
domain per link, :mod:`multihop_harness`), the test PKI, multi-hop switched on everywhere.

Every node has a publisher and a subscriber to every DENM. In each settled topology every message
reaches every subscriber exactly once, over the path the routes promise (its hop trace), within
the hop limit; nothing circulates (no node drops a message as a loop or over the limit, and no
subscriber sees a second copy within a quiet period). Topology changes come from DNS, as in
production: a link cut (its domain emptied) is routed around, and a node that leaves (stopped, its
records gone) breaks nothing for the others.

A line at hop limit 2 stops A's data after two hops: D is never offered it and gets nothing.

Route changes are make-before-break (:mod:`ii_api.decisions.handover`, duplicates dropped at import by
:mod:`interchange.broker.import_duplicates`): on the ring, with A and C publishing every few
milliseconds while the link C-A comes back and their data moves from the way round B to the
direct link, every subscriber gets every message exactly once.

Each test shares its nodes between its phases (a node start costs seconds)."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from proton import Message

from certs import TestPki
from interchange.broker.hop_trace import LIMIT_KEY
from interchange.testing.broker_harness import complete_records
from interchange.testing.dns_fixtures import DnsmasqServer
from interchange.testing.harness import D
from interchange.testing.ii_harness import A, B, C, Consumer, amqp_connect, denm_message, publish
from interchange.testing.multihop_harness import MultihopFederation, running, trace_of

#: Each node's actor, publisher and country.
ACTORS = {A: ("actor-a", "NO00001", "NO"), B: ("actor-b", "SE00001", "SE"), C: ("actor-c", "DK00001", "DK"),
          D: ("actor-d", "FI00001", "FI")}
PER_PUBLISHER = 5
QUIET_S = 1.0  #: how long a subscriber must see nothing more after its last expected message
PERIOD_S = 0.005  #: a continuous publisher's pause between two messages


@dataclass
class Site:
    """One node's actor: where it publishes, what it consumes."""

    node: str
    target: str
    consumer: Consumer


def _on(links: list[tuple[str, str]], hop_limit: int) -> dict[str, dict[str, Any]]:
    """Multi-hop switched on at every node of ``links``."""
    return {n: {"enabled": True, "hop_limit": hop_limit} for link in links for n in link}


async def _sites(f: MultihopFederation, publishing: set[str]) -> dict[str, Site]:
    """Every node's actor subscribes to every DENM there; those in ``publishing`` also publish."""
    sites = {}
    for node in f.names:
        actor, publisher, country = ACTORS[node]
        target = await f.publisher(node, actor, publisher, country) if node in publishing else ""
        source = await f.subscribe(node, actor)
        sites[node] = Site(node, target, await f.consumer(actor, node, source))
    return sites


async def _exchange(f: MultihopFederation, sites: dict[str, Site], publishing: set[str],
                    paths: dict[tuple[str, str], list[str]], tag: str) -> None:
    """Each node in ``publishing`` publishes; each ``(publisher node, subscriber node)`` in ``paths``
    must get those messages exactly once with that hop trace, and no subscriber anything else."""
    sent: dict[str, list[Message]] = {}
    for node in sorted(publishing):
        actor, publisher, country = ACTORS[node]
        sent[node] = [denm_message(publisher, body=f"{tag}:{node}:{i}".encode(), country=country)
                      for i in range(PER_PUBLISHER)]
        outcomes = await asyncio.to_thread(publish, f.pki, actor, f.nodes[node].amqps_port, node, sites[node].target,
                                           sent[node])
        assert outcomes == ["accepted"] * PER_PUBLISHER, outcomes
    received = await asyncio.gather(*(
        asyncio.to_thread(_receive_all, site.consumer, PER_PUBLISHER * sum(1 for p, s in paths if s == node))
        for node, site in sites.items()))
    for (node, _site), got in zip(sites.items(), received):
        expected = sorted((bytes(m.body), paths[(p, node)]) for p, messages in sent.items() if (p, node) in paths
                          for m in messages)
        assert sorted((bytes(m.body), trace_of(m)) for m in got) == expected, f"at {node} ({tag})"
        bare = {bytes(m.body): m.properties for messages in sent.values() for m in messages}
        assert all(m.properties == bare[bytes(m.body)] for m in got)  # application properties unchanged
        assert all(m.annotations[LIMIT_KEY] == f.multihop[node]["hop_limit"] for m in got if trace_of(m)), node
    assert f.hop_drops() == {n: {"loop": 0, "hop_limit": 0} for n in f.nodes}  # nothing came round


def _receive_all(consumer: Consumer, count: int) -> list[Message]:
    """``count`` messages, then nothing for :data:`QUIET_S` (exactly once)."""
    got = []
    for _ in range(count):
        message = consumer.receive()
        assert message is not None, f"only {len(got)} of {count} arrived"
        got.append(message)
    extra = consumer.receive(QUIET_S)
    assert extra is None, f"one more than {count}: {bytes(extra.body)!r} trace {trace_of(extra)}"
    return got


def _direct(nodes: list[str]) -> dict[tuple[str, str], list[str]]:
    """Every node's messages to itself (no trace) and straight to every other (one hop)."""
    return {(p, s): ([] if p == s else [p, s]) for p in nodes for s in nodes}


@pytest.fixture
async def ring(pki: TestPki, tmp_path: Path, dnsmasq: DnsmasqServer) -> AsyncIterator[MultihopFederation]:
    links = [(A, B), (B, C), (C, A)]
    async with running(pki, tmp_path, dnsmasq, links, _on(links, hop_limit=4)) as federation:
        yield federation


def _publish_until(f: MultihopFederation, site: Site, stop: threading.Event, tag: str, sent: list[bytes]) -> None:
    """``site``'s actor publishes a DENM every :data:`PERIOD_S` until ``stop``, appending each body
    to ``sent`` once accepted (a refusal raises)."""
    actor, publisher, country = ACTORS[site.node]
    connection = amqp_connect(f.pki, actor, f.nodes[site.node].amqps_port, site.node)
    try:
        sender = connection.create_sender(site.target)
        while not stop.is_set():
            body = f"{tag}:{site.node}:{len(sent)}".encode()
            sender.send(denm_message(publisher, body=body, country=country))
            sent.append(body)
            time.sleep(PERIOD_S)
    finally:
        connection.close()


def _drain(consumer: Consumer) -> list[bytes]:
    """Every body the consumer gets until nothing more comes for :data:`QUIET_S`."""
    bodies = []
    while (message := consumer.receive(QUIET_S)) is not None:
        bodies.append(bytes(message.body))
    return bodies


async def test_ring_route_change_under_load_loses_and_duplicates_nothing(ring: MultihopFederation) -> None:
    f = ring
    sites = await _sites(f, {A, C})
    await f.relink([(A, B), (B, C)])  # the link C-A cut: A's and C's data go round B
    await f.wait_settled({A: {B: 1}, B: {A: 1, C: 1}, C: {B: 1}})
    stop = threading.Event()
    sent: dict[str, list[bytes]] = {A: [], C: []}
    publishing = asyncio.gather(*(asyncio.to_thread(_publish_until, f, sites[n], stop, "move", sent[n]) for n in sent))
    try:
        await asyncio.sleep(0.5)
        await f.relink([(A, B), (B, C), (C, A)])  # the link comes back: A and C move to it
        at_relink = {n: len(bodies) for n, bodies in sent.items()}
        # Settled: the routes round B withdrawn (kept until the direct ones were ready for the
        # overlap). B publishes nothing: nobody subscribes at B any more.
        await f.wait_settled({A: {C: 1}, B: {A: 1, C: 1}, C: {A: 1}})
        during = {n: len(bodies) - at_relink[n] for n, bodies in sent.items()}
        await asyncio.sleep(0.5)
    finally:
        stop.set()
        await publishing
    got = dict(zip(sites, await asyncio.gather(*(asyncio.to_thread(_drain, s.consumer) for s in sites.values()))))
    expected = sorted(sent[A] + sent[C])
    report = {n: {"published": len(expected), "lost": len(set(expected) - set(bodies)),
                  "duplicated": len(bodies) - len(set(bodies))} for n, bodies in got.items()}
    dropped = {n: node.core.observer.duplicate_dropped_count for n, node in f.nodes.items()}
    print(f"route change under load: {report}; published during the switch {during}; "
          f"duplicate copies dropped at import {dropped}")
    assert all(count > 10 for count in during.values()), during  # the switch happened under load
    assert all(sorted(bodies) == expected for bodies in got.values()), report
    # The old routes round B were kept until the direct ones were ready; each second copy logged.
    for node in (A, C):
        records = complete_records(f.workdir / node / "node.log")
        kept = [r for r in records if r["event"] == "ii_subscription_kept"]
        assert [(r["details"]["neighbour"], [n["neighbour"] for n in r["details"]["until_ready"]]) for r in kept] == [
            (B, [A if node == C else C])], kept
        assert sum(1 for r in records if r["event"] == "dropped_message" and r["reason"] == "duplicate") == dropped[node]
    assert f.hop_drops() == {n: {"loop": 0, "hop_limit": 0} for n in f.nodes}  # nothing came round


@pytest.fixture
async def line(pki: TestPki, tmp_path: Path, dnsmasq: DnsmasqServer) -> AsyncIterator[MultihopFederation]:
    links = [(A, B), (B, C), (C, D)]
    async with running(pki, tmp_path, dnsmasq, links, _on(links, hop_limit=3)) as federation:  # A..D: 3 hops
        yield federation


async def test_ring_of_three_exactly_once_around_a_cut_link_and_without_a_node(ring: MultihopFederation) -> None:
    f = ring
    everyone = {A, B, C}
    sites = await _sites(f, everyone)
    # Each takes the others' data straight from them: the two-hop offers around the ring are not used.
    await f.wait_offered({(A, B): {"SE00001:denm-1", "DK00001:denm-1"}, (A, C): {"SE00001:denm-1", "DK00001:denm-1"},
                          (B, A): {"NO00001:denm-1", "DK00001:denm-1"}, (B, C): {"NO00001:denm-1", "DK00001:denm-1"},
                          (C, A): {"NO00001:denm-1", "SE00001:denm-1"}, (C, B): {"NO00001:denm-1", "SE00001:denm-1"}})
    await f.wait_settled({A: {B: 1, C: 1}, B: {A: 1, C: 1}, C: {A: 1, B: 1}})
    await _exchange(f, sites, everyone, _direct([A, B, C]), "ring")

    # The link C-A is cut: A and C re-route through B, each taking the other's data there (B's
    # subscription at C serves both its own actor and A's want, likewise at A).
    await f.relink([(A, B), (B, C)])
    await f.wait_settled({A: {B: 1}, B: {A: 1, C: 1}, C: {B: 1}})
    paths = _direct([A, B, C]) | {(A, C): [A, B, C], (C, A): [C, B, A]}
    await _exchange(f, sites, everyone, paths, "cut")

    # B leaves and the link C-A is back: A and C take each other's data directly again.
    f.links.append((C, A))
    await asyncio.to_thread(sites.pop(B).consumer.close)
    f.consumers = [site.consumer for site in sites.values()]
    await f.leave(B)
    await f.wait_settled({A: {C: 1}, C: {A: 1}})
    await _exchange(f, sites, {A, C}, _direct([A, C]), "left")


async def test_line_of_four_exactly_once_within_the_hop_limit_and_without_a_node(line: MultihopFederation) -> None:
    f = line
    ends = {A, D}
    sites = await _sites(f, ends)
    # A's data travels right, D's left; once over each link: B's one subscription at A serves its
    # actor, C's actor and C's want on behalf of D (they need the same from A).
    await f.wait_offered({(B, A): {"NO00001:denm-1"}, (C, B): {"NO00001:denm-1"}, (D, C): {"NO00001:denm-1"},
                          (C, D): {"FI00001:denm-1"}, (B, C): {"FI00001:denm-1"}, (A, B): {"FI00001:denm-1"}})
    await f.wait_settled({A: {B: 1}, B: {A: 1, C: 1}, C: {B: 1, D: 1}, D: {C: 1}})
    order = [A, B, C, D]
    paths = {(p, s): order[min(order.index(p), order.index(s)):max(order.index(p), order.index(s)) + 1][
        ::1 if order.index(p) <= order.index(s) else -1] for p in ends for s in order}
    paths[(A, A)] = paths[(D, D)] = []
    assert paths[(A, D)] == [A, B, C, D] and paths[(D, A)] == [D, C, B, A]
    await _exchange(f, sites, ends, paths, "line")

    # C leaves: A and B still exchange; D (cut off) still serves its own actor.
    await asyncio.to_thread(sites.pop(C).consumer.close)
    f.consumers = [site.consumer for site in sites.values()]
    await f.leave(C)
    await f.wait_settled({A: {}, B: {A: 1}, D: {}})
    await _exchange(f, sites, ends, {(A, A): [], (A, B): [A, B], (D, D): []}, "left")


@pytest.fixture
async def short_line(pki: TestPki, tmp_path: Path, dnsmasq: DnsmasqServer) -> AsyncIterator[MultihopFederation]:
    links = [(A, B), (B, C), (C, D)]
    async with running(pki, tmp_path, dnsmasq, links, _on(links, hop_limit=2)) as federation:
        yield federation


async def test_line_of_four_at_hop_limit_two_stops_after_two_hops(short_line: MultihopFederation) -> None:
    f = short_line
    sites = await _sites(f, {A})
    # C learns A's capability from B (route via A: 2 hops to C); C never offers it to D (3 hops).
    await f.wait_offered({(B, A): {"NO00001:denm-1"}, (C, B): {"NO00001:denm-1"}, (D, C): set()})
    await f.wait_settled({A: {}, B: {A: 1}, C: {B: 1}, D: {}})
    await _exchange(f, sites, {A}, {(A, A): [], (A, B): [A, B], (A, C): [A, B, C]}, "limit")  # D: nothing
