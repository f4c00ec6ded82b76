"""Hostile input on the Basic Interface, over real TLS 1.3 sockets: raw AMQP frames a
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

from certs import TestPki
from certs.tls import TlsFiles, client_context
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.link_selectors import MAX_LENGTH, MAX_NODES
from interchange.broker.sasl import AMQP_HEADER
from interchange.testing.broker_harness import (
    BROKER_CN,
    BrokerUnderTest,
    complete_records,
    denm,
    selector_option,
    start_broker,
    tls_exchange,
    wait_for_records,
)

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
    data, closed = tls_exchange(port, context, AMQP_HEADER + OPEN + hostile + BEGIN)
    if not closed:
        pytest.fail(f"the broker did not close the connection (hang); got {data!r}")
    return data


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


# ------------------------------------------------------------------ aborted transfers
def test_aborted_transfer_is_discarded_not_rejected(broker: BrokerUnderTest) -> None:
    """AMQP 1.0 2.7.5 ``aborted``: the message is discarded (as proton's own receivers do), not
    handed to the router as an empty message and logged as an IP_016 rejection."""
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    delivery = sender.link.delivery("aborted-1")
    sender.link.send(denm().encode()[:20])  # the first bytes go out in a transfer with more=true ...
    publisher.wait(lambda: delivery.link.session.outgoing_bytes == 0, timeout=5, msg="first bytes not sent")
    delivery.abort()  # ... then one with aborted=true
    sender.send(denm())  # the link still works: accepted
    wait_for_records(broker, lambda r: r["event"] == "received_message", "the accepted message was not logged")
    records = complete_records(broker.log_path)  # logged in order: a rejection of the aborted one would be here
    assert not [r for r in records if r["event"] == "rejected_message"]
    publisher.close()


# ------------------------------------------------------------------ max-frame-size below 512
def _answer_to_open(port: int, context: ssl.SSLContext, open_frame: bytes, wanted: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=BROKER_CN) as tls:
            tls.sendall(AMQP_HEADER + open_frame)
            data = b""
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and wanted not in data:
                try:
                    chunk = tls.recv(4096)
                except socket.timeout:
                    break
                if not chunk:
                    break
                data += chunk
            return data


@pytest.mark.parametrize("max_frame_size", [0, 100, 511])
def test_max_frame_size_below_512_refused_and_logged(broker: BrokerUnderTest, pki: TestPki, max_frame_size: int) -> None:
    """AMQP 1.0 2.7.1: max-frame-size is at least 512; proton would raise it to 512 silently."""
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-2"))
    open_frame = frame(b"\x00\x53\x10" + list8(str8(b"small-frames"), b"\x40", b"\x70" + max_frame_size.to_bytes(4, "big")))
    answer = _answer_to_open(broker.port, context, open_frame, b"amqp:invalid-field")
    assert b"amqp:invalid-field" in answer and f"max-frame-size {max_frame_size} ".encode() in answer
    wait_for_records(broker, lambda r: r["event"] == "transport_error"
                     and f"max-frame-size {max_frame_size} " in r["details"].get("description", ""),
                     "refused max-frame-size not logged")


def test_max_frame_size_512_accepted(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-2"))
    open_frame = frame(b"\x00\x53\x10" + list8(str8(b"frames-512"), b"\x40", b"\x70\x00\x00\x02\x00"))
    answer = _answer_to_open(broker.port, context, open_frame, b"\x00\x53\x10")
    assert b"\x00\x53\x10" in answer and b"amqp:invalid-field" not in answer


def test_open_frame_check_fed_byte_by_byte() -> None:
    from interchange.broker.open_frame import OpenFrameCheck

    data = AMQP_HEADER + frame(b"\x00\x53\x10" + list8(str8(b"c"), b"\x40", b"\x70\x00\x00\x00\x64"))
    check = OpenFrameCheck()
    found = [check.feed(data[i:i + 1]) for i in range(len(data))]
    assert found[:-1] == [None] * (len(data) - 1) and found[-1] == 100 and check.done
    assert check.feed(data) is None  # decided once
    plain = OpenFrameCheck()
    assert plain.feed(AMQP_HEADER + OPEN) is None and plain.done  # no max-frame-size: proton's default


# ------------------------------------------------------------------ text that is not UTF-8
def test_container_id_not_utf8_closed_with_decode_error(broker: BrokerUnderTest, pki: TestPki) -> None:
    """Over TLS: the open is answered, then closed with ``amqp:decode-error`` naming the field, and logged
    (the engine's other text fields: tests/unit/test_engine_text.py)."""
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-2"))
    data, closed = tls_exchange(broker.port, context, AMQP_HEADER + frame(b"\x00\x53\x10" + list8(str8(b"c\xff"))))
    assert closed, "the connection was not closed"
    assert b"amqp:decode-error" in data and b"open: container-id is not valid UTF-8" in data
    wait_for_records(broker, lambda r: r.get("event") == "transport_error"
                     and r["details"].get("condition") == "amqp:decode-error", "decode error not logged")


def test_target_address_not_utf8_refuses_the_link(broker: BrokerUnderTest, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1"))
    target = b"\x00\x53\x29" + list8(str8(b"in\xff"))
    attach = frame(b"\x00\x53\x12" + list8(str8(b"l"), b"\x52\x00", b"\x42", b"\x40", b"\x40", b"\x40", target))
    data, _ = tls_exchange(broker.port, context, AMQP_HEADER + OPEN + BEGIN + attach, timeout=2.0)
    assert b"amqp:decode-error" in data and b"attach: target address is not valid UTF-8" in data


def test_engine_fault_closes_with_internal_error_not_a_traceback(broker: BrokerUnderTest, pki: TestPki,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: a defect the peer's bytes reach (the router raises) closes that connection with
    ``amqp:internal-error`` and an ``engine_error`` record naming where, and the broker goes on."""
    def broken(identity: str, address: str | None) -> None:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(broker.node.core, "attach_publisher", broken)
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1"))
    target = b"\x00\x53\x29" + list8(str8(b"in"))
    attach = frame(b"\x00\x53\x12" + list8(str8(b"l"), b"\x52\x00", b"\x42", b"\x40", b"\x40", b"\x40", target))
    data, closed = tls_exchange(broker.port, context, AMQP_HEADER + OPEN + BEGIN + attach)
    assert closed and b"amqp:internal-error" in data
    (record,) = wait_for_records(broker, lambda r: r.get("event") == "engine_error", "engine fault not logged")
    assert record["level"] == "error" and record["details"]["error"] == "RuntimeError: injected fault"
    monkeypatch.undo()
    consumer = broker.connect("actor-2")  # others are served as before
    consumer.create_receiver("all", credit=1)
    consumer.close()
