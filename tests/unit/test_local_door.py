"""The broker's in-process door (interchange.broker.local_door) against an AMQP publisher link.

The same messages go through the door into one broker core and through a real AMQP 1.0 link (the
node's client engine and the broker's connection engine, their bytes handed across in memory) into
another core set up alike: the outcomes, what each source holds and in which order, the counters
and the log records must be the same. Then what only a link has: refused attaches, a target
deleted under the door, the max-message-size, shutdown.
"""
from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import Admission
from interchange.broker.client import ClientEngine, Outcome, SenderState
from interchange.broker.engine import AttachRefused, ConnectionEngine, EngineLimits
from interchange.broker.local_door import DoorOutcome, LocalDoor, LocalPublisher
from interchange.broker.message_log import JsonLog
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.ttl_policy import TtlPolicy
from interchange.ground.logfile import LogSettings
from interchange.testing.harness import denm
from interchange.testing.memory_link import pump

BRIDGE, TARGET, SOURCE = "tlex-bridge", "bridge-in", "everything"
NOW = 1_700_000_000_000
LIMITS = EngineLimits(max_message_size=4096)


class Broker:
    """One broker core with a JSON log in memory: a target for the bridge, a source taking all."""

    def __init__(self, selector: str = "messageType = 'DENM'") -> None:
        self.stream = io.StringIO()
        self.log = JsonLog("node.test", stream=self.stream, settings=LogSettings(level="debug", properties=True))
        self.log.boot_ms = 0  # in message ids: two logs started apart would differ there alone
        self.addresses = AddressBook()
        self.addresses.load([TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector=selector)],
                            [SourceSpec(address=SOURCE, consumers=frozenset({"consumer"}))])
        self.core = BrokerCore(self.addresses, Admission(TtlPolicy(), accelerated=False), BrokerObserver(self.log),
                               clock_ms=lambda: NOW)

    def held(self) -> list[bytes]:
        return [bytes(m.raw) for m in self.core.sources[SOURCE].buffered()]  # the buffer, in its order

    def records(self) -> list[dict[str, Any]]:
        """The log's records without the write times (all two runs cannot share)."""
        self.log._writer.close()  # flushes the writer thread
        drop = {"timestamp", "timestampMs"}  # the wall clock of the write: what two runs cannot share
        return [{k: v for k, v in json.loads(line).items() if k not in drop}
                for line in self.stream.getvalue().splitlines() if line.strip()]


class AmqpLink:
    """A publisher over a real AMQP link: client engine <-> connection engine, bytes in memory."""

    def __init__(self, broker: Broker) -> None:
        self.client = ClientEngine("bridge-container", "node.test")
        self.server = ConnectionEngine(broker.core, BRIDGE, LIMITS, lambda: None)
        self.sender = self.client.open_sender(SenderState(TARGET))
        self.pump()

    def pump(self) -> None:
        pump(self.client, self.server, 20)

    def publish(self, raw: bytes, on_outcome: Callable[[Outcome], None]) -> None:
        assert self.client.send(self.sender, raw, on_outcome)
        self.pump()


def messages() -> list[bytes]:
    invalid = denm()
    del invalid.properties["publisherId"]  # Table 1: mandatory
    return [denm(body=b"\x01\x02first").encode(), denm(messageType="IVIM").encode(), invalid.encode(),
            denm(body=b"\x01\x02second").encode()]


def test_the_door_routes_refuses_and_logs_as_an_amqp_link_does() -> None:
    by_door, by_link = Broker(), Broker()
    door = LocalDoor(by_door.core, LIMITS.max_message_size, lambda: True).open(BRIDGE, TARGET)
    link = AmqpLink(by_link)
    door_outcomes: list[DoorOutcome] = []
    link_outcomes: list[Outcome] = []
    for raw in messages():
        door.publish(raw, door_outcomes.append)
        link.publish(raw, link_outcomes.append)
    assert [o.accepted for o in door_outcomes] == [o.accepted for o in link_outcomes] == [True, False, False, True]
    for ours, theirs in zip(door_outcomes, link_outcomes):
        assert ours.error == theirs.error  # "rejected: amqp:invalid-field: <the reason>", word for word
    assert all(o.final for o in door_outcomes if not o.accepted)
    assert by_door.held() == by_link.held() == [messages()[0], messages()[3]]  # in order, bytes unchanged
    for counter in ("received_count", "rejected_count", "routed_count", "received_by"):
        assert getattr(by_door.core.observer, counter) == getattr(by_link.core.observer, counter), counter
    assert by_door.records() == by_link.records()
    assert door.sent == 4 and door.accepted == 2 and door.rejected == 2


def test_attach_is_authorized_as_a_link_attach() -> None:
    broker = Broker()
    door = LocalDoor(broker.core, LIMITS.max_message_size, lambda: True)
    with pytest.raises(AttachRefused) as refused:
        door.open("someone-else", TARGET)
    assert refused.value.condition == "amqp:unauthorized-access"
    with pytest.raises(AttachRefused) as missing:
        door.open(BRIDGE, "no-such-target")
    assert missing.value.condition == "amqp:not-found"


def test_a_deleted_target_closes_the_door() -> None:
    broker = Broker()
    door = LocalPublisher.open(broker.core, BRIDGE, TARGET, LIMITS.max_message_size)
    told: list[bool] = []
    door.on_closed = lambda: told.append(True)
    broker.addresses.remove(TARGET)
    assert told == [True] and door.closed and door.error is not None and door.error.startswith("amqp:resource-deleted")
    outcomes: list[DoorOutcome] = []
    door.publish(messages()[0], outcomes.append)
    assert outcomes == [DoorOutcome(False, f"not sent: {door.error}")]  # not final: the bridge attaches again
    assert broker.core.observer.received_count == 0
    door.close()  # closing twice detaches once


def test_too_large_is_refused_for_good_and_shutdown_releases() -> None:
    broker = Broker()
    accepting = [True]
    door = LocalPublisher.open(broker.core, BRIDGE, TARGET, 200, lambda: accepting[0])
    outcomes: list[DoorOutcome] = []
    big = denm(body=b"\x01" * 400).encode()
    door.publish(big, outcomes.append)
    assert not outcomes[0].accepted and outcomes[0].final and "message-size-exceeded" in (outcomes[0].error or "")
    accepting[0] = False
    door.publish(messages()[0], outcomes.append)
    assert outcomes[1] == DoorOutcome(False, "released")
    assert broker.core.observer.received_count == 0 and broker.held() == []


def test_publish_all_answers_as_publish_does_one_by_one() -> None:
    """One call for the messages of a bridge's read: the same outcomes, in order, the same held and counted."""
    one_by_one, batched = Broker(), Broker()
    single = LocalDoor(one_by_one.core, LIMITS.max_message_size, lambda: True).open(BRIDGE, TARGET)
    door = LocalDoor(batched.core, LIMITS.max_message_size, lambda: True).open(BRIDGE, TARGET)
    outcomes: list[DoorOutcome] = []
    for raw in messages():
        single.publish(raw, outcomes.append)
    answers = door.publish_all(messages(), lambda i: pytest.fail(f"message {i} answered later"))
    assert answers == outcomes and [a.accepted for a in outcomes] == [True, False, False, True]
    assert batched.held() == one_by_one.held() == [messages()[0], messages()[3]]
    assert (door.sent, door.accepted, door.rejected) == (single.sent, single.accepted, single.rejected) == (4, 2, 2)


class _Receipt:
    """A durable message's store commit (what :class:`StoreReceipt` gives): ``done`` runs the callbacks."""

    def __init__(self) -> None:
        self.callbacks: list[tuple[Callable[[Any, bool], None], Any]] = []
        self.reason, self.full = "disk", False

    def add(self, callback: Callable[[Any, bool], None], arg: Any) -> None:
        self.callbacks.append((callback, arg))

    def done(self, ok: bool) -> None:
        for callback, arg in self.callbacks:
            callback(arg, ok)


class _StoringCore:
    """A core whose every second message is durable: its answer waits for the store (:class:`_Receipt`)."""

    def __init__(self) -> None:
        self.receipts: list[_Receipt] = []
        self.count = 0

    def attach_publisher(self, identity: str, address: str | None) -> Any:
        return type("Link", (), {"closer": None})()

    def publish(self, publisher: Any, raw: bytes | bytearray) -> _Receipt | None:
        self.count += 1
        if self.count % 2:
            return None
        self.receipts.append(_Receipt())
        return self.receipts[-1]

    def publish_all(self, publisher: Any, raws: list[bytes]) -> list[_Receipt | None]:
        return [self.publish(publisher, raw) for raw in raws]


def test_publish_all_hands_a_stored_messages_answer_to_its_own_callback() -> None:
    core = _StoringCore()
    door = LocalPublisher.open(core, BRIDGE, TARGET, LIMITS.max_message_size)  # type: ignore[arg-type]
    later: dict[int, list[DoorOutcome]] = {}

    def callback(i: int) -> Callable[[DoorOutcome], None]:
        return later.setdefault(i, []).append

    answers = door.publish_all([b"a", b"b", b"c", b"d"], callback)
    assert answers == [DoorOutcome(True), None, DoorOutcome(True), None] and later == {1: [], 3: []}
    core.receipts[0].done(True)
    core.receipts[1].done(False)  # the store could not write it: rejected, not final
    assert later[1] == [DoorOutcome(True)]
    assert not later[3][0].accepted and not later[3][0].final and (later[3][0].error or "").startswith("rejected")
    assert (door.sent, door.accepted, door.rejected) == (4, 3, 1)


class _CountingCore(_StoringCore):
    """A core that counts its calls: the batch's messages must reach it in one call, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[bytes]] = []

    def publish_all(self, publisher: Any, raws: list[bytes]) -> list[_Receipt | None]:
        self.calls.append(list(raws))
        return [None for _ in raws]

    def detach_publisher(self, publisher: Any) -> None: ...


def test_publish_all_routes_a_batch_in_one_call_and_answers_an_oversized_message_in_its_place() -> None:
    core = _CountingCore()
    door = LocalPublisher.open(core, BRIDGE, TARGET, 10)  # type: ignore[arg-type]
    answers = door.publish_all([b"a", b"b" * 11, b"c"], lambda i: pytest.fail(f"message {i} answered later"))
    assert core.calls == [[b"a", b"c"]]
    assert answers[0] == answers[2] == DoorOutcome(True)
    assert answers[1] is not None and answers[1].final and "message-size-exceeded" in (answers[1].error or "")
    assert (door.sent, door.accepted, door.rejected) == (2, 2, 1)


def test_publish_all_on_a_closed_or_stopping_door_routes_nothing() -> None:
    core = _CountingCore()
    accepting = [False]
    door = LocalPublisher.open(core, BRIDGE, TARGET, 10, lambda: accepting[0])  # type: ignore[arg-type]
    assert door.publish_all([b"a", b"b"], lambda i: pytest.fail("later")) == [DoorOutcome(False, "released")] * 2
    accepting[0] = True
    door.close()
    answers = door.publish_all([b"a"], lambda i: pytest.fail("later"))
    assert answers[0] is not None and not answers[0].accepted and not answers[0].final
    assert core.calls == [] and door.sent == 0
