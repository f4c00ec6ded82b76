"""The IF2 export's batches: a loop turn's BI deliveries reach the bridge in one call at the door
(``on_messages``), RabbitMQ's confirms of one ack or nack frame reach the publisher in one call
(:attr:`Client.on_confirmed`), and the bridge accepts the confirmed deliveries of one frame at the
door in one call (:meth:`LocalConsumer.accept_all`). What each batch carries must be exactly what
the one-by-one calls carried: every delivery once, in order, settled only after its confirm."""
from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pamqp import body, commands, frame, header
from proton import Message

from certs import TestPki
from interchange.bridges.if2.amqp091 import Connection
from interchange.bridges.if2.amqp091_io import Client
from interchange.broker.local_door import LocalConsumer
from tests.unit.test_if2_export_path import OPENING, SPATEM, export_path, wire
from tests.unit.test_local_consumer import BODIES, CONSUMER, SOURCE, Broker, DoorReader, body_of


# ---------------------------------------------------------------------------- the door's consumer
def test_a_turns_deliveries_come_in_one_call_and_are_accepted_as_one_by_one() -> None:
    batched, single = Broker(), Broker()
    for broker in (batched, single):
        broker.publish(*BODIES)
    calls: list[tuple[list[bytes], list[int]]] = []
    consumer = batched.door.consume(CONSUMER, SOURCE, lambda raw, tag: pytest.fail("handed over one by one"), 3,
                                    on_messages=lambda raws, tags: calls.append(([body_of(r) for r in raws], tags)))
    reader = DoorReader(single, 3)
    batched.run()
    reader.pump()
    assert calls == [(BODIES[:3], [1, 2, 3])]  # the window's deliveries, in order, in one call
    while calls:
        bodies, tags = calls.pop(0)
        assert consumer.accept_all(tags) == len(tags)
        assert consumer.accept_all(tags[:1]) == 0  # settled already: nothing happens
        batched.run()
    came = []
    while reader.got:
        got, reader.got = reader.got, []
        for body_, tag in got:
            came.append(body_)
            assert reader.settle(tag, None)
        reader.pump()
    assert came == BODIES and batched.held() == single.held() == []

    def dumped(records: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps(r, sort_keys=True) for r in records)
    assert dumped(batched.records()) == dumped(single.records())  # the same sent_message records


def test_accept_all_tells_the_source_of_the_credit_once() -> None:
    broker = Broker()
    broker.publish(*BODIES)
    calls: list[list[int]] = []
    consumer = broker.door.consume(CONSUMER, SOURCE, lambda raw, tag: None, 4,
                                   on_messages=lambda raws, tags: calls.append(tags))
    broker.run()
    assert calls == [[1, 2, 3, 4]] and consumer.credit == 0
    assert consumer.accept_all([1, 2, 3]) == 3
    assert [turn.__name__ for turn in broker.turns] == ["_refill"]
    broker.turns.pop(0)()
    assert calls[1:] == [[5, 6, 7]] and consumer.credit == 0  # handed over by the refill, not a turn later
    broker.run()  # (the turn scheduled for the hand-over finds nothing left)
    assert calls[1:] == [[5, 6, 7]]


def test_what_went_back_before_its_turn_is_not_handed_over_in_the_batch() -> None:
    broker = Broker()
    broker.publish(*BODIES[:2])
    calls: list[list[int]] = []
    consumer = broker.door.consume(CONSUMER, SOURCE, lambda raw, tag: None, 5,
                                   on_messages=lambda raws, tags: calls.append(tags))
    consumer.detach()  # closed before the loop's next turn
    broker.run()
    assert calls == [] and broker.held() == BODIES[:2]
    assert consumer.accept_all([1, 2]) == 0  # the source has them back


# ---------------------------------------------------------------------------- the 0-9-1 client
def _confirm_channel() -> Connection:
    """A connection open with channel 1 in confirm mode."""
    connection = Connection()
    connection.start()
    connection.receive(OPENING)
    connection.send(1, commands.Channel.Open())
    connection.send(1, commands.Confirm.Select())
    connection.receive(wire((1, commands.Channel.OpenOk()), (1, commands.Confirm.SelectOk())))
    return connection


def _confirming_client() -> tuple[Client, list[tuple[list[Any], bool]]]:
    client = Client(_confirm_channel())
    confirmed: list[tuple[list[Any], bool]] = []
    client.on_confirmed = lambda tokens, ack: confirmed.append((list(tokens), ack))
    return client, confirmed


async def test_the_confirms_of_one_frame_come_in_one_call_and_a_lost_connection_gives_the_rest() -> None:
    client, confirmed = _confirming_client()
    for token in "abcdef":
        client.publish(1, "SPAT", "k", commands.Basic.Properties(), b"x", token)
    client.data_received(wire((1, commands.Basic.Ack(3, True)), (1, commands.Basic.Nack(4, False))))
    assert confirmed == [(["a", "b", "c"], True), (["d"], False)]
    client.connection_lost(None)
    assert confirmed[2:] == [(["e", "f"], False)]  # every unconfirmed publish, in one call
    client.publish(1, "SPAT", "k", commands.Basic.Properties(), b"x", "g")
    assert confirmed[3:] == [(["g"], False)]  # (after the connection went: not confirmed)


def test_a_publish_writes_the_frames_pamqp_writes() -> None:
    """The content header and body frames go to the output as parts (not joined per message): the
    bytes are still pamqp's, for an empty body, one frame and a body over frame-max."""
    properties = commands.Basic.Properties(app_id="node/if2", expiration="60000", headers={"ttl": 60000})
    for payload, frame_max in ((b"", 131072), (b"x" * 1500, 131072), (bytes(range(250)) * 5, 512)):
        connection = _confirm_channel()
        connection.frame_max = frame_max
        connection.take_output()
        connection.publish(1, "SPAT", "SPAT.key", properties, payload, "t")
        step = frame_max - 8
        expected = frame.marshal(commands.Basic.Publish(exchange="SPAT", routing_key="SPAT.key"), 1) + frame.marshal(
            header.ContentHeader(0, len(payload), properties), 1) + b"".join(
            frame.marshal(body.ContentBody(payload[at:at + step]), 1) for at in range(0, len(payload), step))
        assert connection.take_output() == expected


# ---------------------------------------------------------------------------- the bridge
async def test_the_confirms_of_one_frame_settle_their_deliveries_in_one_call(pki: TestPki) -> None:
    bridge, client, transport, publisher = await export_path(pki)
    consumer = bridge.bi.receiver
    assert isinstance(consumer, LocalConsumer)
    accepted: list[list[int]] = []
    accept_all = bridge.bi.accept_all

    def recorded(receiver: Any, tags: list[int]) -> int:
        accepted.append(list(tags))
        return accept_all(receiver, tags)
    bridge.bi.accept_all = recorded  # type: ignore[method-assign]
    for i in range(5):
        message = Message(body=b"body %d" % i, properties=SPATEM, inferred=True)
        message.ttl = 60.0
        publisher.publish(message.encode(), lambda outcome: None)
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(transport.published()) == 5 and len(consumer.unsettled) == 5
    client.data_received(wire((1, commands.Basic.Ack(2, True))))
    assert accepted == [[1, 2]] and sorted(consumer.unsettled) == [3, 4, 5]  # only what RabbitMQ confirmed
    assert bridge.counts["exported"] == 2 and bridge.in_flight == 3
    client.data_received(wire((1, commands.Basic.Nack(3, False)), (1, commands.Basic.Ack(5, True))))
    assert accepted == [[1, 2], [4, 5]] and sorted(consumer.unsettled) == [3]  # the nacked one held
    assert bridge.counts["exported"] == 4 and bridge.counts["export_nacked"] == 1 and bridge.in_flight == 1
    for _ in range(100):  # released after the back-off's hold (10 ms): given out again, published again
        await asyncio.sleep(0.005)
        if len(transport.published()) == 6:
            break
    assert sorted(consumer.unsettled) == [6] and transport.published()[5][3] == b"body 2"
    client.data_received(wire((1, commands.Basic.Ack(6, False))))
    assert accepted[2:] == [[6]] and not consumer.unsettled and bridge.counts["exported"] == 5


async def test_a_republish_and_exports_confirmed_by_one_frame_each_get_their_confirm(pki: TestPki) -> None:
    bridge, client, transport, publisher = await export_path(pki)
    message = Message(body=b"first", properties=SPATEM, inferred=True)
    message.ttl = 60.0
    publisher.publish(message.encode(), lambda outcome: None)
    for _ in range(3):
        await asyncio.sleep(0)
    envelope = next(iter(bridge.policy._entries.values())).payload  # (what the republishing loop publishes)
    republished: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    bridge._publish(envelope, b"again", republished.set_result)
    await asyncio.sleep(0)
    client.data_received(wire((1, commands.Basic.Ack(2, True))))
    assert await republished is True
    assert bridge.counts["exported"] == 1 and bridge.bi.receiver.unsettled == {}  # type: ignore[union-attr]
