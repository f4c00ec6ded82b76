"""TCPStreaming client and service state machines (sans-I/O): exact action lists, no sockets."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interchange.bridges.tlex.codec import (
    Bye,
    KeepAlive,
    Payload,
    Reconnect,
    StreamDecoder,
    TimestampsRequest,
    TimestampsResponse,
    Token,
    encode,
)
from interchange.bridges.tlex.session import (
    AnswerTimestamps,
    Authenticate,
    ClientStream,
    Close,
    CloseCause,
    Deliver,
    Grant,
    Now,
    Send,
    ServiceStream,
    SessionClosed,
)

T0 = Now(100.0, 1_700_000_000_000)
IDS = frozenset({"NLZH0023", "NLZH0024"})
SPAT = Payload(0x21, 1_700_000_000_000, b"\x00\x04spat", "NLZH0023")


def at(seconds: float) -> Now:
    return Now(T0.mono + seconds, T0.utc_ms + int(seconds * 1000))


def client(mode: str = "broker", keepalive: float = 6.0) -> ClientStream:
    stream = ClientStream("tok-1", mode, IDS, keepalive, T0)  # type: ignore[arg-type]
    assert stream.start(T0) == [Send(b"\x01" + encode(Token("tok-1")))]
    return stream


def test_client_delivers_payloads_in_scope_and_drops_others() -> None:
    stream = client()
    other = Payload(0x21, 1, b"x", "NLZH9999")
    actions = stream.receive(b"\x01" + encode(SPAT) + encode(other) + encode(KeepAlive()), at(0.1))
    assert actions == [Deliver(SPAT)]
    assert stream.counters.payloads_in == 1 and stream.counters.dropped_in == 1


def test_timestamps_request_is_answered_first_and_clock_difference_kept() -> None:
    stream = client()
    data = b"\x01" + encode(SPAT) + encode(TimestampsRequest(T0.utc_ms - 250))
    actions = stream.receive(data, at(0))
    assert actions == [AnswerTimestamps(T0.utc_ms - 250, T0.utc_ms), Deliver(SPAT)]
    assert stream.clock_diff_ms == 250
    assert actions[0].frame(T0.utc_ms + 1) == encode(TimestampsResponse(T0.utc_ms - 250, T0.utc_ms, T0.utc_ms + 1))  # type: ignore[union-attr]


def test_keepalive_sent_after_a_third_of_the_timeout_and_timeout_closes() -> None:
    stream = client(keepalive=6.0)
    assert stream.tick(at(1.9)) == []
    assert stream.next_deadline() == pytest.approx(T0.mono + 2.0)
    assert stream.tick(at(2.0)) == [Send(encode(KeepAlive()))]
    stream.receive(b"\x01", at(3.0))
    assert stream.tick(at(4.0)) == [Send(encode(KeepAlive()))]
    assert stream.tick(at(8.9)) == [Send(encode(KeepAlive()))]
    assert stream.tick(at(9.0)) == [Send(encode(Bye("keep-alive timeout"))),
                                    Close(CloseCause.KEEPALIVE, "keep-alive timeout")]
    assert stream.tick(at(10)) == []


def test_bye_reconnect_and_framing_error_close() -> None:
    stream = client()
    assert stream.receive(b"\x01" + encode(Bye("maintenance")), at(0)) == [Close(CloseCause.BYE, "maintenance")]
    stream = client()
    assert stream.receive(b"\x01" + encode(Reconnect()) + encode(SPAT), at(0)) == [
        Send(encode(Bye("reconnect requested"))), Close(CloseCause.RECONNECT, "reconnect requested")]
    stream = client()
    actions = stream.receive(b"\x01" + encode(SPAT) + b"\xab\xcd\x00\x01\x00", at(0))
    assert actions == [Deliver(SPAT), Close(CloseCause.FRAMING, "frame prefix abcd is not aabb")]  # no Bye
    with pytest.raises(SessionClosed):
        stream.send_payload(SPAT, at(1))


def test_protocol_breaches_close_with_bye() -> None:
    stream = client()
    actions = stream.receive(b"\x01" + encode(Payload(1, 1, b"x")), at(0))
    assert actions == [Send(encode(Bye("payload datagram 0x04 on a broker session"))),
                       Close(CloseCause.PROTOCOL, "payload datagram 0x04 on a broker session")]
    stream = client()
    assert stream.receive(b"\x02", at(0))[-1] == Close(CloseCause.VERSION, "protocol version 0x02 not supported (0x01 only)")
    stream = client()
    assert stream.receive(b"\x01" + encode(Token("x")), at(0))[-1].cause is CloseCause.PROTOCOL  # type: ignore[union-attr]


def test_send_payload_rules() -> None:
    stream = client()
    assert stream.send_payload(SPAT, at(0)) == [Send(encode(SPAT))]
    with pytest.raises(ValueError, match="not part of this session"):
        stream.send_payload(Payload(1, 1, b"x", "NLZH9999"), at(0))
    with pytest.raises(ValueError, match="0x05"):
        stream.send_payload(Payload(1, 1, b"x"), at(0))
    single = client("singleplex")
    assert single.send_payload(Payload(1, 1, b"x"), at(0)) == [Send(encode(Payload(1, 1, b"x")))]
    with pytest.raises(ValueError, match="only receive"):
        client("monitor").send_payload(SPAT, at(0))
    assert stream.close("shutdown", at(1)) == [Send(encode(Bye("shutdown"))), Close(CloseCause.LOCAL, "shutdown")]
    assert stream.close("again", at(1)) == []


def test_connection_lost() -> None:
    stream = client()
    assert stream.connection_lost() == [Close(CloseCause.DROPPED, "connection closed by peer")]
    assert stream.receive(b"\x01", at(0)) == []


# --- service side --------------------------------------------------------------------------

GRANT = Grant("broker", IDS, keepalive_timeout=5.0, rate_limit=2.0, rate_duration=5.0, throughput_limit_kb=1.0,
              throughput_duration=5.0, clock_diff_limit_ms=3000, clock_diff_duration=60.0, timestamps_interval=15.0)


def service(grant: Grant = GRANT) -> ServiceStream:
    stream = ServiceStream(5.0, T0)
    actions = stream.receive(b"\x01" + encode(Token("tok-1")) + encode(SPAT), T0)
    assert actions == [Authenticate("tok-1")]
    assert stream.accept(grant, T0) == [Send(b"\x01"), Deliver(SPAT)]  # held datagrams processed after accept
    return stream


def test_service_token_first_and_refusal() -> None:
    stream = ServiceStream(5.0, T0)
    assert stream.receive(b"\x01" + encode(KeepAlive()), T0) == [
        Send(encode(Bye("the first datagram must be Token"))),
        Close(CloseCause.PROTOCOL, "the first datagram must be Token")]
    stream = ServiceStream(5.0, T0)
    assert stream.receive(b"\x01" + encode(Token("used")), T0) == [Authenticate("used")]
    assert stream.refuse("token already used", T0) == [Send(b"\x01"), Send(encode(Bye("token already used"))),
                                                      Close(CloseCause.REFUSED, "token already used")]


def test_service_timestamps_keepalive_and_clock_offset() -> None:
    stream = service()
    assert stream.tick(T0) == [Send(encode(TimestampsRequest(T0.utc_ms)))]
    stream.receive(encode(TimestampsResponse(T0.utc_ms, T0.utc_ms + 510, T0.utc_ms + 520)), at(0.04))
    assert stream.rtt_ms == 30 and stream.clock_offset_ms == 495
    assert stream.tick(at(1.7)) == [Send(encode(KeepAlive()))]
    assert stream.tick(at(5.04)) == [Send(encode(Bye("keep-alive timeout"))),
                                     Close(CloseCause.KEEPALIVE, "keep-alive timeout")]


def test_service_clock_difference_limit() -> None:
    stream = service()
    stream.tick(T0)
    actions = stream.receive(encode(TimestampsResponse(T0.utc_ms, T0.utc_ms + 9000, T0.utc_ms + 9000)), at(0.01))
    assert actions[-1] == Close(CloseCause.LIMIT, "clock difference limit exceeded")


def test_service_mode_rules() -> None:
    stream = service()
    assert stream.receive(encode(Payload(1, 1, b"x", "NLZH9999")), at(0.1)) == []  # dropped, not closed
    assert stream.counters.dropped_in == 1 and stream.closed is None
    assert stream.receive(encode(Payload(1, 1, b"x")), at(0.2))[-1] == Close(
        CloseCause.PROTOCOL, "wrong payload datagram for a broker session")
    monitor = ServiceStream(5.0, T0)
    monitor.receive(b"\x01" + encode(Token("m")), T0)
    assert monitor.accept(Grant("monitor", IDS), T0) == [Send(b"\x01")]
    assert monitor.receive(encode(SPAT), at(0.1))[-1] == Close(CloseCause.PROTOCOL, "monitor sessions can only receive data")
    single = ServiceStream(5.0, T0)
    single.receive(b"\x01" + encode(Token("t")), T0)
    single.accept(Grant("singleplex", frozenset({"NLZH0023"})), T0)
    assert single.send_payload(SPAT, T0) == [Send(encode(Payload(SPAT.payload_type, SPAT.origin_ms, SPAT.payload)))]


def test_service_rate_and_throughput_limits() -> None:
    stream = service()  # 1 payload already; the limit is 2/s averaged over 5 s, i.e. 10 payloads
    for i in range(9):
        assert stream.receive(encode(SPAT), at(0.1 * (i + 1))) == [Deliver(SPAT)]
    assert stream.receive(encode(SPAT), at(1.0)) == [Send(encode(Bye("payload rate limit exceeded"))),
                                                     Close(CloseCause.LIMIT, "payload rate limit exceeded")]
    stream = service()
    big = Payload(1, 1, b"x" * 4000, "NLZH0023")
    stream.receive(encode(big), at(0.1))
    assert stream.receive(encode(big), at(0.2))[-1] == Close(CloseCause.LIMIT, "payload throughput limit exceeded")


def test_service_reconnect_and_client_bye() -> None:
    stream = service()
    assert stream.reconnect(at(1)) == [Send(encode(Reconnect()))]
    assert stream.receive(encode(Bye("reconnect requested")), at(1.1)) == [Close(CloseCause.BYE, "reconnect requested")]


def test_client_and_service_talk_to_each_other() -> None:
    svc = ServiceStream(5.0, T0)
    cli = ClientStream("tok-9", "multiplex", IDS, 5.0, T0)
    wire = b"".join(a.data for a in cli.start(T0) if isinstance(a, Send))
    wire += b"".join(a.data for a in cli.send_payload(SPAT, T0) if isinstance(a, Send))
    assert svc.receive(wire, T0) == [Authenticate("tok-9")]
    back = svc.accept(Grant("multiplex", IDS), T0) + svc.tick(T0)
    assert back[-1] == Send(encode(TimestampsRequest(T0.utc_ms)))
    answers = cli.receive(b"".join(a.data for a in back if isinstance(a, Send)), at(0.01))
    assert answers == [AnswerTimestamps(T0.utc_ms, T0.utc_ms + 10)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=48), st.floats(0, 20)), max_size=10), st.sampled_from(
    ["singleplex", "multiplex", "broker", "monitor"]))
def test_fuzz_client_never_crashes(chunks: list[tuple[bytes, float]], mode: str) -> None:
    stream = ClientStream("t", mode, IDS, 5.0, T0)  # type: ignore[arg-type]
    stream.start(T0)
    for data, dt in chunks:
        for action in stream.receive(b"\x01" + data if not stream.counters.payloads_in else data, at(dt)) + stream.tick(at(dt)):
            assert isinstance(action, (Send, AnswerTimestamps, Deliver, Close))
    assert stream.closed is None or isinstance(stream.closed, Close)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=48), max_size=10), st.booleans())
def test_fuzz_service_never_crashes(chunks: list[bytes], accept: bool) -> None:
    stream = ServiceStream(5.0, T0)
    prefix = b"\x01" + encode(Token("t"))
    for i, data in enumerate([prefix] + chunks):
        for action in stream.receive(data, at(i * 0.1)):
            if isinstance(action, Authenticate):
                (stream.accept(GRANT, at(i * 0.1)) if accept else stream.refuse("no", at(i * 0.1)))
        stream.tick(at(i * 0.1))


def test_stream_decoder_is_shared_by_both_sides() -> None:
    assert StreamDecoder().feed(b"\x01" + encode(SPAT)) == [SPAT]
