"""The TLEX bridge's publish path through the broker's in-process door: :class:`~interchange.bridges.
tlex.outbound.Outbound` drained into a :class:`~interchange.bridges.tlex.door.DoorSender` over a real
broker core (no socket): every message routed in order with its bytes unchanged, a rejection refused
for good (counted, and a refused MAPEM holds its SPATEMs back as over AMQPS), nothing lost while
the broker has closed the door, and all of it sent once the bridge opens it again."""
from __future__ import annotations

from dataclasses import dataclass, field

from interchange.bridges.tlex.door import DoorSender
from interchange.bridges.tlex.outbound import MessageEncoder, Outbound
from interchange.bridges.tlex.publication import BiMessage
from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import Admission
from interchange.broker.local_door import LocalDoor
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.ttl_policy import TtlPolicy

BRIDGE, TARGET, SOURCE = "tlex-bridge", "bridge-in", "everything"
NOW = 1_700_000_000_000
PROPERTIES = {"messageType": "SPATEM", "publisherId": "NL00001", "publicationId": "NL00001:NLSM0001-SPATEM",
              "originatingCountry": "NL", "protocolVersion": "SPATEM:2.1.1", "quadTree": ",120202130121133020,"}


@dataclass
class Tally:
    published_by: dict[str, int] = field(default_factory=dict)

    def published(self, tlc: str) -> None:
        self.published_by[tlc] = self.published_by.get(tlc, 0) + 1

    def queue_dropped(self, tlc: str) -> None:
        raise AssertionError("nothing is dropped from the queue here")


def broker() -> tuple[AddressBook, BrokerCore]:
    addresses = AddressBook()
    addresses.load([TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector="messageType = 'SPATEM'")],
                   [SourceSpec(address=SOURCE, consumers=frozenset({"consumer"}))])
    return addresses, BrokerCore(addresses, Admission(TtlPolicy(), accelerated=False), BrokerObserver(),
                                 clock_ms=lambda: NOW)


def spatem(body: bytes, kind: str = "SPATEM") -> BiMessage:
    return BiMessage({**PROPERTIES, "messageType": kind}, 1000, body, "NLSM0001", kind, NOW)


def held(core: BrokerCore) -> list[bytes]:
    return [bytes(m.raw) for m in core.sources[SOURCE].buffered()]  # the buffer, in its order


def test_outbound_through_the_door_routes_in_order_and_refuses_for_good() -> None:
    addresses, core = broker()
    refused: list[tuple[bytes, str]] = []
    tally = Tally()
    out = Outbound(tally, lambda m, why: refused.append((m.body, why)), lambda: NOW)
    door = DoorSender(LocalDoor(core, 64 * 1024, lambda: True).open(BRIDGE, TARGET))
    out.attach(door, door, door)
    messages = [spatem(b"\x02\x04one"), spatem(b"\x02\x04two", kind="MAPEM"), spatem(b"\x02\x04three")]
    for message in messages:
        assert out.offer(message)
    out.drain()
    encoder = MessageEncoder()
    assert held(core) == [encoder.encode(messages[0]), encoder.encode(messages[2])]  # bytes unchanged, in order
    assert refused == [(b"\x02\x04two", "the broker refused it: rejected: amqp:invalid-field: message does not fit "
                                        "the capabilities registered for this target")]
    assert tally.published_by == {"NLSM0001": 3} and not out.queue

    addresses.remove(TARGET)  # the broker closes the door: nothing is taken, nothing lost
    assert door.closed and door.credit == 0
    out.offer(spatem(b"\x02\x04four"))
    out.drain()
    assert [m.body for m, _ in out.queue] == [b"\x02\x04four"] and len(held(core)) == 2
    out.detach()
    addresses.put_target(TargetSpec(address=TARGET, publishers=frozenset({BRIDGE})))
    again = DoorSender(LocalDoor(core, 64 * 1024, lambda: True).open(BRIDGE, TARGET))  # as the bridge reconnects
    out.attach(again, again, again)
    out.drain()
    assert held(core)[-1] == encoder.encode(spatem(b"\x02\x04four")) and not out.queue


def test_the_door_gives_the_brokers_limit_before_sending() -> None:
    _, core = broker()
    door = DoorSender(LocalDoor(core, 300, lambda: True).open(BRIDGE, TARGET))
    refused: list[str] = []
    out = Outbound(Tally(), lambda m, why: refused.append(why), lambda: NOW)
    out.attach(door, door, door)
    assert door.max_message_size == 300
    assert not out.offer(spatem(b"\x02\x04" + b"x" * 400))
    assert refused and "the broker takes at most 300" in refused[0] and held(core) == []
