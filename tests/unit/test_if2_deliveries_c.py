"""The C reader of whole AMQP 0-9-1 deliveries (``interchange/bridges/if2/_deliveries.c``) against the
Python reader it stands in for: on real frames (pamqp's, as RabbitMQ sends them) read at any cut, and
on hostile ones (every byte of a stream changed, cut, frames of other channels, huge sizes), a
connection reading with C gives the same events and the same errors as one reading in Python, and
a broken frame is a :class:`ProtocolError`, never a crash."""
from __future__ import annotations

import pickle
import random
from collections.abc import Callable
from typing import Any

import pytest
from pamqp import body, commands, frame, header

from interchange.bridges.if2 import amqp091
from interchange.bridges.if2.amqp091 import Connection, Delivery, ProtocolError

KEY = "DENM.1_2_1.RWS.5." + ".".join("120202130121133020")

needs_c = pytest.mark.skipif(amqp091._c_read is None, reason="the C reader is not built (no compiler)")


def wire(*frames: tuple[int, Any]) -> bytes:
    return b"".join(frame.marshal(value, channel) for channel, value in frames)


def opened(accelerated: bool) -> Connection:
    connection = Connection("v", accelerated=accelerated)
    connection.start()
    connection.receive(wire((0, commands.Connection.Start(mechanisms="EXTERNAL")),
                            (0, commands.Connection.Tune(frame_max=131072, heartbeat=0)),
                            (0, commands.Connection.OpenOk())))
    for channel in (1, 2):
        connection.send(channel, commands.Channel.Open())
    connection.receive(wire((1, commands.Channel.OpenOk()), (2, commands.Channel.OpenOk())))
    connection.take_output()
    return connection


def stream(count: int = 24) -> bytes:
    """Deliveries as RabbitMQ sends them: a few consumer tags, exchanges, keys (one not ASCII) and
    properties, redelivered now and then, empty bodies, a body in two frames, a frame of another
    channel between two deliveries, and a basic.ack (publisher confirm) among them."""
    keys = [KEY, KEY.replace(".5.", ".6."), KEY + ".é"]
    props = [commands.Basic.Properties(expiration="60000", headers={}),
             commands.Basic.Properties(expiration="5000", headers={"lat": 51.5, "lon": 4.7}, app_id="x")]
    frames: list[tuple[int, Any]] = []
    for tag in range(1, count + 1):
        payload = b"%d:" % tag + b"p" * (tag % 5 * 17) if tag % 7 else b""
        frames += [(2, commands.Basic.Deliver(f"c{tag % 2}", 2**33 + tag, tag % 4 == 0, ("DENM", "IVI")[tag % 3 == 0],
                                              keys[tag % 3])),
                   (2, header.ContentHeader(0, len(payload), props[tag % 2]))]
        if payload and tag % 6 == 0:
            frames += [(2, body.ContentBody(payload[:5])), (2, body.ContentBody(payload[5:]))]
        elif payload:
            frames.append((2, body.ContentBody(payload)))
        if tag % 9 == 0:
            frames.append((1, commands.Basic.Ack(0, False)))
    return wire(*frames)


def outcome(accelerated: bool, data: bytes, cut: int | None = None, warm: bytes = b"") -> list[Any]:
    """The events of reading ``data`` (after ``warm``; in reads of ``cut`` bytes), each as a comparable
    tuple, ending with the error if one came."""
    chunks = [warm] if warm else []
    chunks += [data] if cut is None else [data[i:i + cut] for i in range(0, len(data), cut)]
    return read(opened(accelerated), chunks)


def read(connection: Connection, chunks: list[bytes]) -> list[Any]:
    seen: list[Any] = []
    try:
        for chunk in chunks:
            for event in connection.receive(chunk):
                if isinstance(event, Delivery):
                    seen.append((*event[:5], event.properties.marshal(), event.body))
                else:
                    seen.append(repr(event))
    except ProtocolError as exc:
        seen.append(("ProtocolError", str(exc)))
    return seen


@needs_c
@pytest.mark.parametrize("cut", [None, 1, 7, 64, 333, 4096])
def test_real_frames_give_the_same_deliveries_whatever_the_reads(cut: int | None) -> None:
    data = stream()
    python = outcome(False, data, cut)
    assert python == outcome(True, data, cut)
    assert sum(isinstance(e, tuple) and len(e) == 7 for e in python) == 24


@needs_c
def test_the_c_reader_reads_the_deliveries_of_a_warm_connection() -> None:
    """Once the names and properties are known (the first read), the C reader takes whole deliveries:
    after the warm-up, a run of them is read without the Python reader's per-delivery method."""
    connection = opened(True)
    connection.receive(stream(6))
    calls = 0
    whole = connection._whole_delivery

    def counted(*args: Any) -> int:
        nonlocal calls
        calls += 1
        return whole(*args)

    connection._whole_delivery = counted  # type: ignore[method-assign]
    events = connection.receive(stream(6))
    assert len([e for e in events if isinstance(e, Delivery)]) == 6
    assert calls < 6  # (the ones the C reader stopped at: a body in two frames, an ack)


def warmed(accelerated: bool, warm: bytes) -> tuple[list[Any], Callable[[bytes], list[Any]]]:
    """The events of ``warm`` on a new connection, and a reader of what comes next: each call reads
    ``data`` on a copy of that connection (the state it was left in, made once, not per call; a
    pickle, not ``copy.deepcopy``, whose calls of ``id()`` each go through the unit part's audit hook)."""
    connection = opened(accelerated)
    events = read(connection, [warm])
    state = pickle.dumps(connection)

    def copy_reads(data: bytes) -> list[Any]:
        return read(pickle.loads(state), [data])  # (our own object, pickled just above)

    return events, copy_reads


@needs_c
def test_every_byte_of_a_stream_changed_gives_the_same_events_or_error() -> None:
    data = stream(8)
    warm = stream(8)
    (c_warm, c_reads), (python_warm, python_reads) = warmed(True, warm), warmed(False, warm)
    assert c_warm == python_warm and len(c_warm) == 8  # its deliveries, read alike
    rng = random.Random(20261128)
    for at in range(len(data)):
        for value in (rng.randrange(256), data[at] ^ 0x01, 0xFF):
            broken = data[:at] + bytes([value]) + data[at + 1:]
            assert c_reads(broken) == python_reads(broken), (at, value)


@needs_c
def test_a_stream_cut_anywhere_or_with_huge_sizes_is_read_alike() -> None:
    data, warm = stream(6), stream(6)
    for stop in range(len(data)):
        assert outcome(True, data[:stop], warm=warm) == outcome(False, data[:stop], warm=warm)
    deliver = wire((2, commands.Basic.Deliver("c0", 1, False, "DENM", KEY)))
    for size in (0xFFFFFFFF, 0x7FFFFFFF, 0x100):  # a frame, content header or body claiming more than came
        huge = size.to_bytes(4, "big")
        for broken in (deliver[:3] + huge + deliver[7:],
                       deliver + b"\x02\x00\x02" + huge + b"\x00\x3c\x00\x00" + b"\xff" * 8 + b"\xce",
                       deliver + wire((2, header.ContentHeader(0, size, commands.Basic.Properties(
                           expiration="60000", headers={})))) + b"\x03\x00\x02" + huge + b"x\xce"):
            assert outcome(True, broken, warm=warm) == outcome(False, broken, warm=warm)


@needs_c
def test_the_c_reader_refuses_what_is_not_its_arguments() -> None:
    read = amqp091._c_read
    assert read is not None
    with pytest.raises(TypeError):
        read(b"not a bytearray", 0, {}, {}, {}, Delivery, [])
    with pytest.raises(ValueError):
        read(bytearray(4), 5, {}, {}, {}, Delivery, [])
    events: list[Any] = []
    assert read(bytearray(stream(2)), 0, {}, {}, {}, Delivery, events) == 0 and events == []  # nothing known yet


def test_a_connection_can_be_told_to_read_in_python() -> None:
    assert opened(False)._c_read is None
    if amqp091._c_read is None:
        with pytest.raises(ImportError):
            Connection(accelerated=True)
