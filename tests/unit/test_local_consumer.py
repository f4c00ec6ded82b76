"""The broker's consuming door (interchange.broker.local_door.LocalConsumer) against an AMQP receiver.

The same messages wait in two broker cores set up alike; one is read through the door, the other
through a real AMQP 1.0 deferred receiver (the node's client engine and the broker's connection
engine, their bytes handed across in memory), both settled with the same outcomes: what each
receives and in which order, what stays in the source and the log's records must be the same.
Then what only a link has: its window, the link going away while messages are out (the bridge
detaches, the source is deleted, the grant withdrawn): nothing lost, nothing settled twice.
"""
from __future__ import annotations

import asyncio
import io
import json
import ssl
from collections.abc import Callable
from typing import Any

import pytest

from interchange.bridges.if2.bi_link import BiLink
from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import Admission
from interchange.broker.client import RELEASE, ClientEngine, ReceiverState
from interchange.broker.engine import AttachRefused, ConnectionEngine, EngineLimits
from interchange.broker.local_door import LocalConsumer, LocalDoor
from interchange.broker.message_log import JsonLog
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.ttl_policy import TtlPolicy
from interchange.ground.logfile import LogSettings
from interchange.testing.harness import denm
from interchange.testing.memory_link import pump

PUBLISHER, CONSUMER, TARGET, SOURCE = "publisher", "if2-bridge", "in", "everything"
NOW = 1_700_000_000_000
LIMITS = EngineLimits(max_message_size=4096)
#: the log's fields two runs cannot share: the wall clock of the write and of each delivery
_CLOCKS = {"timestamp", "timestampMs", "departureMs", "settledMs", "departureTime", "settledTime"}


class Broker:
    """One broker core with a JSON log in memory (messages logged): a target, a source taking all."""

    def __init__(self) -> None:
        self.stream = io.StringIO()
        self.log = JsonLog("node.test", stream=self.stream,
                           settings=LogSettings(level="debug", properties=True))
        self.log.boot_ms = 0
        self.addresses = AddressBook()
        self.addresses.load([TargetSpec(address=TARGET, publishers=frozenset({PUBLISHER}))],
                            [SourceSpec(address=SOURCE, consumers=frozenset({CONSUMER}))])
        self.core = BrokerCore(self.addresses, Admission(TtlPolicy(), accelerated=False), BrokerObserver(self.log),
                               clock_ms=lambda: NOW)
        self.turns: list[Callable[[], None]] = []  #: what the door runs in the next loop turn
        self.door = LocalDoor(self.core, LIMITS.max_message_size, lambda: True, schedule=self.turns.append,
                              delivery_log=lambda: self.core.observer)
        self.publisher = self.core.attach_publisher(PUBLISHER, TARGET)

    def publish(self, *bodies: bytes) -> None:
        for body in bodies:
            assert self.core.publish(self.publisher, denm(body=body).encode()) is None

    def run(self) -> None:
        """The loop's next turns, until nothing is scheduled."""
        while self.turns:
            self.turns.pop(0)()

    def held(self) -> list[bytes]:
        return [body_of(m.raw) for m in self.core.sources[SOURCE].buffered()]

    def records(self) -> list[dict[str, Any]]:
        self.log._writer.close()
        return [{k: v for k, v in json.loads(line).items() if k not in _CLOCKS}
                for line in self.stream.getvalue().splitlines() if line.strip()]


def body_of(raw: bytes | bytearray) -> bytes:
    """The message's data section (each test body ends the encoded message)."""
    return bytes(raw[-5:])


class DoorReader:
    """A bridge at the door: what it received (body, tag), in order."""

    def __init__(self, broker: Broker, credit: int) -> None:
        self.broker = broker
        self.got: list[tuple[bytes, Any]] = []
        self.consumer = broker.door.consume(CONSUMER, SOURCE, self._on, credit)

    def _on(self, raw: bytes | bytearray, tag: Any) -> None:
        self.got.append((body_of(raw), tag))

    def pump(self) -> None:
        self.broker.run()

    def settle(self, tag: Any, outcome: str | None) -> bool:
        return self.consumer.settle(tag, outcome)


class AmqpReader:
    """The same over a real AMQP deferred receiver: client engine <-> connection engine, in memory."""

    def __init__(self, broker: Broker, credit: int) -> None:
        self.got: list[tuple[bytes, Any]] = []
        self.client = ClientEngine("bridge-container", "node.test")
        self.server = ConnectionEngine(broker.core, CONSUMER, LIMITS, lambda: None)
        self.server.delivery_log = broker.core.observer
        self.state = self.client.open_receiver(ReceiverState(SOURCE, None, credit, lambda raw: None,
                                                             deferred=self._on))
        self.pump()

    def _on(self, raw: bytes, delivery: Any) -> None:
        self.got.append((body_of(raw), delivery))

    def pump(self) -> None:
        pump(self.client, self.server, 50)

    def settle(self, tag: Any, outcome: str | None) -> bool:
        self.client.settle(self.state, tag, outcome)
        self.pump()
        return True


BODIES = [b"msg-%d" % i for i in range(8)]
#: the outcome given to each delivery in the order it comes: released ones come again first in line
SCRIPT = [None, RELEASE, "not mappable to IF2: test", None, None, RELEASE, None, None, None, None]


def read_with_script(reader: DoorReader | AmqpReader) -> list[bytes]:
    """Settle what came, each with the next outcome of :data:`SCRIPT`, a window at a time (the AMQP
    client grants credit again once half its window is free: settling it all keeps both in step)."""
    reader.pump()
    order: list[bytes] = []
    step = 0
    while step < len(SCRIPT) and reader.got:
        came, reader.got = reader.got, []
        for body, tag in came:
            order.append(body)
            reader.settle(tag, SCRIPT[step] if step < len(SCRIPT) else None)
            step += 1
        reader.pump()
    return order


def test_the_door_delivers_and_settles_as_an_amqp_receiver_does() -> None:
    by_door, by_link = Broker(), Broker()
    for broker in (by_door, by_link):
        broker.publish(*BODIES)
    door, link = DoorReader(by_door, 3), AmqpReader(by_link, 3)
    assert len(door.got) == 0  # handed over in the next loop turn, not from inside the source
    door.pump()
    assert [b for b, _ in door.got] == [b for b, _ in link.got] == BODIES[:3]  # the window
    ours, theirs = read_with_script(door), read_with_script(link)
    # The same deliveries; the order of a released one may differ: proton handles the receiver's
    # flow before the release in the same frames, so a link sends new messages first; the door
    # gives the released message back first in line (its shard's order, IP_128).
    assert sorted(ours) == sorted(theirs)
    assert ours == [b"msg-0", b"msg-1", b"msg-2", b"msg-1", b"msg-3", b"msg-4", b"msg-4", b"msg-5", b"msg-6",
                    b"msg-7"]
    assert by_door.held() == by_link.held() == []

    def dumped(records: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps(r, sort_keys=True) for r in records)
    # sent_message records: each delivery's outcome and attempt, the link attach
    assert dumped(by_door.records()) == dumped(by_link.records())
    assert any(r.get("outcome") == "released" for r in by_door.records())


def test_the_window_is_unsettled_messages_and_a_settlement_lets_the_next_one_out() -> None:
    broker = Broker()
    broker.publish(*BODIES)
    reader = DoorReader(broker, 2)
    reader.pump()
    assert [b for b, _ in reader.got] == BODIES[:2] and reader.consumer.credit == 0
    assert broker.held() == BODIES[2:]
    assert reader.settle(reader.got[0][1], None)
    reader.pump()
    assert [b for b, _ in reader.got] == BODIES[:3] and broker.held() == BODIES[3:]
    assert not reader.settle(reader.got[0][1], None)  # settled already: nothing happens
    reader.pump()
    assert len(reader.got) == 3


def test_a_settlement_made_while_handed_over_does_not_reenter_the_source() -> None:
    broker = Broker()
    broker.publish(*BODIES)
    seen: list[bytes] = []
    consumer: list[LocalConsumer] = []

    def settle_at_once(raw: bytes | bytearray, tag: Any) -> None:
        seen.append(body_of(raw))
        consumer[0].settle(tag, None)

    consumer.append(broker.door.consume(CONSUMER, SOURCE, settle_at_once, 2))
    broker.run()
    assert seen == BODIES and broker.held() == []


def test_messages_out_when_the_bridge_detaches_go_back_and_come_again_once() -> None:
    broker = Broker()
    broker.publish(*BODIES[:4])
    first = DoorReader(broker, 3)
    first.pump()
    assert first.settle(first.got[0][1], None)
    out = first.got[1:]
    first.consumer.detach()
    assert broker.held() == [b"msg-1", b"msg-2", b"msg-3"]  # given back first, in their order
    assert [first.settle(tag, None) for _, tag in out] == [False, False]  # late: the source has them
    again = DoorReader(broker, 10)
    again.pump()
    assert [b for b, _ in again.got] == [b"msg-1", b"msg-2", b"msg-3"]
    for _, tag in again.got:
        assert again.settle(tag, None)
    assert broker.held() == []
    records = [r for r in broker.records() if r.get("event") == "sent_message"]
    assert [r["outcome"] for r in records] == ["accepted", "link_lost", "link_lost", "accepted", "accepted",
                                               "accepted"]


def test_a_withdrawn_grant_closes_the_door_and_keeps_what_was_out() -> None:
    broker = Broker()
    broker.publish(*BODIES[:3])
    reader = DoorReader(broker, 2)
    told: list[bool] = []
    reader.consumer.on_closed = lambda: told.append(True)
    reader.pump()
    broker.addresses.put_source(SourceSpec(address=SOURCE, consumers=frozenset({"someone-else"})))
    assert told == [True] and reader.consumer.closed
    assert (reader.consumer.error or "").startswith("amqp:unauthorized-access")
    assert [reader.settle(tag, None) for _, tag in reader.got] == [False, False]
    assert broker.held() == BODIES[:3]  # nothing lost: what was out is first in line again
    with pytest.raises(AttachRefused):
        broker.door.consume(CONSUMER, SOURCE, lambda raw, tag: None, 2)


def test_what_the_source_sent_before_the_link_closed_is_not_handed_over() -> None:
    broker = Broker()
    broker.publish(*BODIES[:2])
    reader = DoorReader(broker, 5)
    reader.consumer.detach()  # closed before the loop's next turn
    reader.pump()
    assert reader.got == [] and broker.held() == BODIES[:2]


def test_a_deleted_source_closes_the_door() -> None:
    broker = Broker()
    reader = DoorReader(broker, 2)
    told: list[bool] = []
    reader.consumer.on_closed = lambda: told.append(True)
    broker.addresses.remove(SOURCE)
    assert told == [True] and (reader.consumer.error or "").startswith("amqp:resource-deleted")
    with pytest.raises(AttachRefused) as missing:
        broker.door.consume(CONSUMER, SOURCE, lambda raw, tag: None, 2)
    assert missing.value.condition == "amqp:not-found"


async def test_the_bridge_attaches_at_the_door_once_the_source_exists_and_again_after_a_close() -> None:
    """BiLink's consumer at the door: refused while the source does not exist (logged, tried again
    after a back-off), attached once it does; attached again after the broker closed the link, and
    what was out on the closed link comes again on the new one."""
    broker = Broker()
    door = LocalDoor(broker.core, LIMITS.max_message_size, lambda: True, delivery_log=lambda: broker.core.observer)
    events: list[str] = []
    got: list[bytes] = []
    link = BiLink("127.0.0.1", 1, "node.test", ssl.create_default_context(), "c", lambda lvl, ev, f: events.append(ev),
                  backoff=(0.01, 0.05), credit=4, door=door, identity=CONSUMER)
    link.set_source("later", None, lambda raw, tag: got.append(body_of(raw)))
    assert link.receiver is None and events == ["if2_door_consumer_refused"]
    await asyncio.sleep(0.05)
    assert events.count("if2_door_consumer_refused") >= 2 and link.receiver is None  # tried again, still refused
    broker.addresses.put_source(SourceSpec(address="later", consumers=frozenset({CONSUMER})))
    await asyncio.sleep(0.15)
    first = link.receiver
    assert isinstance(first, LocalConsumer) and not first.closed
    broker.addresses.put_target(TargetSpec(address="to-later", publishers=frozenset({PUBLISHER})))
    broker.publish(*BODIES[:2])  # (routed to every source: "later" included)
    await asyncio.sleep(0)
    assert got == BODIES[:2]
    first.close("amqp:link:detach-forced", "test")
    await asyncio.sleep(0.05)
    second = link.receiver
    assert isinstance(second, LocalConsumer) and second is not first and not second.closed
    assert got == BODIES[:2] * 2  # not settled on the closed link: given out again
    assert all(link.settle(second, tag, None) for tag in list(second.unsettled))
    assert not link.settle(first, 1, None)
    await link.close()
    assert second.closed
