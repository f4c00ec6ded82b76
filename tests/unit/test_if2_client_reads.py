"""The bridge's AMQP 0-9-1 client hands the deliveries of one read on as one list, in delivery order,
and nothing that came after the broker closed the connection (RabbitMQ delivers it again)."""
from __future__ import annotations

import asyncio
from typing import Any

from pamqp import body, commands, frame, header

from interchange.bridges.if2.amqp091 import Connection, Delivery
from interchange.bridges.if2.amqp091_io import Client
from tests.unit.test_if2_export_path import OPENING


def _frames(*frames: tuple[int, Any]) -> bytes:
    return b"".join(frame.marshal(value, channel) for channel, value in frames)


def _delivery(tag: int) -> bytes:
    payload = b"body %d" % tag
    return _frames((2, commands.Basic.Deliver("c", tag, False, "DENM", "k")),
                   (2, header.ContentHeader(0, len(payload), commands.Basic.Properties(expiration="60000"))),
                   (2, body.ContentBody(payload)))


def _client() -> tuple[Client, list[list[Delivery]]]:
    connection = Connection()
    connection.start()
    connection.receive(OPENING)
    connection.send(2, commands.Channel.Open())
    connection.receive(_frames((2, commands.Channel.OpenOk())))
    client = Client(connection)
    reads: list[list[Delivery]] = []
    client.on_deliveries = reads.append
    return client, reads


def test_one_call_per_read_in_delivery_order() -> None:
    async def run() -> None:
        client, reads = _client()
        client.data_received(b"".join(_delivery(tag) for tag in (1, 2, 3)))
        client.data_received(_delivery(4)[:30])  # (a delivery split across reads: handed on once whole)
        client.data_received(_delivery(4)[30:] + _delivery(5))
        assert [[d.delivery_tag for d in read] for read in reads] == [[1, 2, 3], [4, 5]]
        assert [d.body for d in reads[0]] == [b"body 1", b"body 2", b"body 3"]

    asyncio.run(run())


def test_what_came_after_a_close_is_not_handed_on() -> None:
    async def run() -> None:
        client, reads = _client()
        close = _frames((2, commands.Basic.Cancel("c")))  # (its queue deleted: the session ends)
        client.data_received(_delivery(1) + _delivery(2) + close + _delivery(3))
        assert [[d.delivery_tag for d in read] for read in reads] == [[1, 2]]
        assert client.closed.done() and "cancelled" in client.closed.result()

    asyncio.run(run())


class _Transport:
    """What the client does with its transport's reading (no socket)."""

    def __init__(self) -> None:
        self.reading, self.changes = True, 0

    def pause_reading(self) -> None:
        self.reading, self.changes = False, self.changes + 1

    def resume_reading(self) -> None:
        self.reading, self.changes = True, self.changes + 1

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        pass


def test_a_read_of_many_deliveries_rests_the_socket_then_reads_on() -> None:
    """After a read of ``rest_after`` deliveries or more the socket is not read for ``rest_s``, then read
    again; a smaller read (paced traffic) never waits."""
    async def run() -> None:
        client, reads = _client()
        transport = _Transport()
        client._transport = transport  # type: ignore[assignment]
        client.rest_after, client.rest_s = 3, 0.02
        client.data_received(_delivery(1) + _delivery(2))
        assert transport.reading and transport.changes == 0
        client.data_received(b"".join(_delivery(tag) for tag in (3, 4, 5)))
        assert not transport.reading
        client.data_received(b"".join(_delivery(tag) for tag in (6, 7, 8)))  # (what the TLS buffer still held)
        assert transport.changes == 1  # one rest at a time
        await asyncio.sleep(0.05)
        assert transport.reading and transport.changes == 2
        assert [len(read) for read in reads] == [2, 3, 3]

    asyncio.run(run())


def test_a_read_that_confirms_many_publishes_rests_the_socket_too() -> None:
    """A publisher's read that confirmed ``rest_after`` publishes or more (in one ack frame or several) rests
    the socket as a read of as many deliveries does, so the next confirms (and the refill and publishes
    they bring) come in one go; a read confirming fewer (paced traffic) never waits; every confirm is given
    to the publisher either way."""
    async def run() -> None:
        client, _ = _client()
        client.amqp.send(1, commands.Channel.Open())
        client.amqp.send(1, commands.Confirm.Select())
        client.amqp.receive(_frames((1, commands.Channel.OpenOk()), (1, commands.Confirm.SelectOk())))
        confirmed: list[tuple[list[int], bool]] = []
        client.on_confirmed = lambda tokens, ack: confirmed.append((list(tokens), ack))
        transport = _Transport()
        client._transport = transport  # type: ignore[assignment]
        client.rest_after, client.rest_s = 3, 0.02
        for token in range(1, 9):
            client.amqp.publish(1, "SPAT", "k", commands.Basic.Properties(), b"x", token)
        client.data_received(_frames((1, commands.Basic.Ack(2, multiple=True))))
        assert transport.reading and transport.changes == 0
        client.data_received(_frames((1, commands.Basic.Ack(3)), (1, commands.Basic.Ack(5, multiple=True))))
        assert not transport.reading and transport.changes == 1
        await asyncio.sleep(0.05)
        assert transport.reading and transport.changes == 2
        client.data_received(_frames((1, commands.Basic.Nack(8, multiple=True))))
        assert not transport.reading
        assert confirmed == [([1, 2], True), ([3], True), ([4, 5], True), ([6, 7, 8], False)]

    asyncio.run(run())


def test_a_closed_connection_does_not_rest() -> None:
    async def run() -> None:
        client, _ = _client()
        transport = _Transport()
        client._transport = transport  # type: ignore[assignment]
        client.rest_after = 1
        client.data_received(_delivery(1))
        assert not transport.reading
        client._end("gone")  # (the rest's timer cancelled with the connection)
        await asyncio.sleep(0.01)
        assert client._resting is None and transport.changes == 1

    asyncio.run(run())
