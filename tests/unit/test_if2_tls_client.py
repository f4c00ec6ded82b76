"""The client side of interchange.broker.tls_stream's session, as the IF2 bridge uses it, fed bytes in memory
(no sockets), against the broker's server-side session as its peer; and the 0-9-1 client over it (AMQP starts only
once the handshake completed, everything it writes is encrypted)."""
from __future__ import annotations

import asyncio
import pytest

from certs import TestPki
from certs.tls import client_context, server_context
from interchange.bridges.if2.amqp091 import Connection
from interchange.bridges.if2.amqp091_io import Client
from interchange.broker.tls_stream import TlsSession
from interchange.testing.pki_fixtures import ACTOR, SERVER, files_for


def _client(pki: TestPki, server_hostname: str) -> TlsSession:
    return TlsSession(client_context(files_for(pki, ACTOR)), server_side=False, server_hostname=server_hostname)


def _open(client: TlsSession, server: TlsSession) -> bytes:
    """The handshake to its end; returns what the server sent with its last step (plaintext)."""
    to_server = client.start().send
    for _ in range(10):
        step = server.receive(to_server)
        assert step.error is None
        received = client.receive(step.send)
        to_server = received.send
        if received.established:
            assert server.receive(to_server).established
            return received.data
    raise AssertionError("the handshake did not finish")


def test_handshake_then_data_both_ways_several_records_in_one_read(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)))
    client = _client(pki_main, SERVER)
    assert not client.established
    _open(client, server)
    assert client.established
    records = server.send(b"a" * 40000) + server.send(b"tail")  # (three records and a fourth)
    received = client.receive(records[:100])  # (part of a record: nothing yet)
    assert received.data == b"" and not received.closed
    received = client.receive(records[100:])
    assert received.data == b"a" * 40000 + b"tail" and not received.closed
    assert server.receive(client.send(b"AMQP\x00\x00\x09\x01")).data == b"AMQP\x00\x00\x09\x01"
    assert client.receive(server.close()).closed  # close_notify


def test_a_server_of_another_name_fails_the_handshake(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)))
    client = _client(pki_main, "not-" + SERVER)
    step = server.receive(client.start().send)
    refused = client.receive(step.send)
    assert refused.error is not None and "certificate" in refused.error
    assert refused.send[:1] == b"\x15"  # the alert, for the server's log
    assert not client.established


class _Transport(asyncio.Transport):
    """What the client writes (no socket)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True


def test_amqp_starts_once_the_handshake_completed_and_is_encrypted(pki_main: TestPki) -> None:
    async def run() -> None:
        server = TlsSession(server_context(files_for(pki_main, SERVER)))
        client = Client(Connection(), _client(pki_main, SERVER))
        transport = _Transport()
        client.connection_made(transport)  # type: ignore[arg-type]
        hello = b"".join(transport.written)
        assert hello[:1] == b"\x16"  # a TLS handshake record, no AMQP header
        client.flush()
        assert b"".join(transport.written) == hello  # nothing of AMQP before the handshake completed
        step = server.receive(hello)
        transport.written.clear()
        client.data_received(step.send)  # the server's flight: the client's Finished, then AMQP's header
        last = server.receive(b"".join(transport.written))
        assert last.established and last.data == b"AMQP\x00\x00\x09\x01"

    asyncio.run(run())


def test_a_tls_failure_ends_the_connection(pki_main: TestPki) -> None:
    async def run() -> None:
        server = TlsSession(server_context(files_for(pki_main, SERVER)))
        client = Client(Connection(), _client(pki_main, "not-" + SERVER))
        transport = _Transport()
        client.connection_made(transport)  # type: ignore[arg-type]
        client.data_received(server.receive(b"".join(transport.written)).send)
        assert transport.aborted and client.closed.done() and "TLS" in client.closed.result()
        with pytest.raises(ConnectionError):
            await client.opened

    asyncio.run(run())
