"""interchange.broker.tls_stream: a server-side TLS session fed bytes in memory (no sockets)."""
from __future__ import annotations

import ssl
import threading

from certs import TestPki
from certs.tls import client_context, peer_common_name, server_context
from interchange.broker.tls_stream import TlsSession, TlsStep
from interchange.testing.memory_transport import MemoryTlsClient
from interchange.testing.pki_fixtures import (
    ACTOR,
    REVOKED_ACTOR,
    SERVER,
    files_for,
    plain_client_context,
)


def tls_client(context: ssl.SSLContext) -> MemoryTlsClient:
    return MemoryTlsClient(context, SERVER)


def handshake(client: MemoryTlsClient, server: TlsSession) -> TlsStep:
    """Run the handshake to its end; returns the server's last step."""
    to_server = client.step()
    last = TlsStep()
    for _ in range(10):
        last = server.receive(to_server)
        if last.established or last.error:
            if last.send:
                client.step(last.send)
            return last
        to_server = client.step(last.send)
    raise AssertionError("the handshake did not finish")


def test_handshake_and_data_both_ways(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)))
    client = tls_client(client_context(files_for(pki_main, ACTOR)))
    last = handshake(client, server)
    assert last.established and last.error is None and server.established
    assert peer_common_name(server.ssl_object) == ACTOR
    assert server.ssl_object.version() == "TLSv1.3"
    # client -> server: several records read in one call
    client.obj.write(b"a" * 40000)
    client.obj.write(b"tail")
    step = server.receive(client.outgoing.read())
    assert step.data == b"a" * 40000 + b"tail" and not step.closed and step.error is None
    # server -> client
    client.incoming.write(server.send(b"hello" * 10000))
    assert client.read() == b"hello" * 10000
    assert server.send(b"") == b""
    # close_notify both ways
    client.incoming.write(server.close())
    try:
        client.obj.unwrap()
    except ssl.SSLWantReadError:
        pass
    assert client.outgoing.pending  # the client's close_notify answer
    assert server.receive(client.outgoing.read()).closed


def test_data_in_the_clients_last_flight_is_delivered(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)))
    client = tls_client(client_context(files_for(pki_main, ACTOR)))
    flight = server.receive(client.step())
    finished = client.step(flight.send)
    assert client.obj.version() == "TLSv1.3"  # the client is done after its Finished
    client.obj.write(b"AMQP\x03\x01\x00\x00")
    step = server.receive(finished + client.outgoing.read())
    assert step.established and step.data == b"AMQP\x03\x01\x00\x00"


def test_client_without_certificate_gets_the_alert(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)))
    client = tls_client(plain_client_context(pki_main.trust_bundle))
    last = handshake(client, server)
    assert not last.established and last.error == "no client certificate"
    assert last.send, "the alert must be sent"
    try:
        client.read()
    except ssl.SSLError as exc:
        assert "certificate required" in str(exc)
    else:
        raise AssertionError("the client did not see the alert")
    assert server.close() == b"" and server.receive(b"more").error is None


def test_revoked_foreign_and_old_protocol_reasons(pki_main: TestPki, pki_other: TestPki) -> None:
    cases = [
        (client_context(files_for(pki_main, REVOKED_ACTOR)), "client certificate rejected: certificate revoked"),
        (client_context(files_for(pki_other, ACTOR)), "client certificate rejected: unable to get local issuer"),
    ]
    tls12 = client_context(files_for(pki_main, ACTOR))
    tls12.minimum_version = tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    cases.append((tls12, "protocol version not supported"))
    for context, reason in cases:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        server = TlsSession(server_context(files_for(pki_main, SERVER)))
        client = tls_client(context)
        last = handshake(client, server)
        assert last.error is not None and last.error.startswith(reason), last.error
        assert last.send


def test_garbage_is_refused_with_a_reason(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)))
    step = server.receive(b"GET / HTTP/1.1\r\n\r\n")
    assert step.error is not None and "HTTP" in step.error


def in_parts(server: TlsSession, data: bytes) -> TlsStep:
    """A handshake step as the worker thread runs it: fed here, the OpenSSL call on another thread,
    its outcome made a step here."""
    server.feed(data)
    outcome: list[ssl.SSLError | None] = []
    thread = threading.Thread(target=lambda: outcome.append(server.handshake()))
    thread.start()
    thread.join(5)
    return server.handshook(outcome[0])


def test_a_handshake_step_in_parts_is_the_same_as_receive(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)))
    client = tls_client(client_context(files_for(pki_main, ACTOR)))
    flight = in_parts(server, client.step())
    assert flight.send and not flight.established and not server.established  # ServerHello ... Finished
    finished = client.step(flight.send)
    client.obj.write(b"AMQP\x03\x01\x00\x00")
    step = in_parts(server, finished + client.outgoing.read())
    assert step.established and step.error is None and step.data == b"AMQP\x03\x01\x00\x00"
    assert server.handshake() is None and server.handshook(None) == TlsStep()  # nothing left to do


def test_a_refused_handshake_in_parts_sends_its_alert(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)))
    client = tls_client(plain_client_context(pki_main.trust_bundle))
    flight = in_parts(server, client.step())
    last = in_parts(server, client.step(flight.send))
    assert not last.established and last.error == "no client certificate" and last.send  # the alert
    assert server.failed and server.handshake() is None and in_parts(server, b"more") == TlsStep()


def test_a_session_from_a_context_source_asks_it_once_when_made(pki_main: TestPki) -> None:
    """The node passes ReloadingTls.current: the session is made from the context current at accept, on
    the loop's thread; nothing inside the handshake (on the worker) asks again."""
    contexts = [server_context(files_for(pki_main, SERVER))]
    asked: list[int] = []

    def current() -> ssl.SSLContext:
        asked.append(threading.get_ident())
        return contexts[-1]

    server = TlsSession(current)
    assert asked == [threading.get_ident()] and server.ssl_object.context is contexts[0]
    contexts.append(server_context(files_for(pki_main, SERVER)))  # a reload: for new sessions only
    last = handshake(tls_client(client_context(files_for(pki_main, ACTOR))), server)
    assert last.established and len(asked) == 1 and server.ssl_object.context is contexts[0]
    assert TlsSession(current).ssl_object.context is contexts[1]
