"""The IF2 bridge's sans-I/O AMQP 0-9-1 connection, against frames a broker would send (built with
pamqp, the codec RabbitMQ's Python clients share) and no socket: the handshake, deliveries cut at any
byte, publisher confirms (single, multiple, nack, lost with the connection), channel and connection
closes, heartbeats and bytes that are not AMQP 0-9-1."""
from __future__ import annotations

from typing import Any

import pytest
from pamqp import body, commands, frame, header, heartbeat

from interchange.bridges.if2.amqp091 import Closed, Confirmed, Connection, Delivery, ProtocolError, Reply

KEY = "DENM.1_2_1.RWS.5." + ".".join("120202130121133020")


def wire(*frames: tuple[int, Any]) -> bytes:
    return b"".join(frame.marshal(value, channel) for channel, value in frames)


def sent(connection: Connection) -> list[tuple[int, Any]]:
    """The frames the client wrote (after its protocol header)."""
    data, out = connection.take_output(), []
    if data.startswith(b"AMQP"):
        data = data[8:]
    while data:
        size, channel, value = frame.unmarshal(data)
        out.append((channel, value))
        data = data[size:]
    return out


def opened(mechanism: str = "EXTERNAL", heartbeat_s: int = 60, frame_max: int = 131072) -> Connection:
    connection = Connection("if2-vhost", mechanism, "user", "secret")  # type: ignore[arg-type]
    connection.start(0.0)
    assert connection.take_output() == b"AMQP\x00\x00\x09\x01"
    connection.receive(wire((0, commands.Connection.Start(mechanisms="PLAIN AMQPLAIN EXTERNAL"))))
    connection.receive(wire((0, commands.Connection.Tune(channel_max=2047, frame_max=frame_max,
                                                         heartbeat=heartbeat_s))))
    events = connection.receive(wire((0, commands.Connection.OpenOk())))
    assert [type(e.method) for e in events if isinstance(e, Reply)] == [commands.Connection.OpenOk]
    for channel in (1, 2):
        connection.send(channel, commands.Channel.Open())
    connection.receive(wire((1, commands.Channel.OpenOk()), (2, commands.Channel.OpenOk())))
    connection.take_output()
    return connection


def test_handshake_with_sasl_external_and_the_vhost() -> None:
    connection = Connection("if2-vhost", "EXTERNAL", heartbeat_s=30)
    connection.start(0.0)
    connection.take_output()
    assert connection.receive(wire((0, commands.Connection.Start(mechanisms="PLAIN EXTERNAL")))) == []
    start_ok = sent(connection)[0][1]
    assert isinstance(start_ok, commands.Connection.StartOk)
    assert start_ok.mechanism == "EXTERNAL" and start_ok.response == ""
    capabilities: Any = (start_ok.client_properties or {})["capabilities"]
    assert capabilities["publisher_confirms"] is True
    connection.receive(wire((0, commands.Connection.Tune(channel_max=0, frame_max=4096, heartbeat=60))))
    tune_ok, open_ = (value for _, value in sent(connection))
    assert (tune_ok.frame_max, tune_ok.heartbeat) == (4096, 30) and open_.virtual_host == "if2-vhost"
    assert not connection.opened
    connection.receive(wire((0, commands.Connection.OpenOk())))
    assert connection.opened and connection.frame_max == 4096


def test_sasl_plain_and_a_mechanism_the_broker_does_not_offer() -> None:
    connection = Connection(mechanism="PLAIN", username="bridge", password="pw")
    connection.start()
    connection.receive(wire((0, commands.Connection.Start(mechanisms="AMQPLAIN PLAIN"))))
    assert sent(connection)[0][1].response == "\0bridge\0pw"
    external = Connection(mechanism="EXTERNAL")
    external.start()
    with pytest.raises(ProtocolError, match="not EXTERNAL"):
        external.receive(wire((0, commands.Connection.Start(mechanisms="PLAIN"))))


def deliveries(count: int, frame_max: int = 40) -> bytes:
    """``count`` deliveries on channel 2, bodies cut into frames of ``frame_max`` payload bytes."""
    frames: list[tuple[int, Any]] = []
    for tag in range(1, count + 1):
        payload = b"%d:" % tag + b"x" * 90
        properties = commands.Basic.Properties(expiration="60000", headers={"lat": 51.9}, app_id="b")
        frames += [(2, commands.Basic.Deliver("ctag", tag, tag == 2, "DENM", KEY)),
                   (2, header.ContentHeader(0, len(payload), properties))]
        frames += [(2, body.ContentBody(payload[i:i + frame_max])) for i in range(0, len(payload), frame_max)]
    return wire(*frames)


@pytest.mark.parametrize("chunk", [1, 7, 100_000])
def test_deliveries_are_assembled_whatever_the_reads(chunk: int) -> None:
    connection = opened()
    data, events = deliveries(5), []
    for start in range(0, len(data), chunk):
        events += connection.receive(data[start:start + chunk])
    assert [type(e) for e in events] == [Delivery] * 5
    first, second = events[0], events[1]
    assert isinstance(first, Delivery) and isinstance(second, Delivery)
    assert (first.channel, first.delivery_tag, first.redelivered, first.exchange, first.routing_key) == \
        (2, 1, False, "DENM", KEY)
    assert first.body == b"1:" + b"x" * 90 and second.redelivered
    assert first.properties.expiration == "60000" and first.properties.app_id == "b"


def test_an_empty_body_is_a_delivery_too() -> None:
    connection = opened()
    events = connection.receive(wire((2, commands.Basic.Deliver("ctag", 9, False, "IVI", KEY)),
                                     (2, header.ContentHeader(0, 0, commands.Basic.Properties()))))
    assert [(e.delivery_tag, e.body) for e in events if isinstance(e, Delivery)] == [(9, b"")]


def confirming(count: int, frame_max: int = 131072) -> Connection:
    connection = opened(frame_max=frame_max)
    connection.send(1, commands.Confirm.Select())
    sent(connection)
    for token in range(1, count + 1):
        connection.publish(1, "SPAT", KEY, commands.Basic.Properties(app_id="node/if2"), b"m%d" % token, token)
    return connection


def test_publishes_are_confirmed_by_multiple_single_and_nack() -> None:
    connection = confirming(6)
    frames = sent(connection)
    assert [type(v) for _, v in frames[:3]] == [commands.Basic.Publish, header.ContentHeader, body.ContentBody]
    assert frames[0][1].exchange == "SPAT" and frames[0][1].routing_key == KEY and frames[2][1].value == b"m1"
    assert connection.receive(wire((1, commands.Basic.Ack(3, multiple=True)))) == [Confirmed(1, (1, 2, 3), True)]
    assert connection.receive(wire((1, commands.Basic.Ack(5)))) == [Confirmed(1, (5,), True)]
    assert connection.receive(wire((1, commands.Basic.Nack(4)))) == [Confirmed(1, (4,), False)]
    assert connection.receive(wire((1, commands.Basic.Ack(5)))) == []  # (already confirmed)
    events = connection.receive(wire((0, commands.Connection.Close(320, "CONNECTION_FORCED", 0, 0))))
    assert events == [Closed(0, 320, "CONNECTION_FORCED", (6,))]  # never confirmed: the caller must not count it
    assert isinstance(sent(connection)[0][1], commands.Connection.CloseOk) and connection.closed


def test_confirms_single_out_of_order_then_multiple_each_token_once() -> None:
    """Single confirms out of order, a multiple nack over them, a multiple ack past the last publish
    (a broker's tag of 2^63 - 1: nothing past what was published is looked for), and a
    confirm frame whose end octet is not 0xce, which pamqp refuses."""
    connection = confirming(8)
    connection.take_output()
    assert connection.receive(wire((1, commands.Basic.Ack(4)), (1, commands.Basic.Ack(2)))) == [
        Confirmed(1, (4,), True), Confirmed(1, (2,), True)]
    assert connection.receive(wire((1, commands.Basic.Nack(5, multiple=True)))) == [Confirmed(1, (1, 3, 5), False)]
    assert connection.receive(wire((1, commands.Basic.Ack(7)))) == [Confirmed(1, (7,), True)]
    assert connection.receive(wire((1, commands.Basic.Ack(2**63 - 1, multiple=True)))) == [Confirmed(1, (6, 8), True)]
    assert connection.receive(wire((1, commands.Basic.Ack(8, multiple=True)))) == []
    broken = bytearray(wire((1, commands.Basic.Ack(9))))
    broken[-1] = 0
    with pytest.raises(ProtocolError, match="cannot read"):
        connection.receive(bytes(broken))


def test_each_publish_names_its_own_exchange_and_key() -> None:
    connection = opened()
    routes = [("SPAT", KEY), ("MAP", KEY), ("SPAT", KEY.replace(".5.", ".0.")), ("SPAT", KEY)] * 2
    for exchange, key in routes:
        connection.publish(1, exchange, key, commands.Basic.Properties(), b"m")
        connection.publish(2, exchange, key, commands.Basic.Properties(), b"m")
    published = [(channel, v.exchange, v.routing_key) for channel, v in sent(connection)
                 if isinstance(v, commands.Basic.Publish)]
    assert published == [(channel, *route) for route in routes for channel in (1, 2)]


def test_a_body_larger_than_frame_max_goes_in_several_frames() -> None:
    connection = opened(frame_max=4096)
    payload = bytes(range(256)) * 40  # 10,240 bytes
    connection.publish(1, "MAP", KEY, commands.Basic.Properties(), payload)
    bodies = [v.value for _, v in sent(connection) if isinstance(v, body.ContentBody)]
    assert [len(b) for b in bodies] == [4088, 4088, 2064] and b"".join(bodies) == payload


@pytest.mark.parametrize("frame_max", [0, 4096])
def test_a_publish_is_the_bytes_pamqp_writes_and_properties_are_encoded_once_per_object(
        frame_max: int, monkeypatch: pytest.MonkeyPatch) -> None:
    connection = opened(frame_max=frame_max)
    sent(connection)
    headers = {"lat": 51.5, "lon": 4.25, "tile": "1202021", "n": 7}
    first = commands.Basic.Properties(headers=headers, expiration="60000", app_id="node/if2", delivery_mode=1)
    other = commands.Basic.Properties(app_id="node/if2")
    marshalled: list[object] = []
    marshal = commands.Basic.Properties.marshal
    monkeypatch.setattr(commands.Basic.Properties, "marshal", lambda self: marshalled.append(self) or marshal(self))
    cases = [(first, b""), (first, b"x" * 200), (other, bytes(range(256)) * 40), (first, b"y" * 5000)]
    for properties, payload in cases:
        connection.publish(1, "SPAT", KEY, properties, payload)
    monkeypatch.undo()
    assert marshalled == [first, other]  # each properties object once
    expected = b""
    for properties, payload in cases:
        step = frame_max - 8 if frame_max else len(payload) or 1
        expected += frame.marshal(commands.Basic.Publish(exchange="SPAT", routing_key=KEY), 1)
        expected += frame.marshal(header.ContentHeader(0, len(payload), properties), 1)
        expected += b"".join(frame.marshal(body.ContentBody(payload[i:i + step]), 1)
                             for i in range(0, len(payload), step))
    assert connection.take_output() == expected


def test_the_broker_closing_a_channel_is_answered_and_reported_with_what_was_unconfirmed() -> None:
    connection = confirming(2)
    sent(connection)
    events = connection.receive(wire((1, commands.Channel.Close(404, "NOT_FOUND - no exchange 'SPAT'", 60, 40))))
    assert events == [Closed(1, 404, "NOT_FOUND - no exchange 'SPAT'", (1, 2))]
    assert [type(v) for _, v in sent(connection)] == [commands.Channel.CloseOk]


def test_a_lost_transport_returns_every_unconfirmed_token() -> None:
    connection = confirming(3)
    connection.receive(wire((1, commands.Basic.Ack(1))))
    assert connection.lost() == (2, 3) and connection.closed


def test_synchronous_answers_and_a_cancelled_consumer() -> None:
    connection = opened()
    events = connection.receive(wire((2, commands.Queue.DeclareOk("amq.gen-1", 0, 0)),
                                     (2, commands.Basic.Cancel("if2-DENM"))))
    assert isinstance(events[0], Reply) and isinstance(events[0].method, commands.Queue.DeclareOk)
    assert events[0].method.queue == "amq.gen-1"
    assert isinstance(events[1], Closed) and events[1].channel == 2 and "if2-DENM" in events[1].text


def test_heartbeats_on_a_quiet_connection_and_a_silent_broker() -> None:
    connection = opened(heartbeat_s=10)
    connection.sent(0.0)
    assert connection.tick(2.0) is None and connection.take_output() == b""  # written recently: none needed
    assert connection.tick(5.0) is None
    assert connection.take_output() == frame.marshal(heartbeat.Heartbeat(), 0)
    connection.receive(frame.marshal(heartbeat.Heartbeat(), 0), 15.0)  # the broker's heartbeat: alive
    assert connection.tick(30.0) is None
    dead = connection.tick(36.0)
    assert isinstance(dead, Closed) and "no frame from the broker for 21 s" in dead.text


def test_no_heartbeats_when_either_side_says_zero() -> None:
    connection = opened(heartbeat_s=0)
    assert connection.heartbeat_s == 0 and connection.tick(1e6) is None and connection.take_output() == b""


def test_a_frame_on_a_channel_that_is_not_open() -> None:
    with pytest.raises(ProtocolError, match="channel 3, which is not open"):
        opened().receive(wire((3, commands.Basic.Deliver("ctag", 1, False, "DENM", KEY))))


def test_bytes_that_are_not_amqp_0_9_1() -> None:
    connection = opened()
    with pytest.raises(ProtocolError, match="protocol"):
        connection.receive(b"AMQP\x00\x01\x00\x00")  # the broker's answer to a version it does not speak
    broken = opened()
    with pytest.raises(ProtocolError, match="cannot read"):
        broken.receive(b"\x01\x00\x00\x00\x00\x00\x02\x00\x0a\x00")  # a method frame whose end octet is wrong


# ---------------------------------------------------------------- a delivery's frames read without pamqp

def _by_pamqp(data: bytes) -> list[tuple[int, Any]]:
    """The frames of ``data`` as pamqp reads them (the reference)."""
    out = []
    while data:
        size, channel, value = frame.unmarshal(data)
        out.append((channel, value))
        data = data[size:]
    return out


def test_deliveries_read_without_pamqp_are_what_pamqp_reads() -> None:
    headers = [{"lat": 51.9, "lon": 4.4}, {"lat": 52.0, "lon": 4.4}]
    frames: list[tuple[int, Any]] = []
    for tag in range(1, 7):  # two kinds of properties, alternating; UTF-8 in a routing key
        properties = commands.Basic.Properties(expiration="60000", headers=headers[tag % 2], app_id="b")
        payload = b"%d:" % tag + b"y" * (300 * tag)
        frames += [(2, commands.Basic.Deliver("ctag", 2**40 + tag, tag % 3 == 0, "DENM", KEY + ".é")),
                   (2, header.ContentHeader(0, len(payload), properties)),
                   (2, body.ContentBody(payload[:500])), (2, body.ContentBody(payload[500:]))]
    frames = [(c, v) for c, v in frames if not isinstance(v, body.ContentBody) or v.value]
    connection = opened()
    events = [e for e in connection.receive(wire(*frames)) if isinstance(e, Delivery)]
    reference = _by_pamqp(wire(*frames))
    delivers = [v for _, v in reference if isinstance(v, commands.Basic.Deliver)]
    contents = [v for _, v in reference if isinstance(v, header.ContentHeader)]
    assert [(e.delivery_tag, e.redelivered, e.exchange, e.routing_key) for e in events] == \
        [(d.delivery_tag, d.redelivered, d.exchange, d.routing_key) for d in delivers]
    assert [e.properties.headers for e in events] == [c.properties.headers for c in contents]
    assert [e.body for e in events] == [b"%d:" % tag + b"y" * (300 * tag) for tag in range(1, 7)]
    assert events[2].properties is events[0].properties  # the same bytes: decoded once, read-only
    assert events[1].properties is not events[0].properties


def test_deliveries_read_at_once_each_keep_their_own_names_tag_and_body() -> None:
    """Three frames a delivery, whole in one read (the path that reads them together, and keeps each
    ``basic.deliver``'s names by their bytes): each delivery is what pamqp reads, whichever consumer
    tag, exchange and routing key it shares with the others."""
    keys = [KEY, KEY.replace(".5.", ".6."), "IVI.1_2_1.RWS.0." + ".".join("120202130121133021")]
    frames: list[tuple[int, Any]] = []
    for tag in range(1, 13):
        properties = commands.Basic.Properties(expiration=str(1000 * (tag % 2 + 1)), headers={}, app_id="b")
        payload = b"%d:" % tag + b"z" * (tag % 4)  # an empty body once in four
        frames += [(2, commands.Basic.Deliver(f"ctag-{tag % 2}", tag, tag % 5 == 0, ("DENM", "IVI")[tag % 3 == 2],
                                              keys[tag % 3])),
                   (2, header.ContentHeader(0, len(payload), properties))]
        frames += [(2, body.ContentBody(payload))] if payload else []
    connection = opened()
    events = [e for chunk in (frames[:6], frames[6:]) for e in connection.receive(wire(*chunk))]
    reference = _by_pamqp(wire(*frames))
    delivers = [v for _, v in reference if isinstance(v, commands.Basic.Deliver)]
    contents = [v for _, v in reference if isinstance(v, header.ContentHeader)]
    assert [(e.channel, e.delivery_tag, e.redelivered, e.exchange, e.routing_key) for e in events] == \
        [(2, d.delivery_tag, d.redelivered, d.exchange, d.routing_key) for d in delivers]
    assert [e.properties.expiration for e in events] == [c.properties.expiration for c in contents]
    assert [e.body for e in events] == [b"%d:" % tag + b"z" * (tag % 4) for tag in range(1, 13)]


def test_deliveries_of_two_channels_whose_frames_interleave() -> None:
    """0-9-1 4.2.6: frames of different channels may interleave; each body goes to its own channel's delivery."""
    properties = commands.Basic.Properties(app_id="b")
    connection = opened()
    connection.receive(wire((2, commands.Basic.Deliver("c", 1, False, "DENM", KEY)),
                            (2, header.ContentHeader(0, 1, properties)), (2, body.ContentBody(b"0"))))
    events = connection.receive(wire(
        (2, commands.Basic.Deliver("c", 2, False, "DENM", KEY)), (2, header.ContentHeader(0, 3, properties)),
        (1, commands.Basic.Deliver("c", 7, False, "IVI", KEY)), (1, header.ContentHeader(0, 3, properties)),
        (2, body.ContentBody(b"two")), (1, body.ContentBody(b"one")),
        (1, commands.Basic.Deliver("c", 8, False, "IVI", KEY)), (2, commands.Basic.Deliver("c", 3, False, "DENM", KEY)),
        (1, header.ContentHeader(0, 0, properties)), (2, header.ContentHeader(0, 5, properties)),
        (2, body.ContentBody(b"three"))))
    assert [(e.channel, e.delivery_tag, e.exchange, e.body) for e in events if isinstance(e, Delivery)] == \
        [(2, 2, "DENM", b"two"), (1, 7, "IVI", b"one"), (1, 8, "IVI", b""), (2, 3, "DENM", b"three")]


def _deliver_frame(arguments: bytes, end: bytes = b"\xce") -> bytes:
    payload = b"\x00\x3c\x00\x3c" + arguments
    return b"\x01\x00\x02" + len(payload).to_bytes(4, "big") + payload + end


_ARGUMENTS = b"\x04ctag" + (7).to_bytes(8, "big") + b"\x00" + b"\x04DENM" + bytes([len(KEY)]) + KEY.encode()


@pytest.mark.parametrize(("data", "error"), [
    (_deliver_frame(_ARGUMENTS[:-1]), "shorter than its fields"),  # the routing key cut short
    (_deliver_frame(_ARGUMENTS[:10]), "shorter than its fields"),  # the delivery tag cut short
    (_deliver_frame(_ARGUMENTS + b"\x00"), "1 bytes after its fields"),
    (_deliver_frame(_ARGUMENTS.replace(b"\x04DENM", b"\x04DE\xffM")), "not UTF-8"),
    (_deliver_frame(_ARGUMENTS, end=b"\x00"), "cannot read"),  # frame end not 0xce: pamqp refuses it
    (wire((2, commands.Basic.Deliver("ctag", 1, False, "DENM", KEY)))
     + b"\x03\x00\x02\x00\x00\x00\x01x\x00", "cannot read"),  # a body frame whose end is not 0xce
])
@pytest.mark.parametrize("warm", [False, True])
def test_a_delivery_whose_frames_are_not_0_9_1_is_refused(data: bytes, error: str, warm: bool) -> None:
    """Refused on a new connection, and on one that read a good delivery of the same names before
    (``warm``: what it keeps of those names does not let a broken frame through)."""
    good = _deliver_frame(_ARGUMENTS) + wire((2, header.ContentHeader(0, 1, commands.Basic.Properties())),
                                             (2, body.ContentBody(b"x")))
    assert [type(e) for e in opened().receive(good)] == [Delivery]
    connection = opened()
    if warm:
        assert [type(e) for e in connection.receive(good + good)] == [Delivery, Delivery]
    with pytest.raises(ProtocolError, match=error):
        connection.receive(data)


def test_a_content_header_seen_before_with_a_broken_frame_end_is_refused() -> None:
    connection = opened()
    content = wire((2, header.ContentHeader(0, 1, commands.Basic.Properties(app_id="b"))))
    connection.receive(wire((2, commands.Basic.Deliver("ctag", 1, False, "DENM", KEY))) + content
                       + wire((2, body.ContentBody(b"x"))))
    with pytest.raises(ProtocolError, match="cannot read"):
        connection.receive(wire((2, commands.Basic.Deliver("ctag", 2, False, "DENM", KEY))) + content[:-1] + b"\x00")


@pytest.mark.parametrize("accelerated", [False, None])
def test_a_body_frame_without_its_content_header_is_refused(accelerated: bool | None) -> None:
    """A body after a delivery was whole, or right after a basic.deliver, has no content header: it is
    refused, not delivered with the properties of the delivery before it (read in Python, and with the
    C reader where it is built)."""
    properties = commands.Basic.Properties(app_id="b")
    whole = wire((2, commands.Basic.Deliver("c", 1, False, "DENM", KEY)), (2, header.ContentHeader(0, 1, properties)),
                 (2, body.ContentBody(b"x")))
    for stray in (wire((2, body.ContentBody(b"y"))),
                  wire((2, commands.Basic.Deliver("c", 2, False, "DENM", KEY)), (2, body.ContentBody(b"y")))):
        connection = opened()
        connection._c_read = None if accelerated is False else connection._c_read
        assert [e.delivery_tag for e in connection.receive(whole + whole) if isinstance(e, Delivery)] == [1, 1]
        with pytest.raises(ProtocolError, match="without its content header"):
            connection.receive(stray)
