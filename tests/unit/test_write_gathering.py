"""Writes gathered over loop turns: the broker's flush and the IF2 bridge's AMQP 0-9-1 client write
what two turns caused in one write (each write to a TCP socket is a system call that also runs the
peer's receive), a lone output is written in the turn after next, and while TLS handshakes wait the
broker's flush is not deferred (a handshake turn would come in between). No socket: the broker's
connections and the client's transport are recorders."""
from __future__ import annotations

import asyncio
from typing import Any

from pamqp import commands, frame

from interchange.bridges.if2.amqp091 import Connection
from interchange.bridges.if2.amqp091_io import Client
from interchange.broker.addresses import AddressBook
from interchange.broker.admission import Admission
from interchange.broker.engine import EngineLimits
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.server import BrokerServer
from interchange.broker.ttl_policy import TtlPolicy


class Flushed:
    """A broker connection as far as the server's flush uses it."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self._log = name, log

    def flush(self) -> None:
        self._log.append(self.name)


class Waiting:
    """A connection whose handshake input waits in the server's queue (its step does nothing)."""

    def handshake_work(self) -> None:
        return None

    def handshake_done(self, outcome: Any) -> None:
        pass


def _server(thread: str = "thread") -> BrokerServer:
    core = BrokerCore(AddressBook(), Admission(TtlPolicy()), BrokerObserver(None))
    return BrokerServer(core, EngineLimits(handshake_thread=thread))  # type: ignore[arg-type]


def test_the_broker_writes_what_two_turns_caused_in_one_flush() -> None:
    async def run() -> None:
        server, flushed = _server(), []
        first, second = Flushed("first", flushed), Flushed("second", flushed)
        server.mark_dirty(first)  # type: ignore[arg-type]
        await asyncio.sleep(0)  # the next turn: its input (here: the second connection's) joins
        server.mark_dirty(second)  # type: ignore[arg-type]
        server.mark_dirty(first)  # type: ignore[arg-type]
        assert flushed == []
        await asyncio.sleep(0)
        assert sorted(flushed) == ["first", "second"]  # one flush, each connection once
        await asyncio.sleep(0)
        assert len(flushed) == 2

    asyncio.run(run())


def test_while_handshakes_wait_the_broker_flushes_in_the_next_turn() -> None:
    async def run() -> None:
        server, flushed = _server("loop"), []
        server.handshakes.submit(Waiting())
        assert len(server.handshakes) == 1
        server.mark_dirty(Flushed("steady", flushed))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert flushed == ["steady"]

    asyncio.run(run())


class Wire(asyncio.Transport):
    """The 0-9-1 client's transport: each write kept apart."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False


def _client() -> tuple[Client, Wire]:
    client, wire = Client(Connection()), Wire()
    client.connection_made(wire)
    client.data_received(b"".join(frame.marshal(value, 0) for value in (
        commands.Connection.Start(mechanisms="EXTERNAL"), commands.Connection.Tune(frame_max=131072, heartbeat=0),
        commands.Connection.OpenOk())))
    client.amqp.send(1, commands.Channel.Open())
    client.amqp.send(1, commands.Confirm.Select())
    client.data_received(frame.marshal(commands.Channel.OpenOk(), 1) + frame.marshal(commands.Confirm.SelectOk(), 1))
    wire.writes.clear()
    return client, wire


def _published(data: bytes) -> list[str]:
    keys = []
    while data:
        size, _, value = frame.unmarshal(data)
        data = data[size:]
        if isinstance(value, commands.Basic.Publish):
            keys.append(value.routing_key)
    return keys


def test_the_bridge_publishes_of_two_turns_in_one_write_each_with_its_own_confirm() -> None:
    async def run() -> None:
        client, wire = _client()
        confirms: dict[str, list[bool]] = {"a": [], "b": [], "c": []}
        client.publish(1, "SPAT", "a", commands.Basic.Properties(), b"1", confirms["a"].append)
        await asyncio.sleep(0)
        client.publish(1, "SPAT", "b", commands.Basic.Properties(), b"2", confirms["b"].append)
        assert wire.writes == []
        await asyncio.sleep(0)
        assert [_published(write) for write in wire.writes] == [["a", "b"]]
        client.publish(1, "SPAT", "c", commands.Basic.Properties(), b"3", confirms["c"].append)  # alone
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert [_published(write) for write in wire.writes] == [["a", "b"], ["c"]]
        client.data_received(frame.marshal(commands.Basic.Ack(1, False), 1))  # RabbitMQ confirms the first
        assert confirms == {"a": [True], "b": [], "c": []}
        client.data_received(frame.marshal(commands.Basic.Ack(3, True), 1))  # ... then the rest
        assert confirms == {"a": [True], "b": [True], "c": [True]}

    asyncio.run(run())
