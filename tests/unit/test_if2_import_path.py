"""The IF2 bridge's import path in one process, no socket: AMQP 0-9-1 frames a broker would send (pamqp)
read by the bridge's connection, each delivery mapped by the bridge and sent through the broker's
in-process door into a real broker core, whose source keeps what it routed.

What the bridge keeps between messages (the mapping by exchange, routing key and properties object;
the mapping by routing key and position) must never give one message another's properties, TTL or
verdict: each case below differs from the one before in exactly one of the things a mapping depends on.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from pamqp import body, commands, frame, header

import quadtree

from certs import TestPki
from interchange.bridges.if2 import bi_message
from interchange.bridges.if2.amqp091 import Connection, Delivery
from interchange.bridges.if2.bridge import If2Bridge, NodeView
from interchange.bridges.if2.config import If2Config
from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import Admission
from interchange.broker.coverage import CapabilityFit, Coverage
from interchange.broker.local_door import LocalDoor
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.ttl_policy import TtlPolicy

BRIDGE, TARGET, SOURCE = "actor-x", "if2-in", "everything"
TILE, OTHER_TILE = "120202130121133020", "120202130121133021"
PID = "NL00001:if2-DENM-1_2_1"


def key(tile: str = TILE, cause: int = 5) -> str:
    return f"DENM.1_2_1.RWS.{cause}." + ".".join(tile)


class Settled:
    """The bridge's RabbitMQ session as far as the import path uses it: what was acked or rejected."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[int, bool]] = []

    def settle(self, delivery: Delivery, accepted: bool) -> None:
        self.outcomes.append((delivery.delivery_tag, accepted))

    def settle_all(self, deliveries: list[Delivery], accepted: bool) -> None:
        self.outcomes.extend((delivery.delivery_tag, accepted) for delivery in deliveries)


class ImportPath:
    """0-9-1 connection -> bridge -> door -> broker core; ``source`` holds what the BI took."""

    def __init__(self, pki: TestPki) -> None:
        identity = pki.identity(BRIDGE)
        config = If2Config(url="amqps://127.0.0.1:5671/", actor=BRIDGE, imports={"DENM": ["#"]},
                           tls={"cert_chain": identity.chain, "key": identity.key, "trust_bundle": pki.trust_bundle},
                           providers=[{"name": "RWS", "publisher_id": "NL00001", "coverage": ["1202"]}],
                           area_radius_m={"DENM": 0.0})
        fit = CapabilityFit(publicationIds=(PID,), tiles=("1202",), equal={
            "messageType": "DENM", "publisherId": "NL00001", "originatingCountry": "NL", "protocolVersion": "DENM:1.2.1"})
        book = AddressBook()
        book.load([TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector="TRUE",
                              coverage=Coverage(fits=(fit,)))],
                  [SourceSpec(address=SOURCE, consumers=frozenset({"consumer"}))])
        self.core = BrokerCore(book, Admission(TtlPolicy()), BrokerObserver(None))
        door = LocalDoor(self.core, 1 << 20, lambda: True)
        self.bridge = If2Bridge(config, NodeView("node.test", "127.0.0.1", 1, "https://127.0.0.1:1", door),
                                lambda *_: None)
        self.bridge._registered = {PID}  # (its capability registered: what the II tests cover)
        self.bridge._delivery_known = True
        self.bridge.bi.set_target(TARGET)
        self.session = Settled()
        self.connection = Connection()
        self.connection.start()
        self.connection.receive(_frames((0, commands.Connection.Start(mechanisms="EXTERNAL")),
                                        (0, commands.Connection.Tune(frame_max=131072, heartbeat=0)),
                                        (0, commands.Connection.OpenOk())))
        self.connection.send(2, commands.Channel.Open())
        self.connection.receive(_frames((2, commands.Channel.OpenOk())))
        self.tag = 0

    def deliver(self, routing_key: str, properties: Any, exchange: str = "DENM") -> None:
        """One delivery, its properties object the one given (encoded and read back by the connection,
        which decodes the same bytes to the same object)."""
        self.tag += 1
        payload = b"body %d" % self.tag
        deliveries = self.connection.receive(_frames(
            (2, commands.Basic.Deliver("if2-DENM", self.tag, False, exchange, routing_key)),
            (2, header.ContentHeader(0, len(payload), properties)), (2, body.ContentBody(payload))))
        assert all(isinstance(delivery, Delivery) for delivery in deliveries)
        self.bridge._on_if2(self.session, deliveries)  # type: ignore[arg-type]

    def deliver_read(self, *routes: tuple[str, Any, str], size: int = 0) -> None:
        """Several deliveries (routing key, properties, exchange) in one read: one call to the bridge
        (``size``: bodies padded to that many bytes)."""
        frames = []
        for routing_key, props, exchange in routes:
            self.tag += 1
            payload = (b"body %d" % self.tag).ljust(size, b".")
            frames += [(2, commands.Basic.Deliver("if2-DENM", self.tag, False, exchange, routing_key)),
                       (2, header.ContentHeader(0, len(payload), props)), (2, body.ContentBody(payload))]
        deliveries = self.connection.receive(_frames(*frames))
        assert len(deliveries) == len(routes)
        self.bridge._on_if2(self.session, deliveries)  # type: ignore[arg-type]

    def taken(self) -> list[tuple[dict[str, Any], int | None, bytes]]:
        """What the BI took, in order: application properties, header ttl (ms), body."""
        return [bi_message.read(message.raw) for message in self.core.sources[SOURCE].buffered()]


def _frames(*frames: tuple[int, Any]) -> bytes:
    return b"".join(frame.marshal(value, channel) for channel, value in frames)


@pytest.fixture
def path(pki: TestPki) -> Iterator[ImportPath]:
    loop = asyncio.new_event_loop()  # (the bridge's acks are batched with call_soon: a loop must exist)
    asyncio.set_event_loop(loop)
    try:
        yield ImportPath(pki)
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def properties(ttl_ms: int = 60_000, **headers: Any) -> commands.Basic.Properties:
    return commands.Basic.Properties(expiration=str(ttl_ms), headers=headers)


def test_each_message_gets_its_own_routing_keys_properties(path: ImportPath) -> None:
    same = properties()
    for routing_key in (key(), key(cause=6), key(OTHER_TILE), key()):
        path.deliver(routing_key, same)
    taken = path.taken()
    assert [(p["causeCode"], p["quadTree"]) for p, _, _ in taken] == [
        (5, f",{TILE},"), (6, f",{TILE},"), (5, f",{OTHER_TILE},"), (5, f",{TILE},")]
    assert [b for _, _, b in taken] == [b"body 1", b"body 2", b"body 3", b"body 4"]
    assert path.session.outcomes == [(1, True), (2, True), (3, True), (4, True)]


def test_each_message_gets_its_own_properties_ttl_and_position(path: ImportPath) -> None:
    lat, lon = 51.0, 4.5  # (in the provider's coverage, 1202); the key's tile holds it
    inside = quadtree.from_latlon(lat, lon, 18)
    for ttl_ms, headers in ((60_000, {}), (5_000, {}), (60_000, {"lat": lat, "lon": lon}), (60_000, {})):
        path.deliver(key(inside), properties(ttl_ms, **headers))
    taken = path.taken()
    assert [ttl for _, ttl, _ in taken] == [60_000, 5_000, 60_000, 60_000]
    assert [p.get("latitude") for p, _, _ in taken] == [None, None, lat, None]


def test_a_key_of_another_exchange_is_refused_though_the_same_key_was_mapped_before(path: ImportPath) -> None:
    same = properties()
    path.deliver(key(), same)
    path.deliver(key(), same, exchange="IVI")  # IF2 6.2: the exchange is named after the message type
    path.deliver(key(), same)
    assert path.session.outcomes == [(1, True), (2, False), (3, True)]
    assert len(path.taken()) == 2


def test_a_refused_mapping_is_refused_every_time(path: ImportPath) -> None:
    outside = properties(lat=40.0, lon=4.5)  # not in the key's tile (IF2 Table 4)
    for _ in range(2):
        path.deliver(key(), outside)
    path.deliver(key(), properties())
    assert path.session.outcomes == [(1, False), (2, False), (3, True)]
    assert path.bridge.counts["import_refused"] == 2


def test_the_bis_refusal_and_release_through_the_door_reject_or_retry(path: ImportPath) -> None:
    """The door's answers as they are (not only accepted): a message the target refuses is rejected at
    RabbitMQ without requeue and counted; one the broker releases (shutting down) is sent again later,
    neither acked nor rejected meanwhile."""
    path.deliver(key(), properties())
    path.core.addresses.put_target(TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector="causeCode = 99"))
    path.deliver(key(), properties())
    assert path.session.outcomes == [(1, True), (2, False)]
    assert path.bridge.counts["import_refused"] == 1 and path.bridge.counts["imported"] == 1
    path.core.addresses.put_target(TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector="TRUE"))
    publisher = path.bridge.bi._door_publisher()
    assert publisher is not None
    publisher._accepting = lambda: False  # (the broker shutting down: it releases what comes)

    async def released() -> None:  # (a retry is scheduled on the running loop)
        path.deliver(key(), properties())

    asyncio.get_event_loop().run_until_complete(released())
    assert path.session.outcomes == [(1, True), (2, False)] and path.bridge.counts["bi_retried"] == 1


def test_one_read_is_sent_as_one_batch_each_message_its_own_fate(path: ImportPath) -> None:
    """The deliveries of one read go to the BI together: the accepted ones acked, one the mapping refuses
    and one the BI refuses rejected, one the broker releases sent again later; none takes another's fate."""
    path.core.addresses.put_target(TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector="causeCode = 5"))
    same, outside = properties(), properties(lat=40.0, lon=4.5)
    path.deliver_read((key(), same, "DENM"), (key(cause=6), same, "DENM"), (key(), outside, "DENM"),
                      (key(), same, "IVI"), (key(), properties(5_000), "DENM"))
    assert sorted(path.session.outcomes) == [(1, True), (2, False), (3, False), (4, False), (5, True)]
    assert [(p["causeCode"], ttl, b) for p, ttl, b in path.taken()] == [(5, 60_000, b"body 1"), (5, 5_000, b"body 5")]
    assert path.bridge.counts["imported"] == 2 and path.bridge.counts["import_refused"] == 3
    publisher = path.bridge.bi._door_publisher()
    assert publisher is not None
    publisher._accepting = lambda: False  # (the broker shutting down: it releases what comes)

    async def released() -> None:  # (a retry is scheduled on the running loop)
        path.deliver_read((key(), same, "DENM"), (key(), same, "DENM"))

    asyncio.get_event_loop().run_until_complete(released())
    assert len(path.session.outcomes) == 5 and path.bridge.counts["bi_retried"] == 2


@pytest.mark.parametrize("size", [0, 255, 256, 70_000])
def test_the_bi_gets_the_bytes_of_bi_message_for_each_message_of_a_read(path: ImportPath, size: int) -> None:
    """A read's BI messages, put together in the bridge's loop, are byte for byte what
    :func:`bi_message.message` makes of each one's mapping, body and ttl (small and large bodies,
    runs of one mapping and a change of ttl or key between them)."""
    same = properties()
    routes = [(key(), same, "DENM"), (key(), same, "DENM"), (key(cause=6), same, "DENM"),
              (key(), properties(5_000), "DENM"), (key(), same, "DENM")]
    path.deliver_read(*routes, size=size)
    bridge = path.bridge
    expected = []
    for i, (routing_key, props, _) in enumerate(routes, start=1):
        delivery = Delivery(2, i, False, "DENM", routing_key, props, (b"body %d" % i).ljust(size, b"."))
        mapping, ttl_ms = bridge._import_maps.map(delivery)
        expected.append(bi_message.message(mapping.section, delivery.body, ttl_ms))
    assert [bytes(m.raw) for m in path.core.sources[SOURCE].buffered()] == expected
    assert path.session.outcomes == [(i, True) for i in range(1, 6)]
