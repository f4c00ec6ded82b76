"""A consumer's deliveries and settlements and a publisher's messages through the server engine, in
process (proton's own client, no socket), each behaviour through the C path (``interchange.broker._links``)
and the Python one: the C path sends each delivery, handles a run of settlements at the head of
proton's events in one call and reads a run of whole messages in one call, and leaves to the Python
code exactly what it decides (a released or modified message goes back to its source; an aborted
message, one over the size limit); a durable message settled is done with at its source; the message
log sees each delivery under the same key when it is sent and when it is settled; a publisher's
messages are routed in order and answered (accepted, rejected with the reason, accepted once stored,
released while shutting down), however many frames each took."""
from __future__ import annotations

from typing import Any

import pytest
from proton import Collector, Connection, Delivery, Event, Link, Message, Transport

from interchange.broker import engine as engine_module
from interchange.broker.engine import ConnectionEngine, EngineLimits, Rejected
from interchange.broker.message import BrokerMessage



@pytest.fixture(params=["c", "python"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each behaviour through the C path (when built) and through the Python one."""
    if request.param == "c" and engine_module._links is None:
        pytest.skip("the C path is not built (no compiler) or turned off")
    if request.param == "python":
        monkeypatch.setattr(engine_module, "_settled_run", None)
        monkeypatch.setattr(engine_module, "_deliver", None)
        monkeypatch.setattr(engine_module, "_deliver_run", None)
        monkeypatch.setattr(engine_module, "_received_run", None)
    return str(request.param)


class Router:
    """The broker core as the engine sees it: one consumer link, what it was told."""

    def __init__(self) -> None:
        self.consumer: Any = None
        self.published: list[bytes] = []
        self.done: list[BrokerMessage] = []
        self.redelivered: list[BrokerMessage] = []
        self.receipts: list[Receipt] = []

    def attach_publisher(self, identity: str, address: str | None) -> Any:
        return type("Publisher", (), {"closer": None})()

    def attach_consumer(self, identity: str, address: str | None, selector: str | None, link: Any) -> None:
        self.consumer = link

    def publish(self, publisher: Any, raw: bytes | bytearray) -> Any:
        self.published.append(bytes(raw))
        body = _body(raw)
        if body == "reject":
            raise Rejected("not for this target")
        if body == "durable":
            receipt = Receipt()
            self.receipts.append(receipt)
            return receipt
        return None

    def detach_publisher(self, publisher: Any) -> None: ...

    def detach_consumer(self, link: Any) -> None: ...

    def consumed(self, link: Any, message: BrokerMessage) -> None:
        self.done.append(message)

    def credit_available(self, link: Any) -> None: ...

    def redeliver(self, link: Any, message: BrokerMessage) -> None:
        self.redelivered.append(message)


class Receipt:
    """A durable message's store commit, completed by the test."""

    reason, full = "disk error", False

    def __init__(self) -> None:
        self.waiting: list[tuple[Any, Any]] = []

    def add(self, callback: Any, arg: Any) -> None:
        self.waiting.append((callback, arg))

    def done(self, ok: bool) -> None:
        for callback, arg in self.waiting:
            callback(arg, ok)


def _body(raw: bytes | bytearray) -> Any:
    message = Message()
    message.decode(bytes(raw))
    return message.body


class Pair:
    """The server engine and a proton client with a receiver (unsettled) and a sender, bytes moved by hand."""

    def __init__(self, limits: EngineLimits = EngineLimits()) -> None:
        self.router = Router()
        self.server = ConnectionEngine(self.router, "actor-1", limits, lambda: None)
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
        self.answered: dict[str, tuple[Any, str | None]] = {}  #: tag -> (outcome, its condition's description)
        self.pump()
        assert self.router.consumer is not None

    def client_events(self) -> None:
        while (event := self.collector.peek()) is not None:
            delivery = event.delivery if event.type == Event.DELIVERY else None
            if delivery is not None and delivery.link.is_receiver and delivery.readable and not delivery.partial:
                delivery.link.recv(delivery.pending)
                delivery.link.advance()
                self.received.append(delivery)
            elif delivery is not None and delivery.link.is_sender and delivery.updated:
                condition = delivery.remote.condition
                self.answered[delivery.tag] = (delivery.remote_state,
                                               condition.description if condition is not None else None)
                delivery.settle()
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

    def publish(self, *bodies: str, size: int = 0, settled: bool = False) -> None:
        """The client's messages on its sender (``size``: a body of that many bytes after the text)."""
        for body in bodies:
            delivery = self.sender.delivery(f"t-{body}")
            self.sender.send(Message(body=body + "." * size if size else body).encode())
            self.sender.advance()
            if settled:
                delivery.settle()

    def send(self, *durable: bool) -> list[BrokerMessage]:
        messages = []
        for i, is_durable in enumerate(durable):
            message = BrokerMessage(Message(body=f"m{i}").encode(), {}, None, False, "p", i)
            message.holders = {"out"} if is_durable else None
            self.router.consumer.send(message)
            messages.append(message)
        self.pump()
        return messages


@pytest.mark.skipif(engine_module._links is None, reason="the C path is not built (no compiler) or turned off")
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


@pytest.mark.skipif(engine_module._links is None, reason="the C path is not built (no compiler) or turned off")
def test_a_reads_whole_messages_are_read_in_one_c_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    run = engine_module._received_run
    assert run is not None

    def counted(*args: Any) -> int:
        calls.append(run(*args))
        return calls[-1]

    monkeypatch.setattr(engine_module, "_received_run", counted)
    pair = Pair()
    bodies = [f"m{i}" for i in range(25)]
    pair.publish(*bodies)
    pair.pump()
    assert [_body(raw) for raw in pair.router.published] == bodies
    assert calls[0] == 25 and sum(calls) == 25
    assert {tag: outcome for tag, (outcome, _) in pair.answered.items()} == {
        f"t-{body}": Delivery.ACCEPTED for body in bodies}


def test_messages_are_routed_in_order_and_answered_each_its_way(path: str) -> None:
    pair = Pair()
    pair.publish("a", "reject", "durable", "b")
    pair.pump()
    assert [_body(raw) for raw in pair.router.published] == ["a", "reject", "durable", "b"]
    assert pair.answered["t-a"] == (Delivery.ACCEPTED, None) and pair.answered["t-b"][0] == Delivery.ACCEPTED
    assert pair.answered["t-reject"] == (Delivery.REJECTED, "not for this target")
    assert "t-durable" not in pair.answered  # accepted once stored
    pair.router.receipts[0].done(True)
    pair.pump()
    assert pair.answered["t-durable"] == (Delivery.ACCEPTED, None)


def test_a_publishers_credit_is_topped_up_once_half_of_it_is_used(path: str) -> None:
    pair = Pair()
    pair.publish(*(f"m{i}" for i in range(400)))
    pair.pump()
    assert pair.sender.credit == 600  # (more than half left: not yet)
    pair.publish(*(f"n{i}" for i in range(200)))
    pair.pump()
    assert pair.sender.credit >= 500 and len(pair.router.published) == 600  # (400 without a top-up)


def test_a_durable_message_the_store_could_not_take_is_rejected(path: str) -> None:
    pair = Pair()
    pair.publish("durable")
    pair.pump()
    pair.router.receipts[0].done(False)
    pair.pump()
    outcome, description = pair.answered["t-durable"]
    assert outcome == Delivery.REJECTED and description is not None and "disk error" in description


def test_messages_of_many_frames_and_large_ones_arrive_whole(path: str) -> None:
    pair = Pair(EngineLimits(max_frame_size=4096))
    pair.publish("x", size=20_000)  # five frames
    pair.publish("y", size=70_000)  # over the size kept as bytes: the buffer proton filled
    pair.pump()
    assert [len(_body(raw)) for raw in pair.router.published] == [20_001, 70_001]
    assert [outcome for outcome, _ in pair.answered.values()] == [Delivery.ACCEPTED] * 2


def test_a_message_over_the_limit_closes_the_link(path: str) -> None:
    pair = Pair(EngineLimits(max_message_size=1000))
    pair.publish("small")
    pair.publish("big", size=2000)
    pair.pump()
    assert [_body(raw) for raw in pair.router.published] == ["small"]
    assert pair.sender.remote_condition is not None
    assert pair.sender.remote_condition.name == "amqp:link:message-size-exceeded"


def test_an_aborted_message_is_discarded_and_the_next_one_taken(path: str) -> None:
    pair = Pair(EngineLimits(max_frame_size=4096))
    delivery = pair.sender.delivery("t-aborted")
    pair.sender.send(Message(body="z" * 10_000).encode()[:5000])
    pair.pump()
    delivery.abort()
    pair.publish("after")
    pair.pump()
    assert [_body(raw) for raw in pair.router.published] == ["after"]
    assert pair.answered["t-after"][0] == Delivery.ACCEPTED


def test_while_shutting_down_messages_are_released(path: str) -> None:
    pair = Pair()
    pair.server.links.accepting = False
    pair.publish("a", "b")
    pair.publish("c", settled=True)
    pair.pump()
    assert pair.router.published == []
    assert {tag: outcome for tag, (outcome, _) in pair.answered.items()} == {
        "t-a": Delivery.RELEASED, "t-b": Delivery.RELEASED}


def test_a_run_is_sent_as_far_as_the_credit_goes_as_one_by_one(path: str) -> None:
    """``send_run`` sends what :meth:`send` one by one would while the link has credit (here 100), in
    order, each its own tag and unsettled entry; nothing once the connection is paused."""
    pair = Pair()
    consumer = pair.router.consumer
    messages = [BrokerMessage(Message(body=f"m{i}").encode(), {}, None, False, "p", i) for i in range(120)]
    consumer.engine.paused = True
    assert consumer.send_run(messages) == 0
    consumer.engine.paused = False
    assert consumer.send_run(messages[:5]) == 5
    assert consumer.send_run(messages[5:]) == 95  # (the credit left)
    pair.pump()
    assert len(pair.received) == 100 and len(set(d.tag for d in pair.received)) == 100
    assert list(consumer.unsettled.values()) == messages[:100]
    for delivery in pair.received:
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
    pair.pump()
    assert consumer.unsettled == {}


@pytest.mark.skipif(engine_module._links is None, reason="the C path is not built (no compiler) or turned off")
def test_a_run_in_c_is_as_one_by_one_and_a_bad_message_stops_it_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_links.deliver_run``: the same deliveries (tags, bytes, bytearray bodies too) as ``deliver`` one by
    one; a message without bytes stops the run with its error, the ones before it sent and counted."""
    got = []
    for run in (True, False):
        if not run:
            monkeypatch.setattr(engine_module, "_deliver_run", None)
        pair = Pair()
        consumer = pair.router.consumer
        raws = [Message(body=f"m{i}").encode() for i in range(6)]
        messages = [BrokerMessage(bytearray(raw) if i % 2 else raw, {}, None, False, "p", i)
                    for i, raw in enumerate(raws)]
        assert consumer.send_run(messages) == 6
        pair.pump()
        got.append([d.tag for d in pair.received])
        assert [bytes(m.raw) for m in consumer.unsettled.values()] == raws
    assert got[0] == got[1] == [i.to_bytes(8, "big").decode() for i in range(1, 7)]  # (proton gives str tags)
    monkeypatch.setattr(engine_module, "_deliver_run", engine_module._links.deliver_run)
    pair = Pair()
    consumer = pair.router.consumer
    good = BrokerMessage(Message(body="ok").encode(), {}, None, False, "p", 0)
    with pytest.raises(AttributeError):
        consumer.send_run([good, good, object()])  # type: ignore[list-item]
    assert len(consumer.unsettled) == 2 and consumer._tag == 2  # (the two sent, each its delivery and tag)
    consumer.send_run([BrokerMessage(Message(body="next").encode(), {}, None, False, "p", 1)])
    pair.pump()
    assert [d.tag for d in pair.received] == [i.to_bytes(8, "big").decode() for i in (1, 2, 3)]
