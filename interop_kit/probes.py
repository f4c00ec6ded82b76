"""TLS probes: one connection each, blocking sockets with timeouts, run in a worker thread.

A probe opens TCP, does the TLS handshake and then sends the interface's first bytes (the AMQP
SASL protocol header on the BI, an HTTP request on the II) and reads the answer. In TLS 1.3 the
server judges the client certificate *after* the client has finished its handshake, so a refused
client certificate shows up as an alert (or a closed connection) on that first read, not during
``do_handshake``: a probe is *accepted* only when application data came back.
"""
from __future__ import annotations

import asyncio
import socket
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

PROBE_TIMEOUT_S = 8.0
AMQP_SASL_HEADER = b"AMQP\x03\x01\x00\x00"


def http_probe_request(host: str, path: str = "/") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()


@dataclass(frozen=True)
class Endpoint:
    """Where to connect (``host``/``port``) and the name the certificate must carry (``server_name``)."""

    host: str
    port: int
    server_name: str
    first_bytes: bytes


@dataclass(frozen=True)
class ProbeResult:
    """``accepted``: handshake done and the server answered; else ``error`` says how it refused."""

    handshake: bool
    accepted: bool
    error: str | None
    version: str | None
    peer_der: bytes | None
    answer: bytes = b""

    def leaf(self) -> x509.Certificate | None:
        return x509.load_der_x509_certificate(self.peer_der) if self.peer_der else None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.strerror or str(exc)
    return f"{type(exc).__name__}: {exc}"


def _probe(endpoint: Endpoint, context: ssl.SSLContext, timeout_s: float) -> ProbeResult:
    with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s) as raw:
        with context.wrap_socket(raw, server_hostname=endpoint.server_name, do_handshake_on_connect=False) as tls:
            try:
                tls.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                return ProbeResult(False, False, _describe(exc), None, None)
            version, peer = tls.version(), tls.getpeercert(binary_form=True)
            try:
                tls.sendall(endpoint.first_bytes)
                answer = tls.recv(4096)
            except (ssl.SSLError, OSError) as exc:
                return ProbeResult(True, False, _describe(exc), version, peer)
            if not answer:
                return ProbeResult(True, False, "the server closed the connection without answering", version, peer)
            return ProbeResult(True, True, None, version, peer, answer)


async def probe(endpoint: Endpoint, context: ssl.SSLContext, timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """One TLS connection to ``endpoint`` with ``context`` (in a thread; socket timeouts bound it)."""
    return await asyncio.to_thread(_probe, endpoint, context, timeout_s)


def roots_only(bundle: Path, directory: Path) -> tuple[Path, int]:
    """A copy of ``bundle`` with only its self-signed (root) certificates, and how many others it held.

    Verifying the server against roots only proves it sent its intermediate (IP_057).
    """
    certificates = x509.load_pem_x509_certificates(bundle.read_bytes())
    roots = [c for c in certificates if c.subject == c.issuer]
    if not roots:
        raise ValueError(f"the trust bundle {bundle} holds no self-signed root certificate")
    out = Path(tempfile.mkstemp(prefix="roots-", suffix=".pem", dir=directory)[1])
    out.write_bytes(b"".join(c.public_bytes(Encoding.PEM) for c in roots))
    return out, len(certificates) - len(roots)


def client_without_certificate(trust_bundle: Path) -> ssl.SSLContext:
    """TLS 1.3, server verified, no client certificate (the target must refuse it, IP_050)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_3
    context.load_verify_locations(cafile=trust_bundle)
    return context


def client_tls12(chain: Path, key: Path, trust_bundle: Path) -> ssl.SSLContext:
    """At most TLS 1.2, with a valid client certificate (the target must refuse it, IP_054)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=chain, keyfile=key)
    context.load_verify_locations(cafile=trust_bundle)
    return context

