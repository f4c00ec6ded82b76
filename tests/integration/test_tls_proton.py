"""proton_ssl_domain: proton clients and listeners with the node's TLS 1.3 settings (real sockets).

The peer of a proton client is the node's own kind of listener: Python ``ssl`` (server_context)
terminating TLS in asyncio, with a proton engine (Transport + Collector) speaking AMQP behind it.
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass, field
from typing import Any

import pytest
from proton import SSL, Collector, Connection, Event, SSLDomain, Transport, TransportException
from proton.handlers import MessagingHandler
from proton.reactor import Container

from certs import TestPki
from certs.tls import client_context, peer_common_name, proton_ssl_domain, server_context
from interchange.testing.pki_fixtures import (
    ACTOR,
    OTHER_SERVER,
    SERVER,
    STEP_TIMEOUT,
    files_for,
    plain_client_context,
)

pytestmark = pytest.mark.timeout(60)
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


async def pump(transport: Transport, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
               on_event: Any = None) -> str | None:
    """Shuttle bytes between a socket and a proton transport until either side ends.

    Returns proton's error text when the transport failed (e.g. the TLS handshake was refused).
    """
    while True:
        if on_event is not None:
            on_event()
        pending = transport.pending()
        if pending < 0:  # proton closed its output: report why
            return str(transport.condition) if transport.condition else None
        if pending:
            writer.write(transport.peek(pending))
            transport.pop(pending)
            await writer.drain()
        data = await asyncio.wait_for(reader.read(65536), STEP_TIMEOUT)
        if not data:
            transport.close_tail()
            return str(transport.condition) if transport.condition else None
        try:
            transport.push(data)
        except TransportException as exc:
            pending = transport.pending()
            if pending > 0:  # the TLS alert
                writer.write(transport.peek(pending))
                await writer.drain()
            return str(exc)


@dataclass
class AmqpListenerLog:
    tls: list[tuple[str, str]] = field(default_factory=list)  # (peer CN, version)
    errors: list[BaseException] = field(default_factory=list)
    amqp_opened: bool = False


@contextlib.asynccontextmanager
async def amqp_over_python_tls(context: ssl.SSLContext):  # type: ignore[no-untyped-def]
    """An AMQP listener: Python ssl (``context``) + a proton server engine behind it."""
    log = AmqpListenerLog()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await writer.start_tls(context, ssl_handshake_timeout=STEP_TIMEOUT)
        except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
            log.errors.append(exc)
            writer.transport.abort()
            return
        ssl_object = writer.get_extra_info("ssl_object")
        log.tls.append((peer_common_name(ssl_object), ssl_object.version()))
        connection, transport, collector = Connection(), Transport(Transport.SERVER), Collector()
        transport.bind(connection)
        connection.collect(collector)

        def on_event() -> None:
            while (event := collector.peek()) is not None:
                if event.type == Event.CONNECTION_REMOTE_OPEN:
                    connection.open()
                    log.amqp_opened = True
                elif event.type == Event.CONNECTION_REMOTE_CLOSE:
                    connection.close()
                collector.pop()

        with contextlib.suppress(ssl.SSLError, OSError, asyncio.TimeoutError):
            await pump(transport, reader, writer, on_event)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], log
    finally:
        server.close()
        await server.wait_closed()


class ProbeClient(MessagingHandler):
    """Opens one AMQP connection over TLS, records what it saw, closes, stops the container."""

    def __init__(self, url: str, domain: SSLDomain, sni: str) -> None:
        super().__init__()
        self.url, self.domain, self.sni = url, domain, sni
        self.opened = False
        self.protocol: str | None = None
        self.server_cn: str | None = None
        self.error: str | None = None
        self.timed_out = False

    def on_start(self, event: Any) -> None:
        event.container.connect(self.url, ssl_domain=self.domain, sni=self.sni, reconnect=False, sasl_enabled=False)
        self._timer = event.container.schedule(STEP_TIMEOUT * 2, self)

    def on_timer_task(self, event: Any) -> None:
        self.timed_out = True
        event.container.stop()

    def on_connection_opened(self, event: Any) -> None:
        self.opened = True
        tls = event.connection._overrides.ssl  # the SSL layer proton's connector created
        self.protocol, self.server_cn = tls.protocol_name(), tls.get_cert_common_name()
        event.connection.close()

    def on_transport_error(self, event: Any) -> None:
        self.error = str(event.transport.condition)

    def on_transport_closed(self, event: Any) -> None:
        self._timer.cancel()
        event.container.stop()


async def run_proton_client(port: int, domain: SSLDomain, sni: str = SERVER) -> ProbeClient:
    client = ProbeClient(f"amqps://127.0.0.1:{port}", domain, sni)
    await asyncio.to_thread(Container(client).run)
    return client


async def test_proton_client_completes_tls13_with_the_node_listener(pki_main: TestPki) -> None:
    domain = proton_ssl_domain(files_for(pki_main, ACTOR), SSLDomain.MODE_CLIENT)
    async with amqp_over_python_tls(server_context(files_for(pki_main, SERVER))) as (port, log):
        client = await run_proton_client(port, domain)
    assert not client.timed_out and client.error is None
    assert client.opened and log.amqp_opened
    assert client.protocol == "TLSv1.3" and client.server_cn == SERVER
    assert log.tls == [(ACTOR, "TLSv1.3")]  # the listener trusts the root only: the chain was sent


async def test_proton_client_refuses_a_tls12_only_server(pki_main: TestPki) -> None:
    listener = server_context(files_for(pki_main, SERVER))
    listener.minimum_version = ssl.TLSVersion.TLSv1_2
    listener.maximum_version = ssl.TLSVersion.TLSv1_2
    domain = proton_ssl_domain(files_for(pki_main, ACTOR), SSLDomain.MODE_CLIENT)
    async with amqp_over_python_tls(listener) as (port, log):
        client = await run_proton_client(port, domain)
    assert not client.timed_out
    assert not client.opened and client.error is not None
    assert log.tls == [] and "unsupported protocol" in " ".join(map(str, log.errors))


async def test_proton_client_verifies_the_server_name(pki_main: TestPki) -> None:
    domain = proton_ssl_domain(files_for(pki_main, ACTOR), SSLDomain.MODE_CLIENT)
    async with amqp_over_python_tls(server_context(files_for(pki_main, OTHER_SERVER))) as (port, log):
        client = await run_proton_client(port, domain, sni=SERVER)
    assert not client.timed_out and not client.opened
    assert client.error is not None and log.tls == []


@contextlib.asynccontextmanager
async def proton_tls_listener(domain: SSLDomain):  # type: ignore[no-untyped-def]
    """A listener whose TLS is proton's own (MODE_SERVER domain), driven by hand over a socket."""
    results: list[tuple[str | None, str | None, str | None]] = []  # (version, peer CN, error)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection, transport = Connection(), Transport(Transport.SERVER)
        tls = SSL(transport, domain)
        transport.bind(connection)
        error: str | None = "socket closed"
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            error = await pump(transport, reader, writer)
        results.append((tls.protocol_name(), tls.get_cert_common_name(), error))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], results
    finally:
        server.close()
        await server.wait_closed()


async def _python_client_to_proton(port: int, context: ssl.SSLContext) -> tuple[str | None, bytes, BaseException | None]:
    """Handshake, send the AMQP header, read proton's reply header."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=SERVER), STEP_TIMEOUT
        )
    except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
        return None, b"", exc
    version = writer.get_extra_info("ssl_object").version()
    try:
        writer.write(AMQP_HEADER)
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(len(AMQP_HEADER)), STEP_TIMEOUT)
        return version, reply, None
    except (ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
        return version, b"", exc
    finally:
        writer.close()


async def test_proton_server_domain_requires_tls13_and_a_client_certificate(pki_main: TestPki) -> None:
    domain = proton_ssl_domain(files_for(pki_main, SERVER), SSLDomain.MODE_SERVER)
    async with proton_tls_listener(domain) as (port, results):
        version, reply, error = await _python_client_to_proton(port, client_context(files_for(pki_main, ACTOR)))
        assert error is None and version == "TLSv1.3" and reply == AMQP_HEADER

        _, reply, error = await _python_client_to_proton(port, plain_client_context(pki_main.trust_bundle))
        assert reply == b""  # no client certificate: proton ends the connection

        old = client_context(files_for(pki_main, ACTOR))
        old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_2
        version, reply, error = await _python_client_to_proton(port, old)
        assert version is None and error is not None  # TLS 1.2 offered only: no handshake

        async def three_done() -> None:
            while len(results) < 3:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(three_done(), STEP_TIMEOUT)
    assert results[0][:2] == ("TLSv1.3", ACTOR)
    assert "peer did not return a certificate" in str(results[1][2])
    assert "unsupported protocol" in str(results[2][2])
