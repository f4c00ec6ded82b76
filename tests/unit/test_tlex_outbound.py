"""The TLEX bridge's publish path (:class:`~interchange.bridges.tlex.outbound.Outbound`), with the
broker's answers injected: what it refuses for good (larger than the broker's max-message-size,
before sending; a rejected outcome), what it sends again (no outcome because the link or connection
went; released), in order, at most three times and not past the TTL, and IP_104 after a refused
MAPEM; an SREM the bridge cannot pass on. The real broker's max-message-size: tests/integration/test_tlex_bridge.py."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proton import Message

from certs import TestPki
from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.config import ControllerConfig, TlexBridgeConfig
from interchange.bridges.tlex.outbound import MAX_ATTEMPTS, MessageEncoder, Outbound
from interchange.bridges.tlex.payloads import stand_in
from interchange.bridges.tlex.publication import WAITS_FOR_MAPEM, BiMessage, Dropped, Translator
from interchange.broker.client import Outcome

if TYPE_CHECKING:
    from interchange.bridges.tlex.bridge import TlexBridge


@dataclass
class FakeSender:
    """The sender link's state as Outbound reads it (fault injection: credit and the broker's limit)."""

    credit: int = 100
    max_message_size: int | None = None
    closed: bool = False


@dataclass
class FakeEngine:
    sent: list[tuple[bytes, Callable[[Outcome], None]]] = field(default_factory=list)

    def send(self, state: Any, message: bytes, on_outcome: Callable[[Outcome], None] | None = None) -> bool:
        assert on_outcome is not None
        self.sent.append((message, on_outcome))
        state.credit -= 1
        return True

    def answer(self, outcome: Outcome) -> None:
        sent, self.sent = self.sent, []
        for _, on_outcome in sent:
            on_outcome(outcome)


class Flushes:
    count = 0

    def flush(self) -> None:
        self.count += 1


@dataclass
class Tally:
    published_by: dict[str, int] = field(default_factory=dict)
    queue_dropped_by: dict[str, int] = field(default_factory=dict)

    def published(self, tlc: str) -> None:
        self.published_by[tlc] = self.published_by.get(tlc, 0) + 1

    def queue_dropped(self, tlc: str) -> None:
        self.queue_dropped_by[tlc] = self.queue_dropped_by.get(tlc, 0) + 1


def message(body: bytes, tlc: str = "NLZH0023", kind: str = "SPATEM", ttl: int = 1000, made: int = 1) -> BiMessage:
    return BiMessage({"messageType": kind, "publisherId": "NL00001"}, ttl, body, tlc, kind, made)


def outbound(now: list[int], **sender: Any) -> tuple[Outbound, FakeEngine, FakeSender, list[tuple[bytes, str]], Tally]:
    refused: list[tuple[bytes, str]] = []
    tally = Tally()
    out = Outbound(tally, lambda m, why: refused.append((m.body, why)), lambda: now[0])
    engine, state = FakeEngine(), FakeSender(**sender)
    out.attach(Flushes(), engine, state)  # type: ignore[arg-type]
    return out, engine, state, refused, tally


def test_a_message_larger_than_the_brokers_limit_is_refused_before_it_is_sent() -> None:
    encoder = MessageEncoder()
    small, large = message(b"s" * 100), message(b"L" * 3000, kind="MAPEM", ttl=648_000)
    assert encoder.size(small) == len(encoder.encode(small)) and encoder.size(large) == len(encoder.encode(large))
    out, engine, _, refused, tally = outbound([1], max_message_size=2048)
    assert out.offer(small) and not out.offer(large)  # the limit is known: refused at once
    assert refused == [(large.body, f"a BI message of {encoder.size(large)} bytes: the broker takes at most 2048 "
                                    "(its max-message-size)")]
    out.drain()
    assert [data for data, _ in engine.sent] == [encoder.encode(small)] and tally.published_by == {"NLZH0023": 1}
    # queued before the limit was known (no link yet): refused when drained, the others still go
    later, engine2, state2, refused2, _ = outbound([1])
    state2.max_message_size = None
    assert later.offer(large) and later.offer(small)
    state2.max_message_size = 2048
    later.drain()
    assert [body for body, _ in refused2] == [large.body] and len(engine2.sent) == 1


def test_rejected_is_refused_for_good_lost_is_sent_again_in_order_at_most_three_times() -> None:
    now = [1]
    out, engine, state, refused, _ = outbound(now)
    for i in range(3):
        out.offer(message(b"m%d" % i, ttl=648_000, kind="MAPEM"))
    out.drain()
    engine.sent[0][1](Outcome(False, "rejected: amqp:invalid-field: quadTree missing"))
    engine.sent[1][1](Outcome(True))
    engine.sent[2][1](Outcome(False, "not settled: connection closed"))
    engine.sent.clear()
    assert refused == [(b"m0", "the broker refused it: rejected: amqp:invalid-field: quadTree missing")]
    out.offer(message(b"m3", ttl=648_000, kind="MAPEM"))
    out.detach()  # the connection went: m2 waits at the head, before m3
    assert [m.body for m, _ in out.queue] == [b"m2", b"m3"]
    for attempt in range(2, MAX_ATTEMPTS + 1):
        out.attach(Flushes(), engine, state)  # type: ignore[arg-type]
        state.credit = 100
        out.drain()
        assert [data[-2:] for data, _ in engine.sent] == [b"m2", b"m3"] if attempt == 2 else [b"m2"]
        if attempt == 2:
            engine.sent[1][1](Outcome(True))
            engine.sent.pop()
        engine.answer(Outcome(False, "released"))
        out.detach()
    assert refused[-1] == (b"m2", f"not accepted after {MAX_ATTEMPTS} sends: released")
    assert out.retried == MAX_ATTEMPTS - 1 and not out.queue


def test_a_spatem_is_not_sent_again_after_its_ttl() -> None:
    now = [10_000]
    out, engine, _, refused, _ = outbound(now)
    out.offer(message(b"spat", ttl=1000, made=10_000))
    out.drain()
    engine.answer(Outcome(False, "not settled: link detached"))
    now[0] = 11_500
    out.detach()
    assert refused == [(b"spat", "expired (1000 ms TTL) before it could be sent again: not settled: link detached")]
    assert not out.queue


def test_queue_is_bounded() -> None:
    tally = Tally()
    out = Outbound(tally, lambda m, why: None, lambda: 0, limit=2)
    for i in range(3):
        out.offer(message(b"%d" % i, tlc=f"NLZH000{i}"))
    assert [m.body for m, _ in out.queue] == [b"1", b"2"] and tally.queue_dropped_by == {"NLZH0000": 1}


def test_a_refused_mapem_makes_the_controllers_spatems_wait_again() -> None:
    """IP_104: a SPATEM goes out only after its MAPEM was published; one the broker refused was not."""
    config = TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=Path("a"),
                              publisher_id="NL00001", originating_country="NL", controllers=[
                                  ControllerConfig(tlc_id="NLZH0023", intersections=["5-57"], latitude=51.4,
                                                   longitude=4.7)])
    translator = Translator(config)
    mapem = stand_in("MAPEM", 1, "5-0", 1)
    [published] = translator.to_bi(Payload(5, 1, mapem, "NLZH0023"), 0)  # type: ignore[misc]
    assert not translator.mapem_refused("NLZH0023", b"an older one")
    assert translator.mapem_refused("NLZH0023", published.body)
    dropped = translator.to_bi(Payload(4, 1, stand_in("SPATEM", 1, "5-57", 2), "NLZH0023"), 1)
    assert isinstance(dropped, Dropped) and dropped.cause == WAITS_FOR_MAPEM


def test_an_srem_too_large_for_a_frame_is_rejected_at_the_broker(pki: TestPki) -> None:
    """The SREM receiver's answer is the rejection the broker gets (the message's source): an SREM
    larger than one TCPStreaming frame carries, or for no bridged intersection, is refused with why."""
    from interchange.bridges.tlex.bridge import TlexBridge

    config = TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=pki.identity("tlex-bridge").directory,
                              publisher_id="NL00001", originating_country="NL", controllers=[
                                  ControllerConfig(tlc_id="NLZH0023", intersections=["5-57"], latitude=51.4,
                                                   longitude=4.7)])
    bridge = TlexBridge(config, node_name="a.interchange.test", ii_port=1, amqps_port=1, event=lambda *_: None)
    props = {"messageType": "SREM", "publisherId": "NL00002", "id": ",5-57,"}
    huge = Message(body=b"r" * 70_000, inferred=True, properties=props).encode()
    assert bridge._from_broker(huge) == (
        "an SREM of 70000 bytes does not fit a TCPStreaming frame (a payload of at most 65517 bytes, TLEX 6.3.2)")
    nowhere = Message(body=b"r", inferred=True, properties={**props, "id": ",9-9,"}).encode()
    assert bridge._from_broker(nowhere) == "SREM for intersections ,9-9, that no bridged controller owns"
    assert bridge.counters.srem_dropped == 2


def tlex_bridge(pki: TestPki, *tlcs: str) -> "TlexBridge":
    """A TLEX bridge of these controllers (intersection ``5-<n>`` for the n-th), no link attached yet."""
    from interchange.bridges.tlex.bridge import TlexBridge

    config = TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=pki.identity("tlex-bridge").directory,
                              publisher_id="NL00001", originating_country="NL", controllers=[
                                  ControllerConfig(tlc_id=tlc, intersections=[f"5-{i}"], latitude=51.4, longitude=4.7)
                                  for i, tlc in enumerate(tlcs)])
    return TlexBridge(config, node_name="a.interchange.test", ii_port=1, amqps_port=1, event=lambda *_: None)


def test_spatems_queued_behind_a_mapem_refused_at_sending_are_not_published(pki: TestPki) -> None:
    """IP_104 when the broker's limit is learnt late: a MAPEM too large for it and the SPATEMs that
    followed it are queued before the link is attached (no limit known yet); when the drain refuses
    the MAPEM, those SPATEMs are taken out of the queue and counted as waiting for a MAPEM, while
    another controller's messages go out."""
    import asyncio

    bridge = tlex_bridge(pki, "NLZH0023", "NLZH0024")

    async def controllers_send() -> None:
        for tlc, intersection, size in (("NLZH0023", "5-0", 3000), ("NLZH0024", "5-1", None)):
            bridge._from_controller(Payload(5, 1, stand_in("MAPEM", 1, intersection, 1, size), tlc))
            for seq in range(2, 5):
                bridge._from_controller(Payload(4, 1, stand_in("SPATEM", 1, intersection, seq), tlc))
        await asyncio.sleep(0)  # the scheduled drain runs: no link yet, all stay queued

    asyncio.run(controllers_send())
    assert len(bridge.outbound.queue) == 8
    engine = FakeEngine()
    bridge.outbound.attach(Flushes(), engine, FakeSender(max_message_size=2048))  # type: ignore[arg-type]
    bridge.outbound.drain()
    assert len(engine.sent) == 4 and not bridge.outbound.queue
    first, second = bridge.counters.tlc("NLZH0023"), bridge.counters.tlc("NLZH0024")
    assert (first.published, first.refused, first.dropped, first.held_for_mapem) == (0, 1, 3, 3)
    assert (second.published, second.refused, second.dropped) == (4, 0, 0)
    assert first.payloads_in == first.published + first.refused + first.dropped
    assert bridge.counters.dropped == {"refused": 1, WAITS_FOR_MAPEM: 3}


def test_spatems_after_a_mapem_the_broker_has_not_settled_yet_are_published(pki: TestPki) -> None:
    """IP_104 counts a MAPEM as published when the bridge takes it: the SPATEMs that follow it while
    the broker's outcome for it is still open go out behind it (none waits for a MAPEM); only a
    refusal makes later ones wait again."""
    import asyncio

    bridge = tlex_bridge(pki, "NLZH0023")
    engine = FakeEngine()
    bridge.outbound.attach(Flushes(), engine, FakeSender())  # type: ignore[arg-type]

    async def controller_sends() -> None:
        bridge._from_controller(Payload(5, 1, stand_in("MAPEM", 1, "5-0", 1), "NLZH0023"))
        await asyncio.sleep(0)  # the drain sends the MAPEM; the broker has not answered yet
        assert len(engine.sent) == 1
        for seq in range(2, 5):
            bridge._from_controller(Payload(4, 1, stand_in("SPATEM", 1, "5-0", seq), "NLZH0023"))
        await asyncio.sleep(0)

    asyncio.run(controller_sends())
    counters = bridge.counters.tlc("NLZH0023")
    assert len(engine.sent) == 4 and (counters.dropped, counters.held_for_mapem) == (0, 0)
    engine.answer(Outcome(True))
    assert counters.published == 4 and WAITS_FOR_MAPEM not in bridge.counters.dropped
