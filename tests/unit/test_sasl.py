"""SASL layer (sans-I/O) driven by proton's own client-side SASL implementation."""
from __future__ import annotations

import pytest
from proton import SASL, Connection, Transport

from interchange.broker.sasl import AMQP_HEADER, SASL_HEADER, SaslServer, mechanisms_frame, outcome_frame


def _client(mechs: str) -> tuple[Transport, SASL, Connection]:
    transport = Transport()
    sasl = transport.sasl()
    sasl.allowed_mechs(mechs)
    conn = Connection()
    conn.container = "client-1"
    transport.bind(conn)
    conn.open()
    return transport, sasl, conn


def _pump(transport: Transport, server: SaslServer, rounds: int = 10):
    """Shuttle bytes between proton's client transport and our server until SASL ends."""
    step = None
    for _ in range(rounds):
        pending = transport.pending()
        data = transport.peek(pending) if pending > 0 else b""
        if pending > 0:
            transport.pop(pending)
        if data:
            step = server.receive(data)
            if step.send:
                transport.push(step.send)
            if server.finished:
                return step
    return step


@pytest.mark.parametrize("mech", ["EXTERNAL", "ANONYMOUS"])
def test_proton_client_completes_sasl(mech: str) -> None:
    transport, sasl, _ = _client(mech)
    server = SaslServer()
    step = _pump(transport, server)
    assert step is not None and step.done and step.error is None
    assert step.mechanism == mech
    assert sasl.outcome == SASL.OK
    # After the outcome proton's client sends the AMQP header and its open frame.
    pending = transport.pending()
    after = step.amqp_bytes + bytes(transport.peek(pending))
    assert after.startswith(AMQP_HEADER)


def _init_frame(mechanism: bytes) -> bytes:
    fields = b"\xa3" + bytes([len(mechanism)]) + mechanism
    body = b"\x00\x53\x41\xc0" + bytes([len(fields) + 1, 1]) + fields
    return (8 + len(body)).to_bytes(4, "big") + b"\x02\x01\x00\x00" + body


def test_unoffered_mechanism_gets_auth_outcome() -> None:
    server = SaslServer(mechanisms=("EXTERNAL",))
    server.receive(SASL_HEADER)
    step = server.receive(_init_frame(b"PLAIN"))
    assert step.error == "mechanism 'PLAIN' not offered"
    assert step.send == outcome_frame(1) and not step.done


def test_init_with_pipelined_amqp_bytes() -> None:
    server = SaslServer()
    server.receive(SASL_HEADER)
    step = server.receive(_init_frame(b"EXTERNAL") + AMQP_HEADER)
    assert step.done and step.mechanism == "EXTERNAL" and step.amqp_bytes == AMQP_HEADER


def test_plain_amqp_header_skips_sasl_when_allowed() -> None:
    server = SaslServer()
    step = server.receive(AMQP_HEADER + b"\x00\x00\x00\x08")
    assert step.done and step.amqp_bytes == AMQP_HEADER + b"\x00\x00\x00\x08" and step.mechanism is None


def test_plain_amqp_header_refused_when_sasl_required() -> None:
    step = SaslServer(allow_no_sasl=False).receive(AMQP_HEADER)
    assert step.error and step.send == SASL_HEADER


@pytest.mark.parametrize("garbage", [b"GET / HTTP/1.1\r\n", b"AMQP\x02\x01\x00\x00", b"\x16\x03\x01\x02\x00\x01"])
def test_foreign_protocol_refused_with_our_header(garbage: bytes) -> None:
    step = SaslServer().receive(garbage)
    assert step.error is not None
    assert step.send.startswith(SASL_HEADER)


def test_byte_by_byte_feeding() -> None:
    transport, sasl, _ = _client("EXTERNAL")
    server = SaslServer()
    steps = []
    for _ in range(10):
        pending = transport.pending()
        if pending <= 0 or server.finished:
            break
        data = bytes(transport.peek(pending))
        transport.pop(pending)
        for i in range(len(data)):
            steps.append(server.receive(data[i : i + 1]))
            if steps[-1].send:
                transport.push(steps[-1].send)
            if server.finished:
                break
    assert steps[-1].done and not any(s.error for s in steps)
    assert sasl.outcome == SASL.OK


@pytest.mark.parametrize(
    "frame",
    [
        b"\xff\xff\xff\xff\x02\x01\x00\x00",  # absurd size
        b"\x00\x00\x00\x10\x02\x00\x00\x00" + b"\x00" * 8,  # AMQP frame type in SASL phase
        b"\x00\x00\x00\x0c\x02\x01\x00\x00\x00\x53\x44\x45",  # an outcome, not an init
        b"\x00\x00\x00\x0d\x02\x01\x00\x00\x00\x53\x41\xc0\x01",  # truncated init
    ],
)
def test_malformed_frames_fail_cleanly(frame: bytes) -> None:
    server = SaslServer()
    first = server.receive(SASL_HEADER)
    assert first.send == SASL_HEADER + mechanisms_frame(("EXTERNAL", "ANONYMOUS"))
    step = server.receive(frame)
    assert step.error is not None and not step.done


def test_outcome_frame_encoding() -> None:
    assert outcome_frame(0) == b"\x00\x00\x00\x10\x02\x01\x00\x00\x00\x53\x44\xc0\x03\x01\x50\x00"


@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_client_and_server_agree(chunk: int) -> None:
    from interchange.broker.sasl import SaslClient

    client, server = SaslClient("EXTERNAL"), SaslServer()
    to_server = client.start()
    server_step = None
    for i in range(0, len(to_server), chunk):
        server_step = server.receive(to_server[i : i + chunk])
    assert server_step is not None and server_step.done and server_step.mechanism == "EXTERNAL"
    to_client = SASL_HEADER + mechanisms_frame(("EXTERNAL", "ANONYMOUS")) + outcome_frame(0) + AMQP_HEADER
    after = b""
    for i in range(0, len(to_client), chunk):
        piece = to_client[i : i + chunk]
        if client.finished:
            after += piece  # the I/O layer hands these to the AMQP engine
            continue
        step = client.receive(piece)
        assert step.error is None
        if step.done:
            after += step.amqp_bytes
    assert client.finished and after == AMQP_HEADER


def test_client_refused_outcome() -> None:
    from interchange.broker.sasl import SaslClient

    client = SaslClient("EXTERNAL")
    client.start()
    step = client.receive(SASL_HEADER + mechanisms_frame(("PLAIN",)) + outcome_frame(1))
    assert step.error is not None and "refused" in step.error


def test_client_rejects_non_sasl_server() -> None:
    from interchange.broker.sasl import SaslClient

    step = SaslClient().receive(AMQP_HEADER)
    assert step.error is not None and "protocol header" in step.error
