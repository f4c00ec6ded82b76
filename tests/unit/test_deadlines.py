"""Every stage of a connection's preamble has a deadline (sans-I/O, no sockets): the TLS handshake,
the protocol header, the SASL exchange and the peer's open on the BI, a request's headers and body
on the II, each measured from the stage's start (a trickling peer is no better than a silent one);
once past, ``on_timer`` fails the stage with the reason, and an undecodable open closes the
connection at once with a close frame. The same against a real node: tests/integration/test_preamble_deadlines.py."""
from __future__ import annotations

import pytest

from certs import TestPki
from certs.tls import client_context, server_context
from ii_api.http.request_clock import RequestClock, timeout_response
from interchange.broker.deadlines import StageTimeouts
from interchange.broker.engine import EngineLimits
from interchange.broker.sasl import AMQP_HEADER, SASL_HEADER, SaslServer
from interchange.broker.tls_stream import HANDSHAKE_TIMEOUT, TlsSession
from interchange.testing.pki_fixtures import ACTOR, SERVER, files_for
from test_engine_text import Engine, frame, frames, open_frame
from test_tls_stream import handshake, tls_client

TIMEOUTS = StageTimeouts(handshake_s=5.0, header_s=3.0, sasl_s=4.0, open_s=6.0)


def test_tls_handshake_deadline_from_the_start_whatever_arrives(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)), now=100.0, handshake_timeout_s=5.0)
    client = tls_client(client_context(files_for(pki_main, ACTOR)))
    assert server.deadline is not None and server.deadline.at == 105.0
    server.receive(client.step())  # the client hello: the deadline does not move
    assert server.deadline is not None and server.deadline.at == 105.0
    assert server.on_timer(104.9) is None
    step = server.on_timer(105.0)
    assert step is not None and step.error == HANDSHAKE_TIMEOUT
    assert server.failed and server.deadline is None


def test_tls_deadline_gone_once_established(pki_main: TestPki) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)), now=0.0, handshake_timeout_s=5.0)
    assert handshake(tls_client(client_context(files_for(pki_main, ACTOR))), server).established
    assert server.deadline is None and server.on_timer(1000.0) is None


def test_header_deadline_counts_from_the_start_not_the_last_byte() -> None:
    server = SaslServer(now=10.0, timeouts=TIMEOUTS)
    for i, byte in enumerate(SASL_HEADER[:7]):  # one byte a second: trickling
        assert server.receive(bytes([byte]), now=10.0 + i).error is None
    assert server.deadline is not None and server.deadline.at == 13.0
    step = server.on_timer(13.0)
    assert step is not None and step.error == "protocol header not complete within 3 s"
    assert server.finished and server.deadline is None


def test_sasl_exchange_deadline_from_the_header() -> None:
    server = SaslServer(now=0.0, timeouts=TIMEOUTS)
    step = server.receive(SASL_HEADER, now=2.0)
    assert step.send.startswith(SASL_HEADER)  # the mechanisms offered
    assert server.deadline is not None and server.deadline.at == 6.0
    server.receive(b"\x00\x00\x00\x20\x02\x01\x00\x00", now=5.0)  # a sasl-init frame header, no body
    assert server.on_timer(5.9) is None
    step = server.on_timer(6.0)
    assert step is not None and step.error == "SASL exchange (sasl-init) not complete within 4 s"


def test_no_deadline_after_sasl() -> None:
    server = SaslServer(now=0.0, timeouts=TIMEOUTS)
    assert server.receive(AMQP_HEADER, now=1.0).done
    assert server.deadline is None and server.on_timer(100.0) is None


def _engine(now: float) -> Engine:
    engine = Engine()
    engine.engine = type(engine.engine)(engine.engine.router, "actor", EngineLimits(open_timeout_s=6.0),
                                        lambda: None, lambda kind, fields: engine.events.append((kind, fields)),
                                        now=now)
    return engine


@pytest.mark.parametrize("sent", [b"", AMQP_HEADER, AMQP_HEADER + open_frame()[:10]],
                         ids=["nothing", "header", "part-of-open"])
def test_open_deadline_closes_with_resource_limit(sent: bytes) -> None:
    engine = _engine(now=50.0)
    engine.feed(sent)
    deadline = engine.engine.deadline
    assert deadline is not None and deadline.at == 56.0
    engine.engine.on_timer(55.0)
    assert not engine.engine.finished
    engine.engine.on_timer(56.0)
    answer = frames(engine.engine.take_output())
    if sent:  # after the peer's protocol header: our open, then the close
        assert [code for code, _ in answer] == [0x10, 0x18]
        assert answer[1][1][0].value[0] == "amqp:resource-limit-exceeded"
        assert answer[1][1][0].value[1].startswith("open not complete within 6 s")
    else:  # no AMQP without the peer's header: the socket just closes
        assert answer == []
    assert engine.engine.finished  # the socket can go: no wait for the peer's close
    assert [kind for kind, _ in engine.events] == ["preamble_timeout"]
    assert engine.events[0][1]["stage"] == "open"


def test_open_deadline_gone_once_the_open_arrived() -> None:
    engine = _engine(now=0.0)
    engine.feed(AMQP_HEADER + open_frame())
    assert engine.engine.deadline is None
    engine.engine.on_timer(1000.0)
    assert not engine.engine.finished


@pytest.mark.parametrize("hostile", [
    frame(b"\x00\x53\x10\xc0\x30\x05\xa1"),  # the open's list longer than the frame
    frame(b"\x00\x53\x10\xa1\x03abc"),  # the open's fields not a list
    frame(b"\xff\xff\xff\xff"),  # no descriptor at all
    b"\x00\x00\x00\x04\x02\x00\x00\x00",  # a frame size below the header's
], ids=["truncated-list", "not-a-list", "garbage", "frame-size"])
def test_undecodable_open_closed_at_once_with_framing_error(hostile: bytes) -> None:
    engine = Engine()
    answer = engine.feed(AMQP_HEADER + hostile)
    assert [code for code, _ in answer] == [0x10, 0x18]
    assert answer[1][1][0].value[0] == "amqp:connection:framing-error"
    assert engine.engine.finished  # a close frame, then the socket: no idle time-out to wait for
    assert [kind for kind, _ in engine.events] == ["transport_error"]


# ------------------------------------------------------------------ the II's requests
def test_request_headers_deadline_from_the_handshake_then_from_the_first_byte() -> None:
    clock = RequestClock(now=0.0, header_s=4.0, body_s=3.0)
    assert clock.deadline is not None and clock.deadline.at == 4.0  # the first request, from the handshake
    clock.received(3.0, b"GET / HTTP/1.1\r\n")  # a header line: the deadline does not move
    timeout = clock.on_timer(4.0)
    assert timeout is not None and timeout.stage == "request headers" and timeout.respond
    assert timeout_response(timeout).startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert timeout_response(timeout).endswith(b'{"error": "request headers not complete within 4 s"}')


def test_idle_connection_timed_out_without_an_answer() -> None:
    timeout = RequestClock(now=0.0, header_s=4.0, body_s=3.0).on_timer(4.0)
    assert timeout is not None and not timeout.respond  # nothing of a request came: just closed


def test_request_body_deadline_from_the_headers() -> None:
    clock = RequestClock(now=0.0, header_s=4.0, body_s=3.0)
    clock.received(1.0, b"POST / HTTP/1.1\r\nContent-Length: 9\r\n")  # the head's end not yet seen
    clock.head_complete(2.0, has_body=True)
    assert clock.deadline is not None and clock.deadline.at == 5.0 and clock.deadline.stage == "request body"
    clock.received(4.0, b"{")  # body bytes
    timeout = clock.on_timer(5.0)
    assert timeout is not None and timeout.stage == "request body" and timeout.respond


HEAD = b"POST /actor-1/subscriptions HTTP/1.1\r\nHost: ii\r\nContent-Length: 1000\r\n\r\n"


@pytest.mark.parametrize("pieces", [[HEAD + b"{"], [HEAD[:-3], HEAD[-3:] + b"{"], [HEAD[:-1], HEAD[-1:]],
                                    [b"\r\n", HEAD]])
def test_request_body_deadline_from_the_heads_arrival_not_its_handlers_start(pieces: list[bytes]) -> None:
    clock = RequestClock(now=0.0, header_s=4.0, body_s=3.0)
    for piece in pieces[:-1]:
        clock.received(0.5, piece)
    clock.received(1.0, pieces[-1])  # the head's last bytes arrive (its end split across reads or not)
    assert clock.deadline is not None and clock.deadline.at == 4.0 and clock.deadline.stage == "request body"
    clock.head_complete(2.5, has_body=True)  # a busy loop starts the handler late: not the client's time
    assert clock.deadline is not None and clock.deadline.at == 4.0
    clock.received(3.5, b" ")  # the body trickles
    timeout = clock.on_timer(4.0)
    assert timeout is not None and timeout.stage == "request body" and timeout.respond


def test_request_waiting_for_its_handler_is_timed_by_the_body_deadline() -> None:
    clock = RequestClock(now=0.0, header_s=4.0, body_s=3.0)
    clock.received(1.0, b"GET / HTTP/1.1\r\nHost: ii\r\n\r\n")
    assert clock.on_timer(3.9) is None  # the header deadline (4.0) no longer applies once the head is in
    clock.head_complete(2.0, has_body=False)
    assert clock.deadline is None and clock.on_timer(100.0) is None  # handled: the handler's time is the node's
    clock.response_done(2.5)
    clock.received(10.0, b"GET / HTTP/1.1\r\n\r\n")
    timeout = clock.on_timer(13.0)  # the next request's handler never started
    assert timeout is not None and timeout.stage == "request body" and timeout.respond


def test_empty_lines_before_a_request_do_not_end_its_head() -> None:
    clock = RequestClock(now=0.0, header_s=4.0, body_s=3.0)
    clock.received(1.0, b"\r\n\r\n")
    clock.received(1.5, b"GET / HTTP/1.1\r\nX-Slow: 1\r\n")
    assert clock.deadline is not None and clock.deadline.stage == "request headers" and clock.deadline.at == 4.0


def test_keep_alive_between_requests_has_no_deadline_until_the_next_byte() -> None:
    clock = RequestClock(now=0.0, header_s=4.0, body_s=3.0)
    clock.head_complete(1.0, has_body=True)
    clock.body_complete(1.5)
    assert clock.deadline is None  # the handler's own time is not the client's
    clock.response_done(2.0)
    assert clock.deadline is None and clock.on_timer(1000.0) is None  # aiohttp's keep-alive time-out applies
    clock.received(100.0, b"GET")
    assert clock.deadline is not None and clock.deadline.at == 104.0


def test_pipelined_request_starts_its_deadline_when_the_previous_is_answered() -> None:
    clock = RequestClock(now=0.0, header_s=4.0, body_s=3.0)
    clock.head_complete(1.0, has_body=False)
    clock.received(1.2, b"GET / HT")  # the next request's bytes while this one is handled
    clock.response_done(2.0)
    assert clock.deadline is not None and clock.deadline.at == 6.0
    timeout = clock.on_timer(6.0)
    assert timeout is not None and timeout.respond
