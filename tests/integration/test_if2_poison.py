"""IF2 -> C-Roads when the BI will not take a message, and across lost BI connections.

The IF2 side is the counterpart of ``tests/integration/if2_backoffice`` (pika, written from the IF2 spec): its
operator sets up a virtual host with a dead-letter exchange in the queue policy (IF2 7.2, as
RabbitMQ definitions), its back-office publishes as 7.3.2 does. The node is real (BI over AMQPS,
II over HTTPS), RabbitMQ is the session's private one.

A message over the BI's max-message-size (1 MiB) is refused before it is sent, rejected at RabbitMQ
without requeue (so it is dead-lettered), logged and counted, and the messages around it flow: the
scenario with 5,000 small messages and one of 2 MiB passes four checks, and each broken variant
(of the counterpart, or of the bridge by fault injection) fails exactly the checks the table names.
"""
from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from certs import TestPki
from if2_backoffice import DEAD_LETTER_EXCHANGE, ConnectBackOffice, Publication, Received, routing_key
from interchange.testing.if2_harness import HAZELDONK_POINT, WAIT_S, bridge_node_config, croads_consumer
from interchange.bridges.if2.bi_link import BiLink
from interchange.broker.client import Outcome, SenderState
from interchange.testing.ii_harness import Consumer, start, wait_for, wait_logged
from interchange.testing.rabbitmq import RabbitMQ

MiB = 1024 * 1024
LAT, LON = HAZELDONK_POINT
KEY = routing_key("DENM", "1.2.1", "RWS", "5", LAT, LON)
QUIET_S = 1.5  #: how long no more copies must come before the count is final


@dataclass(frozen=True)
class Scenario:
    """What the counterpart does: ``small`` messages, ``big`` (bytes) after the first half of them."""

    small: int = 5_000
    big: tuple[int, ...] = (2 * MiB,)
    wrong_position_at: int | None = None  #: this small message's lat/lon lie outside its key's tile
    dead_letters: bool = True  #: the operator's policy names a dead-letter exchange
    bi_door: str = "in-process"  #: the bridge's way into the BI (``[if2] bi_door``)

    def publications(self) -> list[Publication]:
        out = []
        for i in range(self.small):
            lat, lon = (42.0, -8.6) if i == self.wrong_position_at else (LAT, LON)
            out.append(Publication("DENM", KEY, b"n%05d" % i, lat, lon, ttl_ms=600_000))
            if i == self.small // 2:
                out += [Publication("DENM", KEY, bytes([0x42 + k]) * size, LAT, LON, ttl_ms=600_000)
                        for k, size in enumerate(self.big)]
        return out


@dataclass
class Observed:
    scenario: Scenario
    delivered: Counter[bytes]
    dead: list[Received]
    connects: int
    counts: dict[str, int]
    refusals: list[dict[str, object]]  #: the details of each if2_import_refused event


def _drain(consumer: Consumer, expected: set[bytes]) -> Counter[bytes]:
    """Every copy the C-Roads consumer gets: until all ``expected`` came (or none for WAIT_S), then
    whatever more comes before QUIET_S of silence (duplicates)."""
    seen: Counter[bytes] = Counter()
    while not expected <= seen.keys():
        got = consumer.receive(WAIT_S)
        if got is None:
            break
        seen[bytes(got.body)] += 1
    while (got := consumer.receive(QUIET_S)) is not None:
        seen[bytes(got.body)] += 1
    return seen


@dataclass(frozen=True)
class Site:
    """Where a scenario runs: the test PKI and RabbitMQ, a work directory, the conftest's IF2 fixtures."""

    pki: TestPki
    rabbitmq: RabbitMQ
    workdir: Path
    vhost: Callable[..., Awaitable[str]]  #: the if2_vhost fixture
    connect: ConnectBackOffice  #: the connect_backoffice fixture


async def run(scenario: Scenario, site: Site, vhost: str) -> Observed:
    pki = site.pki
    await site.vhost(vhost, dead_letters=scenario.dead_letters)
    node = await start(bridge_node_config(pki, site.rabbitmq, site.workdir, vhost=vhost, bi_door=scenario.bi_door))
    office = await site.connect(vhost)
    try:
        await wait_for(lambda: node.if2.rabbitmq_connected and node.if2.bi_connected, "the bridge's connections")
        consumer = await croads_consumer(pki, node, "messageType = 'DENM'")
        try:
            publications = scenario.publications()
            # waited for: the small ones a bridge can deliver (not waiting WAIT_S for one that cannot come);
            # the checks look at every one
            deliverable = {p.body for p in publications if len(p.body) < 100 and p.lat == LAT}
            draining = asyncio.ensure_future(asyncio.to_thread(_drain, consumer, deliverable))
            await office.publish_all(publications)
            delivered = await draining
        finally:
            await asyncio.to_thread(consumer.close)
        await wait_for(lambda: node.if2.in_flight == 0, "the bridge to settle every IF2 message", timeout=60.0)
        dead = await office.dead_letters() if scenario.dead_letters else []
        refused = await wait_logged(node, "if2_import_refused", node.if2.counts["import_refused"])
        return Observed(scenario, delivered, dead, node.if2.bi.connects, dict(node.if2.counts), refused)
    finally:
        await office.close()
        await node.close()


def _delivered_once(seen: Observed) -> str | None:
    small = [b"n%05d" % i for i in range(seen.scenario.small)]
    missing = [body for body in small if seen.delivered[body] == 0]
    twice = [body for body in small if seen.delivered[body] > 1]
    return f"{len(missing)} missing {missing[:3]}, {len(twice)} twice {twice[:3]}" if missing or twice else None


def _refused(seen: Observed) -> str | None:
    sizes = [r.get("bytes") for r in seen.refusals]
    if seen.counts["import_refused"] != 1 or sizes != [2 * MiB] or \
            "amqp:link:message-size-exceeded" not in str(seen.refusals[0]["error"]):
        return f"refused {seen.counts['import_refused']}: {seen.refusals}"
    return None


def _dead_lettered(seen: Observed) -> str | None:
    dead = [(len(d.body), d.routing_key, d.headers.get("x-death", [{}])[0].get("reason")) for d in seen.dead]
    return None if dead == [(2 * MiB, KEY, "rejected")] else f"dead letters: {dead}"


def _no_reconnection(seen: Observed) -> str | None:
    return None if seen.connects == 1 else f"the BI link was connected {seen.connects} times"


CHECKS: dict[str, Callable[[Observed], str | None]] = {
    "delivered once": _delivered_once, "refused": _refused, "dead-lettered": _dead_lettered,
    "no reconnection": _no_reconnection}


def verdict(seen: Observed) -> dict[str, str]:
    """The checks that failed, and why."""
    return {name: problem for name, check in CHECKS.items() if (problem := check(seen)) is not None}


def _ignores_the_bi_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: the bridge does not read the max-message-size of the BI's attach, so the BI
    detaches the link for the message; the bridge learns the limit from that (one reconnection)."""
    monkeypatch.setattr(SenderState, "max_message_size", property(lambda self: None))


def _sends_refusals_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: the bridge takes every refusal for a passing failure, so it tries the message
    again until it gives up (dead-lettered all the same, but counted as given up, not refused)."""
    submit, submit_all = BiLink.submit, BiLink.submit_all

    def transient(self: BiLink, raw: bytes, on_outcome: Callable[[Outcome], None]) -> None:
        submit(self, raw, lambda outcome: on_outcome(replace(outcome, final=False)))

    def transient_all(self: BiLink, raws: Sequence[bytes], later: Callable[[int], Callable[[Any], None]]) -> list[Any]:
        def answer_later(i: int) -> Callable[[Any], None]:
            on_outcome = later(i)
            return lambda outcome: on_outcome(replace(outcome, final=False))
        return [None if a is None else replace(a, final=False) for a in submit_all(self, raws, answer_later)]

    monkeypatch.setattr(BiLink, "submit", transient)
    monkeypatch.setattr(BiLink, "submit_all", transient_all)


SMALL = 300  #: the broken variants' stream (the conforming run sends 5,000)
#: broken variant -> (its counterpart scenario, a fault of the bridge, the checks that must fail)
MUTANTS: dict[str, tuple[Scenario, Callable[[pytest.MonkeyPatch], None] | None, set[str]]] = {
    "the operator configured no dead-letter exchange": (Scenario(SMALL, dead_letters=False), None, {"dead-lettered"}),
    "a message's lat/lon outside its key's tile": (Scenario(SMALL, wrong_position_at=7), None,
                                                   {"delivered once", "refused", "dead-lettered"}),
    "the big message fits the BI": (Scenario(SMALL, big=(MiB // 2,)), None, {"refused", "dead-lettered"}),
    "the bridge ignores the BI's max-message-size": (Scenario(SMALL, bi_door="amqps"), _ignores_the_bi_limit,
                                                     {"no reconnection"}),
    "the bridge sends refused messages again": (Scenario(SMALL), _sends_refusals_again, {"refused"}),
}


@pytest.fixture
def site(if2_pki: TestPki, rabbitmq_if2: RabbitMQ, tmp_path: Path, if2_vhost: Callable[..., Awaitable[str]],
         connect_backoffice: ConnectBackOffice) -> Site:
    return Site(if2_pki, rabbitmq_if2, tmp_path, if2_vhost, connect_backoffice)


@pytest.mark.parametrize("bi_door", ["in-process", "amqps"])
async def test_one_oversize_message_among_5000_is_refused_and_dead_lettered(site: Site, bi_door: str) -> None:
    """IF2 -> C-Roads, 5,000 small messages and one of 2 MiB (the BI takes 1 MiB): every small one
    arrives once, the big one is refused before sending (counted, logged with the BI's limit) and
    dead-lettered by RabbitMQ (reason rejected), and the BI link stays up; through the door and over AMQPS."""
    seen = await run(Scenario(bi_door=bi_door), site, f"if2-poison-{bi_door}")
    assert verdict(seen) == {}
    assert seen.counts["imported"] == 5_000 and seen.counts["bi_retried"] == 0
    limit = {"amqps": "peer", "in-process": "broker"}[bi_door]  # as the attach said; the door's own limit
    assert f"over the {limit}'s max-message-size of 1048576" in str(seen.refusals[0]["error"])
    assert seen.dead[0].headers["x-death"][0]["exchange"] == "DENM"
    assert seen.dead[0].exchange == DEAD_LETTER_EXCHANGE


@pytest.mark.parametrize("mutant", list(MUTANTS))
async def test_each_broken_variant_fails_its_checks(mutant: str, site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario, fault, failing = MUTANTS[mutant]
    if fault is not None:
        fault(monkeypatch)
    seen = await run(scenario, site, f"if2-mutant-{list(MUTANTS).index(mutant)}")
    assert set(verdict(seen)) == failing, verdict(seen)
