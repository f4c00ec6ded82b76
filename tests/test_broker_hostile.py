"""Hostile input on the Basic Interface (issue 10), over real TLS 1.3 sockets: raw AMQP frames a
client library would never send, and selectors too large to compile on the shared event loop."""
from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterator

import pytest
from proton import Terminus
from proton.utils import LinkDetached

from broker_harness import BROKER_CN, BrokerUnderTest, selector_option, start_broker, wait_for_records
from certs import TestPki
from certs.tls import TlsFiles, client_context
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.link_selectors import MAX_LENGTH, MAX_NODES
from interchange.broker.sasl import AMQP_HEADER

TARGETS = [TargetSpec(address="in", publishers=frozenset({"actor-1"}))]
SOURCES = [SourceSpec(address="all", consumers=frozenset({"actor-2"}))]


@pytest.fixture(scope="module")
def broker(pki: TestPki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerUnderTest]:
    b = start_broker(pki, tmp_path_factory.mktemp("hostile"), TARGETS, SOURCES)
    try:
        yield b
    finally:
        b.stop()


# ------------------------------------------------------------------ raw AMQP 1.0 frames
def frame(body: bytes, channel: int = 0) -> bytes:
    """An AMQP frame (2.3.1): size, doff 2, type 0, channel, body."""
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def str8(value: bytes) -> bytes:
    return b"\xa1" + bytes([len(value)]) + value


def list8(*items: bytes) -> bytes:
    body = b"".join(items)
    return b"\xc0" + bytes([len(body) + 1, len(items)]) + body


OPEN = frame(b"\x00\x53\x10" + list8(str8(b"hostile-probe")))
BEGIN = frame(b"\x00\x53\x11" + list8(b"\x40", b"\x52\x00", b"\x70\x00\x00\x10\x00", b"\x70\x00\x00\x10\x00"))


def exchange_after_open(port: int, context: ssl.SSLContext, hostile: bytes) -> bytes:
    """Open a connection, send ``hostile`` then a valid begin; all bytes until the broker closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=BROKER_CN) as tls:
            tls.sendall(AMQP_HEADER + OPEN)
            tls.sendall(hostile + BEGIN)
            data = b""
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    chunk = tls.recv(4096)
                except (ssl.SSLError, OSError):
                    break
                if not chunk:
                    return data  # closed by the broker
                data += chunk
            pytest.fail(f"the broker did not close the connection (hang); got {data!r}")


@pytest.mark.parametrize("hostile", [
    frame(b"\x00\x53\x19\x45"),  # unknown performative code 0x19
    frame(b"\x00\x80" + (0x7F).to_bytes(8, "big") + b"\x45"),  # unknown code as ulong (0x80 form)
    frame(b"\x00\xa3\x03foo\x45"),  # descriptor a symbol, not a ulong
], ids=["unknown-code", "unknown-ulong", "symbol-descriptor"])
def test_undispatchable_frame_after_open_closes_with_framing_error(broker: BrokerUnderTest, pki: TestPki,
                                                                   hostile: bytes) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-2"))
    answer = exchange_after_open(broker.port, context, hostile)
    assert answer.startswith(AMQP_HEADER)
    assert b"amqp:connection:framing-error" in answer  # the close frame's error, then the socket closes
    wait_for_records(broker, lambda r: r.get("event") == "transport_error"
                     and r["details"].get("condition") == "amqp:connection:framing-error", "framing error not logged")


# ------------------------------------------------------------------ link selectors
def _refusal(broker: BrokerUnderTest, selector: str) -> tuple[str, str, float]:
    consumer = broker.connect("actor-2")
    try:
        started = time.monotonic()
        with pytest.raises(LinkDetached) as excinfo:
            consumer.create_receiver("all", credit=1, options=selector_option(selector))
        elapsed = time.monotonic() - started
        link = excinfo.value.link
        assert link.remote_source.type == Terminus.UNSPECIFIED
        return link.remote_condition.name, link.remote_condition.description, elapsed
    finally:
        consumer.close()


def test_long_selector_refused_without_compiling(broker: BrokerUnderTest) -> None:
    # The 60 kB selector of the probe: 1.4-2 s of CPU per attach before the bound.
    selector = " OR ".join(f"(causeCode = {i} AND subCauseCode > {i} AND messageType = 'T{i}')" for i in range(900))
    assert len(selector) > 60_000
    name, description, elapsed = _refusal(broker, selector)
    assert name == "amqp:invalid-field"
    assert f"at most {MAX_LENGTH}" in description
    assert elapsed < 1.0  # refused before parsing (generous: a shared 2-core machine)


def test_selector_with_too_many_nodes_refused(broker: BrokerUnderTest) -> None:
    selector = " OR ".join(f"c = {i}" for i in range(MAX_NODES // 3 + 10))  # 3 nodes per equality
    assert len(selector) <= MAX_LENGTH
    name, description, _ = _refusal(broker, selector)
    assert name == "amqp:invalid-field"
    assert f"more than {MAX_NODES} expression nodes" in description


def test_same_selector_compiled_once(broker: BrokerUnderTest) -> None:
    selector = " OR ".join(f"causeCode = {i}" for i in range(300))
    consumer = broker.connect("actor-2")
    first = consumer.create_receiver("all", credit=1, name="first", options=selector_option(selector))
    compiled = broker.call(lambda: broker.node.core.link_selectors.compile(selector))
    second = consumer.create_receiver("all", credit=1, name="second", options=selector_option(selector))
    assert broker.call(lambda: broker.node.core.link_selectors.compile(selector)) is compiled
    first.close()
    second.close()
    consumer.close()
