"""Transport and identity on the broker port: TLS 1.3 only, client certificates checked against the
trust bundle and the CRL, SASL EXTERNAL/ANONYMOUS, plain AMQP only when enabled (IP_019/050/053/054/057)."""
from __future__ import annotations

import dataclasses
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton.utils import BlockingConnection

from certs import TestPki, create_test_pki
from certs.tls import TlsFiles, client_context
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.sasl import AMQP_HEADER, SASL_HEADER
from interchange.testing.broker_harness import (
    BROKER_CN,
    BrokerUnderTest,
    client_connection,
    denm,
    make_pki,
    start_broker,
    wait_for_records,
)

TARGETS = [TargetSpec(address="in", publishers=frozenset({"actor-1"}))]
SOURCES = [SourceSpec(address="out", consumers=frozenset({"actor-2"}))]


@pytest.fixture(scope="module")
def foreign_pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return create_test_pki(tmp_path_factory.mktemp("foreign"), [BROKER_CN], ["actor-1"])


@pytest.fixture(scope="module")
def broker(pki: TestPki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerUnderTest]:
    b = start_broker(pki, tmp_path_factory.mktemp("broker"), TARGETS, SOURCES)
    try:
        yield b
    finally:
        b.stop()


def _tls_exchange(port: int, context: ssl.SSLContext, payload: bytes) -> bytes:
    """Handshake, send ``payload``, return what the broker answers (b"" when it closes on us)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=BROKER_CN) as tls:
            tls.sendall(payload)
            data = b""
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and len(data) < 8:
                chunk = tls.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data


def test_valid_client_gets_sasl_header(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1"))
    assert _tls_exchange(broker.port, context, SASL_HEADER).startswith(SASL_HEADER)


@pytest.mark.parametrize("who", ["actor-expired", "actor-revoked", "foreign"])
def test_bad_client_certificates_refused(broker: BrokerUnderTest, pki: TestPki, foreign_pki: TestPki, who: str) -> None:
    source = foreign_pki if who == "foreign" else pki
    cn = "actor-1" if who == "foreign" else who
    files = TlsFiles.from_pki(source.directory, cn, with_crls=False)
    context = client_context(files, check_hostname=False)
    context.verify_mode = ssl.CERT_NONE  # the client does not care: the broker must refuse it
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        answer = _tls_exchange(broker.port, context, SASL_HEADER)
        if not answer:
            raise ConnectionError("closed by the broker")


def test_client_without_certificate_refused(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(pki.trust_bundle)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        answer = _tls_exchange(broker.port, context, SASL_HEADER)
        if not answer:
            raise ConnectionError("closed by the broker")


def test_tls12_client_refused(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1"))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        _tls_exchange(broker.port, context, SASL_HEADER)


def _refusal(port: int, context: ssl.SSLContext) -> tuple[str, ssl.SSLError]:
    """Connect, handshake, send the AMQP header: the broker must answer with a TLS alert.
    Returns the client's address (as the broker logs it) and the error the client saw."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        host, local_port = raw.getsockname()[:2]
        with pytest.raises(ssl.SSLError) as caught:
            with context.wrap_socket(raw, server_hostname=BROKER_CN) as tls:
                tls.sendall(SASL_HEADER)
                tls.recv(4096)  # TLS 1.3: the client certificate is judged after the client's Finished
    return f"{host}:{local_port}", caught.value


def _refusal_logged(broker: BrokerUnderTest, peer: str) -> str:
    records = wait_for_records(broker, lambda r: r["event"] == "tls_refused" and r["details"]["peer"] == peer,
                               f"no tls_refused record for {peer}")
    assert records[0]["level"] == "warning"
    return records[0]["details"]["reason"]


def test_client_without_certificate_gets_the_alert_and_is_logged(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(pki.trust_bundle)
    peer, error = _refusal(broker.port, context)
    assert "alert certificate required" in str(error).lower()
    assert _refusal_logged(broker, peer) == "no client certificate"


def test_tls12_client_gets_a_protocol_version_alert_and_is_logged(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1"))
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
    peer, error = _refusal(broker.port, context)
    assert "protocol version" in str(error).lower()
    assert "protocol version" in _refusal_logged(broker, peer)


@pytest.mark.parametrize(("who", "alert", "reason"), [
    ("actor-revoked", "certificate revoked", "certificate revoked"),
    ("actor-expired", "certificate expired", "certificate has expired"),
    ("foreign", "unknown ca", "unable to get local issuer certificate"),
])
def test_bad_client_certificates_get_an_alert_and_are_logged(broker: BrokerUnderTest, pki: TestPki,
                                                             foreign_pki: TestPki, who: str, alert: str,
                                                             reason: str) -> None:
    source = foreign_pki if who == "foreign" else pki
    files = TlsFiles.from_pki(source.directory, "actor-1" if who == "foreign" else who, with_crls=False)
    context = client_context(files, check_hostname=False)
    context.verify_mode = ssl.CERT_NONE
    peer, error = _refusal(broker.port, context)
    assert alert in str(error).lower()
    logged = _refusal_logged(broker, peer)
    assert logged.startswith("client certificate rejected") and reason in logged


def test_handshake_timeout_is_logged(broker: BrokerUnderTest, monkeypatch: pytest.MonkeyPatch) -> None:
    server = broker.node.server
    monkeypatch.setattr(server, "limits", dataclasses.replace(server.limits, handshake_timeout_s=0.2))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as raw:
        host, local_port = raw.getsockname()[:2]
        try:
            assert raw.recv(100) == b""  # aborted without a word
        except ConnectionResetError:
            pass
    assert _refusal_logged(broker, f"{host}:{local_port}") == "handshake timeout"


def test_graceful_close_sends_close_notify(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1"))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=BROKER_CN, suppress_ragged_eofs=False) as tls:
            tls.sendall(b"GET / HTTP/1.1\r\n\r\n")  # not AMQP: header, then the broker closes
            data = b""
            while chunk := tls.recv(4096):  # a bare TCP close would raise SSLEOFError here
                data += chunk
            assert data == SASL_HEADER


def test_whole_chain_sent_and_tls13(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1"))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=BROKER_CN) as tls:
            assert tls.version() == "TLSv1.3"
            chain = tls.get_verified_chain() if hasattr(tls, "get_verified_chain") else None
            if chain is not None:  # Python 3.13+; on 3.11 a verified handshake with a root-only bundle proves it
                assert len(chain) == 3


def test_non_amqp_bytes_get_header_and_close(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1"))
    assert _tls_exchange(broker.port, context, b"GET / HTTP/1.1\r\n\r\n") == SASL_HEADER


@pytest.mark.parametrize("mechs", ["EXTERNAL", "ANONYMOUS"])
def test_sasl_mechanisms_identity_is_certificate(broker: BrokerUnderTest, pki: TestPki, mechs: str) -> None:
    conn = client_connection(pki, "actor-1", broker.port, allowed_mechs=mechs)
    conn.create_sender("in").send(denm())  # actor-1 may publish: the identity came from its certificate
    conn.close()


def test_proton_client_without_sasl(broker: BrokerUnderTest, pki: TestPki) -> None:
    conn = client_connection(pki, "actor-1", broker.port, sasl_enabled=False)
    conn.create_sender("in").send(denm())
    conn.close()


def test_many_connections_accepted(broker: BrokerUnderTest, pki: TestPki) -> None:
    """Functional check (the 1,000-at-once figure is measured in benchmarks/bench_broker.py)."""
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-2"))
    sockets = []
    try:
        for _ in range(100):
            raw = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            tls = context.wrap_socket(raw, server_hostname=BROKER_CN)
            tls.sendall(AMQP_HEADER)
            sockets.append(tls)
        answers = [s.recv(8) for s in sockets]
        assert all(a == AMQP_HEADER for a in answers)
        assert broker.call(lambda: len(broker.node.server.connections)) >= 100
    finally:
        for s in sockets:
            s.close()


def test_plain_listener_only_when_enabled(pki: TestPki, tmp_path: Path) -> None:
    b = start_broker(pki, tmp_path, TARGETS, SOURCES, plain_port=0, plain_identity="actor-1")
    try:
        assert b.node.amqp_port is not None
        conn = BlockingConnection(f"amqp://127.0.0.1:{b.node.amqp_port}", timeout=10)
        conn.create_sender("in").send(denm())
        conn.close()
    finally:
        b.stop()
    b2 = start_broker(pki, tmp_path / "second", TARGETS, SOURCES)
    try:
        assert b2.node.amqp_port is None
    finally:
        b2.stop()


def test_a_new_crl_applies_to_the_next_connection(tmp_path: Path) -> None:
    """The listener switches each new handshake to the current context (ReloadingTls): a client
    revoked while the broker runs is refused on its next connection, with the reason logged."""
    made = make_pki(tmp_path / "pki")
    b = start_broker(made, tmp_path / "broker", TARGETS, SOURCES)
    try:
        context = client_context(TlsFiles.from_pki(made.directory, "actor-3"))
        assert _tls_exchange(b.port, context, SASL_HEADER).startswith(SASL_HEADER)
        made.pki.revoke(made.clients["actor-3"].serial)
        peer, error = _refusal(b.port, context)
        assert "certificate revoked" in str(error).lower()
        assert "certificate revoked" in _refusal_logged(b, peer)
    finally:
        b.stop()
