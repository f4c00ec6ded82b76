"""A consumer's deliveries and settlements through the server engine, in process (proton's own client,
no socket): the C path (``interchange.broker._links``) sends each delivery and handles a run of
settlements at the head of proton's events in one call, and leaves to the Python code exactly what it
decides (a released or modified message goes back to its source, a publisher's message is routed);
a durable message settled is done with at its source; the message log sees each delivery under the
same key when it is sent and when it is settled."""
from __future__ import annotations

from typing import Any

import pytest
from proton import Collector, Connection, Delivery, Event, Link, Message, Transport

from interchange.broker import engine as engine_module
from interchange.broker.engine import ConnectionEngine, EngineLimits
from interchange.broker.message import BrokerMessage



@pytest.fixture(params=["c", "python"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each behaviour through the C path (when built) and through the Python one."""
    if request.param == "c" and engine_module._links is None:
        pytest.skip("the C path is not built (no compiler)")
    if request.param == "python":
        monkeypatch.setattr(engine_module, "_settled_run", None)
        monkeypatch.setattr(engine_module, "_deliver", None)
    return str(request.param)


class Router:
    """The broker core as the engine sees it: one consumer link, what it was told."""

    def __init__(self) -> None:
        self.consumer: Any = None
        self.published: list[bytes] = []
        self.done: list[BrokerMessage] = []
        self.redelivered: list[BrokerMessage] = []

    def attach_publisher(self, identity: str, address: str | None) -> Any:
        return type("Publisher", (), {"closer": None})()

    def attach_consumer(self, identity: str, address: str | None, selector: str | None, link: Any) -> None:
        self.consumer = link

    def publish(self, publisher: Any, raw: bytes | bytearray) -> None:
        self.published.append(bytes(raw))

    def detach_publisher(self, publisher: Any) -> None: ...

    def detach_consumer(self, link: Any) -> None: ...

    def consumed(self, link: Any, message: BrokerMessage) -> None:
        self.done.append(message)

    def credit_available(self, link: Any) -> None: ...

    def redeliver(self, link: Any, message: BrokerMessage) -> None:
        self.redelivered.append(message)


class Pair:
    """The server engine and a proton client with a receiver (unsettled) and a sender, bytes moved by hand."""

    def __init__(self) -> None:
        self.router = Router()
        self.server = ConnectionEngine(self.router, "actor-1", EngineLimits(), lambda: None)
        self.transport, self.connection, self.collector = Transport(), Connection(), Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.connection.container = "test"
        self.connection.open()
        session = self.connection.session()
        session.open()
        self.receiver = session.receiver("out")
        self.receiver.source.address = "out"
        self.receiver.snd_settle_mode = Link.SND_UNSETTLED
        self.receiver.open()
        self.receiver.flow(100)
        self.sender = session.sender("in")
        self.sender.target.address = "in"
        self.sender.open()
        self.received: list[Delivery] = []
        self.pump()
        assert self.router.consumer is not None

    def client_events(self) -> None:
        while (event := self.collector.peek()) is not None:
            delivery = event.delivery if event.type == Event.DELIVERY else None
            if delivery is not None and delivery.link.is_receiver and delivery.readable and not delivery.partial:
                delivery.link.recv(delivery.pending)
                delivery.link.advance()
                self.received.append(delivery)
            self.collector.pop()

    def pump(self) -> None:
        """Bytes both ways until neither side has any; the client's output reaches the server as one read."""
        while True:
            out = self.transport.peek(self.transport.pending()) if self.transport.pending() > 0 else b""
            if out:
                self.transport.pop(len(out))
                self.server.receive(out)
            back = bytes(self.server.take_output())
            if back:
                self.transport.push(back)
            self.client_events()
            if not out and not back:
                return

    def send(self, *durable: bool) -> list[BrokerMessage]:
        messages = []
        for i, is_durable in enumerate(durable):
            message = BrokerMessage(Message(body=f"m{i}").encode(), {}, None, False, "p", i)
            message.holders = {"out"} if is_durable else None
            self.router.consumer.send(message)
            messages.append(message)
        self.pump()
        return messages


@pytest.mark.skipif(engine_module._links is None, reason="the C path is not built (no compiler)")
def test_a_reads_settlements_are_handled_in_one_c_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    run = engine_module._settled_run
    assert run is not None

    def counted(*args: Any) -> int:
        calls.append(run(*args))
        return calls[-1]

    monkeypatch.setattr(engine_module, "_settled_run", counted)
    pair = Pair()
    pair.send(*[False] * 30)
    assert len(pair.received) == 30 and len(pair.router.consumer.unsettled) == 30
    for delivery in pair.received:
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
    pair.pump()
    assert pair.router.consumer.unsettled == {}
    assert calls[0] == 30 and sum(calls) == 30  # (the first call took all of them)
    assert pair.router.redelivered == [] and pair.router.done == []


def test_released_modified_rejected_and_durable_keep_their_meaning(path: str) -> None:
    pair = Pair()
    messages = pair.send(False, True, False, True, False, True, False)
    outcomes = [Delivery.ACCEPTED, Delivery.ACCEPTED, Delivery.RELEASED, Delivery.REJECTED, Delivery.MODIFIED,
                Delivery.RELEASED, None]  # (the last one settled without an outcome)
    for delivery, outcome in zip(pair.received, outcomes):
        if outcome is not None:
            delivery.update(outcome)
        delivery.settle()
    pair.pump()
    router = pair.router
    assert router.consumer.unsettled == {}
    # (in the order proton gives the settlements, not always the deliveries')
    assert sorted(router.redelivered, key=messages.index) == [messages[2], messages[4], messages[5]]  # back
    assert sorted(router.done, key=messages.index) == [messages[1], messages[3]]  # durable: done with


def test_an_outcome_not_settled_yet_leaves_the_message_out(path: str) -> None:
    pair = Pair()
    messages = pair.send(False, False)
    pair.received[0].update(Delivery.ACCEPTED)  # (not settled: the consumer settles it later)
    pair.pump()
    assert list(pair.router.consumer.unsettled.values()) == [messages[1]]
    pair.received[1].settle()
    pair.pump()
    assert pair.router.consumer.unsettled == {}


def test_a_publishers_message_between_settlements_is_routed(path: str) -> None:
    pair = Pair()
    pair.send(False, False, False)
    pair.received[0].update(Delivery.ACCEPTED)
    pair.received[0].settle()
    pair.sender.delivery("t1")
    pair.sender.send(Message(body="published").encode())
    pair.sender.advance()
    for delivery in pair.received[1:]:
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
    pair.pump()
    assert pair.router.consumer.unsettled == {}
    assert len(pair.router.published) == 1
    decoded = Message()
    decoded.decode(pair.router.published[0])
    assert decoded.body == "published"


def test_the_message_log_sees_one_key_per_delivery(path: str) -> None:
    class Log:
        def __init__(self) -> None:
            self.sent: list[object] = []
            self.settled: list[tuple[object, str]] = []

        def sent_(self, link: Any, message: BrokerMessage, delivery: object) -> None:
            self.sent.append(delivery)

        def settled_(self, link: Any, message: BrokerMessage, delivery: object, outcome: str) -> None:
            self.settled.append((delivery, outcome))

    log = Log()
    pair = Pair()
    pair.server.delivery_log = type("L", (), {"sent": staticmethod(log.sent_),
                                              "settled": staticmethod(log.settled_)})()
    pair.send(False, False)
    for delivery, outcome in zip(pair.received, (Delivery.ACCEPTED, Delivery.RELEASED)):
        delivery.update(outcome)
        delivery.settle()
    pair.pump()
    assert len(set(log.sent)) == 2 and all(key is not None for key in log.sent)
    assert log.settled == [(log.sent[0], "accepted"), (log.sent[1], "released")]
