"""The II's TLS termination (ii_api.http.tls_site) runs handshake steps in a HandshakeQueue's turns (its
``loop`` mode; on the worker: tests/unit/test_handshake_worker.py),
not in ``data_received``, while an established connection's requests are served at once; a
connection closed while it waits is skipped. Real TLS in memory (no sockets), a budget of 0 (one step
per loop turn)."""
from __future__ import annotations

import asyncio

import pytest

from certs import TestPki
from certs.tls import client_context, server_context
from ii_api.http.request_clock import RequestClock
from ii_api.http.tls_site import TlsServerProtocol
from interchange.broker.handshake_queue import HandshakeQueue
from interchange.testing.pki_fixtures import ACTOR, SERVER, files_for
from interchange.testing.memory_transport import MemoryTlsClient, MemoryTransport

TIMEOUTS = (10.0, 10.0, 10.0)  #: handshake, headers, body: none passes in these tests


class Inner(asyncio.Protocol):
    """Stands for aiohttp's request handler: records what reached it in plaintext."""

    def __init__(self) -> None:
        self.made = False
        self.data = b""
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made = True
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data += data


class HeldQueue:
    """Stands for a :class:`HandshakeQueue` with a flood ahead: a submitted step runs when the test says."""

    def __init__(self) -> None:
        self.waiting: list[TlsServerProtocol] = []

    def submit(self, connection: TlsServerProtocol) -> None:
        self.waiting.append(connection)

    def turn(self) -> None:
        waiting, self.waiting = self.waiting, []
        for connection in waiting:
            work = connection.handshake_work()
            if work is not None:
                connection.handshake_done(work())


class Connection:
    def __init__(self, pki: TestPki, queue: HandshakeQueue | HeldQueue) -> None:
        self.inner, self.raw = Inner(), MemoryTransport()
        self.server = TlsServerProtocol(lambda: self.inner, server_context(files_for(pki, SERVER)),
                                        lambda *_: None, None, TIMEOUTS, queue)  # type: ignore[arg-type]
        self.client = MemoryTlsClient(client_context(files_for(pki, ACTOR)), SERVER)
        self.server.connection_made(self.raw)


def loop_clock(monkeypatch: pytest.MonkeyPatch, start: float = 100.0) -> list[float]:
    """The running loop's clock, set by the test: ``now[0]``."""
    now = [start]
    monkeypatch.setattr(asyncio.get_running_loop(), "time", lambda: now[0])
    return now


def client_finished(connection: Connection, queue: HeldQueue) -> bytes:
    """The ClientHello in and stepped; the client's last flight (certificate, Finished), not yet sent."""
    connection.server.data_received(connection.client.step())
    queue.turn()
    return connection.client.step(connection.raw.take())


async def turn(queue: HandshakeQueue) -> None:
    """Until the queue's next turn ran (a budget of 0: one step)."""
    stepped = queue.stepped
    for _ in range(100):
        if queue.stepped != stepped:
            return
        await asyncio.sleep(0)
    raise AssertionError("no handshake turn ran")


def test_handshake_steps_wait_for_the_queue_and_an_established_connection_does_not(pki_main: TestPki) -> None:
    async def main() -> None:
        queue = HandshakeQueue(budget_s=0.0, thread="loop")
        first = Connection(pki_main, queue)
        first.server.data_received(first.client.step())  # ClientHello
        assert first.raw.out == b"" and len(queue) == 1  # not in data_received: in the queue's turn
        await turn(queue)
        assert first.raw.out and len(queue) == 0  # ServerHello ... server Finished
        first.server.data_received(first.client.step(first.raw.take()))  # client certificate, Finished
        assert not first.inner.made
        await turn(queue)
        assert first.inner.made and first.client.obj.version() == "TLSv1.3"

        arriving = [Connection(pki_main, queue) for _ in range(3)]
        for connection in arriving:
            connection.server.data_received(connection.client.step())
        assert len(queue) == 3 and all(c.raw.out == b"" for c in arriving)
        # an established connection's request is served at once, ahead of the waiting handshakes
        first.server.data_received(first.client.send(b"GET / HTTP/1.1\r\n\r\n"))
        assert first.inner.data == b"GET / HTTP/1.1\r\n\r\n" and len(queue) == 3
        await turn(queue)  # a budget of 0: one step per turn, in arrival order
        assert [bool(c.raw.out) for c in arriving] == [True, False, False]
        arriving[1].raw.close()  # closed while waiting (its deadline, the peer): skipped
        await turn(queue)
        assert [bool(c.raw.out) for c in arriving] == [True, False, False] and len(queue) == 1
        await turn(queue)
        assert [bool(c.raw.out) for c in arriving] == [True, False, True] and len(queue) == 0
        assert queue.stepped == 5

    asyncio.run(main())


def test_input_arriving_while_queued_is_fed_in_one_step(pki_main: TestPki) -> None:
    async def main() -> None:
        queue = HandshakeQueue(budget_s=0.0, thread="loop")
        connection = Connection(pki_main, queue)
        hello = connection.client.step()
        connection.server.data_received(hello[:10])
        connection.server.data_received(hello[10:])  # the rest of the ClientHello, same turn
        assert len(queue) == 1
        await turn(queue)
        connection.server.data_received(connection.client.step(connection.raw.take()))
        await turn(queue)
        assert connection.inner.made and not connection.raw.closed and queue.stepped == 2

    asyncio.run(main())


HEAD = b"POST /actor-1/subscriptions HTTP/1.1\r\nHost: ii\r\nContent-Length: 1000\r\n\r\n{"


@pytest.mark.parametrize("with_finished", [True, False])
def test_a_request_that_waited_for_a_handshake_step_is_timed_from_its_arrival(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch, with_finished: bool) -> None:
    """The client's Finished and its request head arrive at 101 s (together, or the head while the
    Finished's step is out); the step's turn comes at 103 s: the body's deadline runs from 101 s."""
    async def main() -> None:
        now = loop_clock(monkeypatch)
        queue = HeldQueue()
        connection = Connection(pki_main, queue)
        finished = client_finished(connection, queue)
        request = connection.client.send(HEAD)
        now[0] = 101.0
        if with_finished:
            connection.server.data_received(finished + request)
            now[0] = 103.0
            queue.turn()
        else:
            connection.server.data_received(finished)
            (waiting,) = queue.waiting
            step = waiting.handshake_work()  # out on the worker
            assert step is not None
            connection.server.data_received(request)
            now[0] = 103.0
            waiting.handshake_done(step())
        assert connection.inner.data == HEAD
        assert connection.inner.transport is not None
        clock = connection.inner.transport.get_extra_info("request_clock")
        assert isinstance(clock, RequestClock)
        assert clock.deadline is not None and clock.deadline.stage == "request body"
        assert clock.deadline.at == 101.0 + TIMEOUTS[2]

    asyncio.run(main())


def test_the_first_request_headers_are_timed_from_the_last_handshake_flight(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's Finished arrives at 101 s and nothing after it (a client that holds the connection
    idle); its step's turn comes at 103 s: the headers' deadline runs from 101 s, as the client counts it."""
    async def main() -> None:
        now = loop_clock(monkeypatch)
        queue = HeldQueue()
        connection = Connection(pki_main, queue)
        finished = client_finished(connection, queue)
        now[0] = 101.0
        connection.server.data_received(finished)
        now[0] = 103.0
        queue.turn()
        assert connection.inner.made and connection.inner.transport is not None
        clock = connection.inner.transport.get_extra_info("request_clock")
        assert isinstance(clock, RequestClock)
        assert clock.deadline is not None and clock.deadline.stage == "request headers"
        assert clock.deadline.at == 101.0 + TIMEOUTS[1]

    asyncio.run(main())


@pytest.mark.parametrize("arrived", [105.0, 111.0])
def test_a_flight_waiting_for_its_turn_when_the_handshake_deadline_passes_is_judged_at_its_arrival(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch, arrived: float) -> None:
    """Accepted at 100 s (deadline 110 s); the client's Finished arrives at ``arrived`` and waits in the
    queue; the timer runs at 111 s, before its turn: a flight that came in time is stepped and the
    connection established, one that came late is refused and never stepped."""
    async def main() -> None:
        now = loop_clock(monkeypatch)
        queue = HeldQueue()
        connection = Connection(pki_main, queue)
        finished = client_finished(connection, queue)
        now[0] = arrived
        connection.server.data_received(finished)
        now[0] = 111.0
        connection.server._deadline_passed()  # as its timer does
        queue.turn()
        assert connection.inner.made == (arrived < 110.0)
        assert connection.raw.closed == (arrived > 110.0)

    asyncio.run(main())


def test_the_handshake_deadline_moves_by_the_time_the_clients_input_waited_for_its_turn(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    """Accepted at 100 s with a 10 s handshake deadline; the ClientHello arrives at 101 s and its turn comes
    at 109 s: the node held it 8 s, so the client's deadline is 118 s, and the timer is armed there."""
    async def main() -> None:
        now = loop_clock(monkeypatch)
        queue = HeldQueue()
        connection = Connection(pki_main, queue)
        now[0] = 101.0
        connection.server.data_received(connection.client.step())  # ClientHello
        now[0] = 109.0
        queue.turn()
        assert connection.raw.out  # ServerHello ... server Finished
        session = connection.server._session
        assert session is not None and session.deadline is not None
        assert session.deadline.at == 118.0 and connection.server._timer_at == 118.0

    asyncio.run(main())
