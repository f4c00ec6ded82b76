"""Hostile bytes in the text fields of AMQP performatives never escape the engines as exceptions
(AMQP 1.0 1.6.20: a string is UTF-8): the server engine, fed bytes without sockets, answers a
field it decodes with ``amqp:decode-error`` (the connection closed for the open's container-id, the
link refused for an attach's addresses and source filter, naming the field), and every other text
field of open, begin, attach, detach, end and close (which it does not decode) leaves it working;
the client engine reports a neighbour's undecodable error text escaped."""
from __future__ import annotations

import struct
from typing import Any

import pytest
from proton import Data, Described

from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import Admission
from interchange.broker.client import ClientEngine, ReceiverState
from interchange.broker.engine import ConnectionEngine, EngineLimits
from interchange.broker.router import BrokerCore
from interchange.broker.sasl import AMQP_HEADER
from interchange.broker.ttl_policy import TtlPolicy
from interchange.broker.wire_text import DECODE_ERROR

BAD = b"in\xff\xfe"  #: not UTF-8: 0xff can start no sequence
NULL = b"\x40"


def frame(body: bytes, channel: int = 0) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def str8(value: bytes) -> bytes:
    return b"\xa1" + bytes([len(value)]) + value


def sym8(value: bytes) -> bytes:
    return b"\xa3" + bytes([len(value)]) + value


def list8(*items: bytes) -> bytes:
    body = b"".join(items)
    return b"\xc0" + bytes([len(body) + 1, len(items)]) + body


def map8(*pairs: tuple[bytes, bytes]) -> bytes:
    body = b"".join(k + v for k, v in pairs)
    return b"\xc1" + bytes([len(body) + 1, 2 * len(pairs)]) + body


def described(code: int, body: bytes) -> bytes:
    return b"\x00\x53" + bytes([code]) + body


def error(name: bytes, description: bytes) -> bytes:
    return described(0x1D, list8(sym8(name), str8(description)))


def open_frame(container: bytes = b"probe", hostname: bytes | None = None, properties: bytes | None = None) -> bytes:
    fields = [str8(container), str8(hostname) if hostname is not None else NULL]
    if properties is not None:
        fields += [NULL] * 8 + [properties]
    return frame(described(0x10, list8(*fields)))


BEGIN = frame(described(0x11, list8(NULL, b"\x52\x00", b"\x70\x00\x00\x10\x00", b"\x70\x00\x00\x10\x00")))


def selector_filter(selector: bytes, key: bytes = b"jms-selector") -> bytes:
    return map8((sym8(key), b"\x00" + sym8(b"apache.org:selector-filter:string") + str8(selector)))


def source(address: bytes, filter_map: bytes | None = None, expiry: bytes | None = None) -> bytes:
    fields = [str8(address), NULL, sym8(expiry) if expiry is not None else NULL]
    if filter_map is not None:
        fields += [NULL, NULL, NULL, NULL, filter_map]
    return described(0x28, list8(*fields))


def target(address: bytes) -> bytes:
    return described(0x29, list8(str8(address)))


def attach(name: bytes, handle: int, consumer: bool, src: bytes, tgt: bytes) -> bytes:
    role = b"\x41" if consumer else b"\x42"  # the client's role: receiver (true) or sender (false)
    return frame(described(0x12, list8(str8(name), b"\x52" + bytes([handle]), role, NULL, NULL, src, tgt)))


def frames(out: bytes | bytearray) -> list[tuple[int, list[Any]]]:
    """(performative code, fields) of every frame the engine sent (its protocol header skipped;
    fields empty when they hold text that is not UTF-8, echoed back)."""
    data, found = bytes(out), []
    position = 8 if data[:4] == b"AMQP" else 0
    while position + 8 <= len(data):
        size, doff = struct.unpack_from(">IB", data, position)
        body = data[position + 4 * doff: position + size]
        position += size
        if not body:
            continue  # an empty frame (keep-alive)
        assert body[:2] == b"\x00\x53"  # proton describes performatives by small ulong codes
        decoded = Data()
        decoded.decode(body)
        decoded.rewind()
        decoded.next()
        try:
            fields = list(decoded.get_object().value)
        except UnicodeDecodeError:  # an echo of the peer's bytes (a link name): the code is enough
            fields = []
        found.append((body[2], fields))
    return found


class Engine:
    """A server ConnectionEngine on a real BrokerCore (target ``in``, source ``all``), fed bytes."""

    def __init__(self) -> None:
        addresses = AddressBook()
        addresses.load([TargetSpec(address="in", publishers=frozenset({"actor"}))],
                       [SourceSpec(address="all", consumers=frozenset({"actor"}))])
        core = BrokerCore(addresses, Admission(TtlPolicy(), accelerated=False))
        self.events: list[tuple[str, dict]] = []
        self.engine = ConnectionEngine(core, "actor", EngineLimits(), lambda: None,
                                       lambda kind, fields: self.events.append((kind, fields)))

    def feed(self, data: bytes) -> list[tuple[int, list[Any]]]:
        self.engine.receive(data)
        return frames(self.engine.take_output())


def refusal(answer: list[tuple[int, list[Any]]]) -> tuple[str, str]:
    """The error of the detach (0x16) in an answer: (condition, description)."""
    (detach,) = [fields for code, fields in answer if code == 0x16]
    condition = detach[2]
    assert isinstance(condition, Described)
    return str(condition.value[0]), str(condition.value[1])


def test_container_id_not_utf8_closes_with_decode_error() -> None:
    engine = Engine()
    answer = engine.feed(AMQP_HEADER + open_frame(container=BAD))
    codes = [code for code, _ in answer]
    assert codes == [0x10, 0x18]  # our open, then the close (AMQP 1.0 2.4.2)
    condition = answer[1][1][0]
    assert condition.value[0] == DECODE_ERROR
    assert condition.value[1] == "open: container-id is not valid UTF-8 (byte 0xff at offset 2)"
    assert ("transport_error", {"condition": DECODE_ERROR, "description": condition.value[1]}) in engine.events


@pytest.mark.parametrize("consumer, src, tgt, field", [
    (False, source(b"x"), target(BAD), "attach: target address"),
    (True, source(BAD), target(b"x"), "attach: source address"),
    (True, source(b"all", selector_filter(b"causeCode = '\xc3'")), target(b"x"), "attach: source filter"),
    (True, source(b"all", selector_filter(b"causeCode = 1", key=b"jms\xff")), target(b"x"), "attach: source filter"),
], ids=["target-address", "source-address", "selector", "filter-key"])
def test_attach_field_not_utf8_refuses_the_link_only(consumer: bool, src: bytes, tgt: bytes, field: str) -> None:
    engine = Engine()
    engine.feed(AMQP_HEADER + open_frame() + BEGIN)
    condition, description = refusal(engine.feed(attach(b"hostile", 0, consumer, src, tgt)))
    assert condition == DECODE_ERROR
    assert description.startswith(f"{field} is not valid UTF-8 (byte 0x")
    assert ("link_refused", {"condition": DECODE_ERROR, "description": description}) in engine.events
    # The connection goes on: a valid attach on another handle is taken.
    good = attach(b"good", 1, True, source(b"all"), target(b"x"))
    assert [code for code, _ in engine.feed(good)] == [0x12]
    assert not engine.engine.closed


#: Text fields the engine does not decode: each carries invalid UTF-8 and the connection works on.
UNREAD_FIELDS = {
    "open-hostname": AMQP_HEADER + open_frame(hostname=BAD) + BEGIN,
    "open-properties-key": AMQP_HEADER + open_frame(properties=map8((sym8(b"k\xff"), str8(BAD)))) + BEGIN,
    "attach-name": AMQP_HEADER + open_frame() + BEGIN + attach(BAD, 0, True, source(b"all"), target(b"x")),
    "attach-expiry-policy": AMQP_HEADER + open_frame() + BEGIN
    + attach(b"l", 0, True, source(b"all", expiry=b"link\xff"), target(b"x")),
    "detach-error": AMQP_HEADER + open_frame() + BEGIN + attach(b"l", 0, True, source(b"all"), target(b"x"))
    + frame(described(0x16, list8(b"\x52\x00", b"\x41", error(b"x:\xff", BAD)))),
    "end-error": AMQP_HEADER + open_frame() + BEGIN + frame(described(0x17, list8(error(b"x:\xff", BAD)))),
    "close-error": AMQP_HEADER + open_frame() + frame(described(0x18, list8(error(b"x:\xff", BAD)))),
}


@pytest.mark.parametrize("data", UNREAD_FIELDS.values(), ids=UNREAD_FIELDS.keys())
def test_fields_not_decoded_pass_without_an_exception(data: bytes) -> None:
    engine = Engine()
    answer = engine.feed(data)  # raises if a decode escapes
    closes = [fields for code, fields in answer if code == 0x18]
    assert not closes or closes[0] == [] or closes[0][0] is None  # a close answered, never with an error
    assert not [kind for kind, _ in engine.events if kind == "transport_error"]


def test_client_engine_escapes_a_neighbours_undecodable_error_text() -> None:
    client = ClientEngine("ixc-a")
    client.open_receiver(ReceiverState("src", None, 10, lambda raw: None))
    client.take_output()
    client.receive(AMQP_HEADER + open_frame() + frame(described(0x18, list8(error(b"amqp:x\xff", BAD)))))
    assert client.remote_error == "amqp:x\\xff: in\\xff\\xfe"
