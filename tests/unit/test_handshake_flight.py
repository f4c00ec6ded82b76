"""A handshake step writes the flight it made itself (interchange.broker.handshake_queue.sending_step),
on the worker's thread, through a descriptor of the socket of its own: the server's flights leave the
event loop's thread, for the BI (AmqpConnection) and the II (TlsServerProtocol). What the socket does
not take stays in the session and the loop writes it after, in order; a transport still holding
earlier bytes gets no direct write; a deadline while the step is out shuts the socket down at once.
Real TLS in memory; the "socket" is a pipe (no network), whose written end stands for it."""
from __future__ import annotations

import asyncio
import os
import socket
import threading
from typing import Any

import pytest
from certs import TestPki
from certs.tls import client_context, server_context
from interchange.broker.handshake_queue import FlightWriter, HandshakeQueue
from interchange.broker.server import AmqpConnection
from interchange.broker.tls_stream import HANDSHAKE_TIMEOUT, TlsSession
from interchange.testing.memory_transport import MemoryTlsClient, MemoryTransport
from interchange.testing.pki_fixtures import ACTOR, SERVER, files_for
from tests.unit.test_handshake_worker import Gate, bi_server, until


class PipeSocket:
    """The part of a socket a flight writer uses: its descriptor (a pipe's written end), and shutdown."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.shut: list[int] = []

    def fileno(self) -> int:
        return self.write_fd

    def shutdown(self, how: int) -> None:
        self.shut.append(how)

    def take(self) -> bytes:
        try:
            return os.read(self.read_fd, 1 << 16)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


class SocketTransport(MemoryTransport):
    """A memory transport with a socket behind it (and a write buffer that may hold bytes)."""

    def __init__(self, sock: PipeSocket) -> None:
        super().__init__(strict=True)
        self.sock, self.buffered = sock, 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock if name == "socket" else super().get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        return self.buffered


class Bi:
    def __init__(self, pki: TestPki) -> None:
        self.server, self.events = bi_server()
        self.sock = PipeSocket()
        self.raw = SocketTransport(self.sock)
        self.protocol = AmqpConnection(self.server, None, server_context(files_for(pki, SERVER)))
        self.client = MemoryTlsClient(client_context(files_for(pki, ACTOR)), SERVER)
        self.protocol.connection_made(self.raw)
        assert self.protocol._tls is not None
        self.session: TlsSession = self.protocol._tls

    def close(self) -> None:
        self.server.handshakes.close()
        self.sock.close()


def written_by(monkeypatch: pytest.MonkeyPatch, cap: int | None = None) -> list[int]:
    """Record the threads FlightWriter.write runs on; ``cap``: the socket takes at most that many bytes."""
    threads: list[int] = []
    write = FlightWriter.write

    def recorded(self: FlightWriter, data: bytes) -> int:
        threads.append(threading.get_ident())
        return write(self, data[:cap] if cap is not None else data)

    monkeypatch.setattr(FlightWriter, "write", recorded)
    return threads


def test_the_server_flight_is_written_by_the_step_on_the_worker_not_the_loop(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    threads = written_by(monkeypatch)

    async def main() -> None:
        bi = Bi(pki_main)
        bi.protocol.data_received(bi.client.step())
        await until(lambda: bi.server.handshakes.stepped == 1 and bi.server.handshakes.out == 0)
        flight = bi.sock.take()
        assert flight and bi.raw.out == b""  # the ServerHello ... Finished went through the step's descriptor
        assert threads and threading.get_ident() not in threads
        bi.protocol.data_received(bi.client.step(flight))
        await until(lambda: bi.protocol in bi.server.connections)
        assert bi.protocol.identity == ACTOR and [kind for kind, _ in bi.events] == ["connect"]
        assert bi.client.obj.version() == "TLSv1.3"
        bi.close()

    asyncio.run(main())


def test_what_the_socket_does_not_take_is_written_by_the_loop_after_in_order(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    written_by(monkeypatch, cap=100)

    async def main() -> None:
        bi = Bi(pki_main)
        bi.protocol.data_received(bi.client.step())
        await until(lambda: bool(bi.raw.out))
        head = bi.sock.take()
        assert len(head) == 100
        bi.protocol.data_received(bi.client.step(head + bi.raw.take()))  # the client reads one whole flight
        await until(lambda: bi.protocol in bi.server.connections)
        assert bi.protocol.identity == ACTOR
        bi.close()

    asyncio.run(main())


def test_a_transport_holding_earlier_bytes_gets_no_direct_write(pki_main: TestPki,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    threads = written_by(monkeypatch)

    async def main() -> None:
        bi = Bi(pki_main)
        bi.raw.buffered = 10  # a flight written now would overtake them
        bi.protocol.data_received(bi.client.step())
        await until(lambda: bool(bi.raw.out))
        assert threads == [] and bi.sock.take() == b""
        bi.close()

    asyncio.run(main())


def test_the_step_closes_its_own_descriptor() -> None:
    sock = PipeSocket()
    before = len(os.listdir("/proc/self/fd"))
    writer = FlightWriter.of(SocketTransport(sock))
    assert writer is not None and len(os.listdir("/proc/self/fd")) == before + 1
    assert writer.write(b"abc") == 3 and sock.take() == b"abc"
    writer.close()
    assert len(os.listdir("/proc/self/fd")) == before
    writer = FlightWriter.of(SocketTransport(sock))
    assert writer is not None
    os.close(sock.read_fd)  # the peer is gone: the write fails (EPIPE) and says it wrote nothing
    assert writer.write(b"x") == 0
    writer.close()
    os.close(sock.write_fd)


def test_a_deadline_while_the_step_is_out_shuts_the_socket_down_at_once(pki_main: TestPki) -> None:
    """The step holds a descriptor of the socket until it is back: the loop's close alone would not
    close the connection till then; the shutdown does, and the step's outcome is dropped."""
    async def main() -> None:
        bi = Bi(pki_main)
        bi.protocol.data_received(bi.client.step())
        await until(lambda: bi.server.handshakes.stepped == 1 and bi.server.handshakes.out == 0)
        gate = Gate(bi.session)
        bi.protocol.data_received(bi.client.step(bi.sock.take() + bi.raw.take()))
        await asyncio.to_thread(gate.entered.wait, 5)
        bi.protocol._deadline_passed()
        assert bi.sock.shut == [socket.SHUT_RDWR] and bi.raw.closed
        gate.open.set()
        await until(lambda: bi.server.handshakes.out == 0)
        assert bi.events == [("tls_refused", {"peer": "127.0.0.1:40000", "reason": HANDSHAKE_TIMEOUT})]
        bi.close()

    asyncio.run(main())


def test_ii_flight_written_by_the_step_too(pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    from ii_api.http.tls_site import TlsServerProtocol
    threads = written_by(monkeypatch)

    async def main() -> None:
        queue = HandshakeQueue()
        sock = PipeSocket()
        raw = SocketTransport(sock)
        protocol = TlsServerProtocol(lambda: asyncio.Protocol(), server_context(files_for(pki_main, SERVER)),
                                     lambda *a: None, None, (3.0, 3.0, 3.0), queue)
        client = MemoryTlsClient(client_context(files_for(pki_main, ACTOR)), SERVER)
        protocol.connection_made(raw)
        protocol.data_received(client.step())
        await until(lambda: queue.stepped == 1 and queue.out == 0)
        assert sock.take() and raw.out == b"" and threads and threading.get_ident() not in threads
        queue.close()
        sock.close()

    asyncio.run(main())
