"""The AMQP 1.0 message the IF2 bridge sends to the BI, from proton-encoded sections: decoded, it is
the message proton's ``Message(body, properties, inferred=True, ttl)`` would be, byte for byte body."""
from __future__ import annotations

import pytest
from proton import Message

from collections.abc import Callable
from typing import Any

from interchange.bridges.if2 import bi_message
from interchange.bridges.if2.bi_message import Reader, application_properties, message, read

PROPERTIES = {"messageType": "DENM", "publisherId": "NL00001", "publicationId": "NL00001:if2-DENM-1.2.1",
              "originatingCountry": "NL", "protocolVersion": "DENM:1.2.1", "quadTree": ",120202130121133020,",
              "causeCode": 5, "subCauseCode": 0, "latitude": 51.9000001, "longitude": 4.4}


@pytest.mark.parametrize("body", [b"", b"\x00\x01\xff" * 30, bytes(range(256)) * 400])  # vbin8 and vbin32
@pytest.mark.parametrize("ttl_ms", [None, 0, 59_999, 2**32 - 1])
def test_decoded_it_is_the_message_proton_would_encode(body: bytes, ttl_ms: int | None) -> None:
    raw = message(application_properties(PROPERTIES), body, ttl_ms)
    got, reference = Message(), Message(body=body, properties=PROPERTIES, inferred=True)
    if ttl_ms is not None:
        reference.ttl = ttl_ms / 1000
    got.decode(raw)
    again = Message()
    again.decode(reference.encode())
    assert got.properties == again.properties == PROPERTIES
    assert bytes(got.body) == bytes(again.body) == body and got.inferred and again.inferred
    assert got.ttl == again.ttl and got.durable == again.durable and got.priority == again.priority


def test_a_ttl_that_ran_out_is_sent_as_zero() -> None:
    got = Message()
    got.decode(message(application_properties(PROPERTIES), b"x", -5))
    assert got.ttl == 0


# ---------------------------------------------------------------- read: a BI message taken apart

Read = Callable[[bytes | bytearray], tuple[dict[str, Any], int | None, bytes]]
#: :func:`read`, and the bridge's :class:`Reader` (one for all the reads of a test, as in the bridge)
READERS = pytest.mark.parametrize("read", [read, Reader(accelerated=False).read, Reader().read],
                                  ids=["read", "Reader", "Reader-default"])

def _by_proton(raw: bytes) -> tuple[dict, int | None, bytes]:
    """What the bridge read of a message with proton alone (the reference)."""
    got = Message()
    got.decode(raw)
    assert isinstance(got.body, (bytes, memoryview)) and got.inferred
    return dict(got.properties or {}), int(got.ttl * 1000) if got.ttl else None, bytes(got.body)


@READERS
@pytest.mark.parametrize("body", [b"", b"\x00\x01\xff" * 30, bytes(range(256)) * 400])
@pytest.mark.parametrize("ttl_ms", [None, 1, 59_999, 2**32 - 1])
def test_read_gives_what_proton_reads(body: bytes, ttl_ms: int | None, read: Read) -> None:
    ours = message(application_properties(PROPERTIES), body, ttl_ms)
    theirs = Message(body=body, properties=PROPERTIES, inferred=True, durable=True, priority=7, subject="x")
    if ttl_ms is not None:
        theirs.ttl = ttl_ms / 1000
    for raw in (ours, theirs.encode()):  # ours, and proton's with more header and properties fields
        assert read(raw) == _by_proton(raw) == (PROPERTIES, ttl_ms, body)
        assert read(bytearray(raw)) == read(raw)  # (a large message comes as the buffer proton filled)


@READERS
def test_other_shapes_are_read_by_proton_and_refused_when_not_one_data_section(read: Read) -> None:
    data = message(application_properties(PROPERTIES), b"abc", 5000)
    footer = b"\x00\x53\x78\xc1\x01\x00"  # an empty footer map after the body
    assert read(data + footer) == (PROPERTIES, 5000, b"abc")
    for body in ("text", ["a", "list"], {"a": "map"}, None):
        with pytest.raises(ValueError, match="not one data section"):
            read(Message(body=body, properties=PROPERTIES).encode())
    short = data.replace(b"\x00\x53\x75\xa0\x03", b"\x00\x53\x75\xa0\x02")  # a length one short
    for odd in (data + b"\x00\x53\x75\xa0\x01z", data + b"\x00", short):  # a second data section, a stray byte
        assert read(odd) == _by_proton(odd)  # proton decides, as it did


@READERS
@pytest.mark.parametrize("mutate", [
    lambda raw: raw[:-1],  # the data section's length says one byte more than there is
    lambda raw: b"\x01" + raw[1:],  # not a section descriptor
    lambda raw: b"",
])
def test_bytes_that_are_not_such_a_message_are_refused(mutate: object, read: Read) -> None:
    raw = message(application_properties(PROPERTIES), b"abc", 5000)
    assert read(raw) == (PROPERTIES, 5000, b"abc")
    with pytest.raises(ValueError):
        read(mutate(raw))  # type: ignore[operator]


def test_a_reader_gives_each_message_its_own_properties() -> None:
    """Sections that differ in one value, in length or not at all, read in turns by one reader that
    keeps two: each message gets what proton reads of it; the same bytes give the same dict again."""
    sections = [PROPERTIES, {**PROPERTIES, "causeCode": 6}, {**PROPERTIES, "latitude": 51.9000002},
                {**PROPERTIES, "publicationId": "NL00001:if2-DENM-1.2.2"}, {}]
    reader = Reader(limit=2)
    for turn in range(3):
        for index, properties in enumerate(sections):
            raw = message(application_properties(properties), b"%d" % index, 1000 * (index + 1))
            assert reader.read(raw) == _by_proton(raw) == (properties, 1000 * (index + 1), b"%d" % index), (turn, index)
    raw = message(application_properties(PROPERTIES), b"x", None)
    assert reader.read(raw)[0] is reader.read(bytearray(raw))[0]
    bad = raw.replace(b"DENM:1.2.1", b"DENM:1.2\xff")  # a string that is not UTF-8
    with pytest.raises(ValueError, match="not an AMQP 1.0 message"):
        reader.read(bad)
    with pytest.raises(ValueError, match="not an AMQP 1.0 message"):
        read(bad)


@pytest.mark.skipif(bi_message._c_locate is None, reason="the broker's C scanner is not built (no compiler)")
def test_a_reader_finding_the_sections_in_c_reads_every_changed_byte_as_the_python_one() -> None:
    """Every byte of a message (and of proton's encoding of it) changed, and every cut: the reader
    that finds the sections with the C scanner gives what the one with ``scan_message`` gives, or
    refuses it alike (ValueError, never another error)."""
    ours = message(application_properties(PROPERTIES), b"abc", 5000)
    theirs = Message(body=b"abc", properties=PROPERTIES, inferred=True, durable=True, ttl=5).encode()
    python, c = Reader(accelerated=False), Reader(accelerated=True)

    def outcome(reader: Reader, raw: bytes) -> object:
        try:
            return reader.read(raw)
        except ValueError:
            return ValueError

    for raw in (ours, theirs):
        variants = [raw[:stop] for stop in range(len(raw))]
        variants += [raw[:at] + bytes([value]) + raw[at + 1:] for at in range(len(raw)) for value in (0x00, 0xFF, raw[at] ^ 1)]
        for variant in variants:
            assert outcome(c, variant) == outcome(python, variant), variant


def test_messages_of_a_read_are_byte_for_byte_each_message_alone() -> None:
    """:func:`bi_message.messages` puts each distinct header and section together once per batch: every
    message still gets its own section, ttl and body (sections shared or not, ttls equal or not, bodies
    either side of the data section's one-byte length, bytearray sections and bodies)."""
    a, b = application_properties({"messageType": "DENM", "n": 1}), application_properties({"messageType": "IVIM"})
    a_copy = bytearray(a)  # (equal bytes, another object)
    parts: list[tuple[Any, Any, int | None]] = [
        (a, b"x", 60_000), (a, b"y" * 255, 60_000), (a, b"z" * 256, 5_000), (b, b"w", 60_000), (a, b"v", None),
        (a_copy, bytearray(b"u" * 300), 60_000), (b, memoryview(b"t"), -5), (a, b"s", 2**33), (b, b"", None)]
    assert bi_message.messages(parts) == [message(section, body, ttl) for section, body, ttl in parts]
    assert all(type(raw) is bytes for raw in bi_message.messages(parts))
    assert [read(raw)[2] for raw in bi_message.messages(parts)][:3] == [b"x", b"y" * 255, b"z" * 256]
