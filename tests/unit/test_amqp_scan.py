"""Tests of the routing scanner (IP_008, IP_014/015, IP_016) against proton's own codec."""
from __future__ import annotations

import array
import os
import random
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import (
    Message,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

from interchange.broker import amqp_scan as amqp_scan_module
from interchange.broker.amqp_scan import AmqpDecimal, ScanError, ScannedMessage, header_durable, scan_message

# --- helpers -------------------------------------------------------------------------------------

#: One value of every AMQP simple type proton can put into application properties.
ALL_TYPES: dict[str, tuple[object, str]] = {
    "p_null": (None, "null"),
    "p_true": (True, "boolean"),
    "p_false": (False, "boolean"),
    "p_ubyte": (ubyte(200), "ubyte"),
    "p_ushort": (ushort(65000), "ushort"),
    "p_uint": (uint(4_000_000_000), "uint"),
    "p_uint_small": (uint(7), "uint"),
    "p_uint_zero": (uint(0), "uint"),
    "p_ulong": (ulong(2**64 - 1), "ulong"),
    "p_ulong_small": (ulong(9), "ulong"),
    "p_ulong_zero": (ulong(0), "ulong"),
    "p_byte": (byte(-128), "byte"),
    "p_short": (short(-32768), "short"),
    "p_int": (int32(-2_000_000_000), "int"),
    "p_int_small": (int32(-5), "int"),
    "p_long": (-(2**63), "long"),
    "p_long_small": (3, "long"),
    "p_float": (float32(1.25), "float"),
    "p_double": (50.2268645, "double"),
    "p_decimal32": (decimal32(0x32A0_0001), "decimal32"),
    "p_decimal64": (decimal64(0x3100_0000_0000_0007), "decimal64"),
    "p_decimal128": (decimal128(bytes(range(16))), "decimal128"),
    "p_char": (char("\U0001F600"), "char"),
    "p_timestamp": (timestamp(1_700_000_000_123), "timestamp"),
    "p_uuid": (uuid.UUID("12345678-1234-5678-1234-567812345678"), "uuid"),
    "p_binary": (b"\x00\xff\x10", "binary"),
    "p_string": ("Grüße ,HLN-TJA,", "string"),
    "p_symbol": (symbol("sym"), "symbol"),
}


def normalise(value: object) -> object:
    """proton's decoded value -> the scanner's convention (plain values, AmqpDecimal)."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, decimal32):
        return AmqpDecimal("decimal32", int(value).to_bytes(4, "big"))
    if isinstance(value, decimal64):
        return AmqpDecimal("decimal64", int(value).to_bytes(8, "big"))
    if isinstance(value, decimal128):
        return AmqpDecimal("decimal128", bytes(value))
    return value


def proton_decode(data: bytes) -> Message:
    message = Message()
    message.decode(data)
    return message


def assert_matches_proton(data: bytes, scanned: ScannedMessage) -> None:
    """The scan agrees with proton's full decode on everything it reports."""
    decoded = proton_decode(data)
    expected = {key: normalise(value) for key, value in (decoded.properties or {}).items()}
    assert scanned.application_properties == expected
    for key, value in scanned.application_properties.items():
        if scanned.application_property_types[key] == "boolean":
            assert type(value) is bool
        elif scanned.application_property_types[key] in ("string", "symbol", "char"):
            assert type(value) is str
    assert set(scanned.application_property_types) == set(expected)
    assert scanned.durable == bool(decoded.durable)
    assert scanned.priority == decoded.priority
    assert (scanned.ttl_ms or 0) == round(decoded.ttl * 1000)
    assert (scanned.absolute_expiry_time_ms or 0) == round(decoded.expiry_time * 1000)
    assert (scanned.creation_time_ms or 0) == round(decoded.creation_time * 1000)


# Hand encoders (AMQP 1.0 part 1.6) for encodings proton does not choose by itself.
def str8(text: str, code: int = 0xA1) -> bytes:
    raw = text.encode()
    return bytes([code, len(raw)]) + raw


def str32(text: str, code: int = 0xB1) -> bytes:
    raw = text.encode()
    return bytes([code]) + struct.pack(">I", len(raw)) + raw


def map8(*items: bytes, count: int | None = None) -> bytes:
    body = b"".join(items)
    n = len(items) if count is None else count
    return bytes([0xC1, len(body) + 1, n]) + body


def map32(*items: bytes, count: int | None = None) -> bytes:
    body = b"".join(items)
    n = len(items) if count is None else count
    return b"\xd1" + struct.pack(">II", len(body) + 4, n) + body


def list8(*items: bytes) -> bytes:
    body = b"".join(items)
    return bytes([0xC0, len(body) + 1, len(items)]) + body


def list32(*items: bytes) -> bytes:
    body = b"".join(items)
    return b"\xd0" + struct.pack(">II", len(body) + 4, len(items)) + body


def section(code: int, value: bytes) -> bytes:
    return bytes([0x00, 0x53, code]) + value


HEADER, DELIVERY_ANN, MESSAGE_ANN, PROPERTIES, APP_PROPS, DATA, SEQUENCE, VALUE, FOOTER = range(0x70, 0x79)
BODY = section(DATA, b"\xa0\x03abc")
NULL = b"\x40"


DENM_PROPERTIES = {
    "publisherId": "CZ00003",
    "publicationId": "CZ00003:denm-0001",
    "originatingCountry": "CZ",
    "protocolVersion": "DENM:1.3.1",
    "messageType": "DENM",
    "serviceType": ",HLN-TJA,",
    "baselineVersion": "1.8.0",
    "causeCode": int32(1),
    "subCauseCode": int32(4),
    "latitude": 50.2268645,
    "longitude": 14.4041937,
    "quadTree": ",120212302013111223,1202123020110,1202123020111,",
}


# --- agreement with proton -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ALL_TYPES))
def test_each_simple_type_matches_proton(name: str) -> None:
    value, amqp_type = ALL_TYPES[name]
    data = Message(body=b"x", inferred=True, properties={name: value}).encode()
    scanned = scan_message(data)
    assert scanned.application_property_types == {name: amqp_type}
    assert_matches_proton(data, scanned)


def test_all_types_in_one_map_match_proton() -> None:
    props = {name: value for name, (value, _) in ALL_TYPES.items()}
    data = Message(body=b"x", inferred=True, properties=props).encode()
    scanned = scan_message(data)
    assert scanned.application_property_types == {name: amqp_type for name, (_, amqp_type) in ALL_TYPES.items()}
    assert_matches_proton(data, scanned)
    assert scanned.application_properties["p_char"] == "\U0001F600"
    assert scanned.application_properties["p_float"] == 1.25
    assert isinstance(scanned.application_properties["p_uuid"], uuid.UUID)


def test_denm_with_header_and_properties_fields() -> None:
    data = Message(
        body=os.urandom(200),
        inferred=True,
        properties=DENM_PROPERTIES,
        durable=True,
        priority=7,
        ttl=648,
        creation_time=1_700_000_000.125,
        expiry_time=1_700_000_648.5,
        subject="subject",
        id="message-id",
        correlation_id=uuid.uuid4(),
        user_id=b"user",
        address="amqps://x/y",
        reply_to="back",
        content_type=symbol("application/octet-stream"),
        group_id="g",
        group_sequence=3,
        reply_to_group_id="rg",
    ).encode()
    scanned = scan_message(data)
    assert scanned.ttl_ms == 648_000
    assert scanned.durable is True
    assert scanned.priority == 7
    assert scanned.creation_time_ms == 1_700_000_000_125
    assert scanned.absolute_expiry_time_ms == 1_700_000_648_500
    assert scanned.application_property_types["causeCode"] == "int"
    assert scanned.application_property_types["latitude"] == "double"
    assert_matches_proton(data, scanned)


def test_defaults_without_header_fields() -> None:
    data = Message(body=b"x", inferred=True, properties={"a": "b"}).encode()
    scanned = scan_message(data)
    assert (scanned.ttl_ms, scanned.durable, scanned.priority) == (None, False, 4)
    assert (scanned.absolute_expiry_time_ms, scanned.creation_time_ms) == (None, None)


@pytest.mark.parametrize(
    "body, inferred, code",
    [
        (os.urandom(200), True, DATA),
        (os.urandom(500_000), True, DATA),
        (os.urandom(500_000), False, VALUE),  # amqp-value holding binary
        ("text body", False, VALUE),
        ({"k": [1, 2, {"nested": b"x"}]}, False, VALUE),
        ([1, "two", 3.0], True, SEQUENCE),
        ([os.urandom(300_000)], True, SEQUENCE),
    ],
    ids=["data-200", "data-500k", "value-binary-500k", "value-str", "value-map", "sequence", "sequence-big"],
)
def test_bodies_are_skipped_and_located(body: object, inferred: bool, code: int) -> None:
    data = Message(body=body, inferred=inferred, properties=DENM_PROPERTIES, ttl=1.2).encode()
    scanned = scan_message(data)
    assert_matches_proton(data, scanned)
    assert scanned.body_offset == scanned.application_properties_end
    assert data[scanned.body_offset : scanned.body_offset + 3] == bytes([0, 0x53, code])


def test_message_without_body_has_no_body_offset() -> None:
    data = Message(properties={"a": "b"}).encode()  # proton writes no body section for body=None
    scanned = scan_message(data)
    assert scanned.body_offset is None
    assert scanned.application_properties == {"a": "b"}


def test_application_properties_offsets_delimit_the_section() -> None:
    data = Message(body=b"payload", inferred=True, properties=DENM_PROPERTIES, annotations={symbol("x-opt-a"): 1}).encode()
    scanned = scan_message(data)
    start, end = scanned.application_properties_offset, scanned.application_properties_end
    assert data[start : start + 3] == b"\x00\x53\x74"
    # the section alone, followed by a body, scans to the same properties
    alone = scan_message(data[start:end] + BODY)
    assert alone.application_properties == scanned.application_properties
    assert alone.application_properties_offset == 0


def test_no_application_properties() -> None:
    data = Message(body=b"x", inferred=True, durable=True).encode()
    scanned = scan_message(data)
    assert scanned.application_properties == {}
    assert scanned.application_property_types == {}
    assert scanned.application_properties_offset is None
    assert scanned.application_properties_end is None
    assert scanned.durable is True


def test_empty_application_properties_map() -> None:
    data = Message(body=b"x", inferred=True, properties={}).encode()
    scanned = scan_message(data)
    assert scanned.application_properties == {}
    assert scanned.application_properties_offset is not None


def test_annotations_are_skipped() -> None:
    data = Message(
        body=b"x",
        inferred=True,
        instructions={symbol("x-opt-delivery"): "d" * 300},
        annotations={symbol("x-opt-jms-dest"): 1, symbol("x-opt-list"): [1, 2, 3]},
        properties={"messageType": "DENM"},
    ).encode()
    scanned = scan_message(data)
    assert scanned.application_properties == {"messageType": "DENM"}
    assert_matches_proton(data, scanned)


def test_input_kinds_give_the_same_result() -> None:
    data = Message(body=os.urandom(1000), inferred=True, properties=DENM_PROPERTIES, ttl=3).encode()
    expected = scan_message(data)
    assert scan_message(bytearray(data)) == expected
    assert scan_message(memoryview(data)) == expected
    framed = b"frame-prefix" + data + b"trailer"
    assert scan_message(memoryview(framed)[12 : 12 + len(data)]) == expected
    assert scan_message(memoryview(data).cast("c")) == expected
    assert scan_message(array.array("B", data)) == expected


# --- hand-encoded sections ------------------------------------------------------------------------


def test_map8_and_map32_application_properties() -> None:
    items = (str8("messageType"), str8("DENM"), str8("causeCode"), b"\x54\x05")
    for encoded in (map8(*items), map32(*items)):
        scanned = scan_message(section(APP_PROPS, encoded) + BODY)
        assert scanned.application_properties == {"messageType": "DENM", "causeCode": 5}
        assert scanned.application_property_types == {"messageType": "string", "causeCode": "int"}
        assert_matches_proton(section(APP_PROPS, encoded) + BODY, scanned)


def test_str32_sym32_vbin32_encodings() -> None:
    items = (str32("k1"), str32("v" * 10), str32("k2"), str32("s", 0xB3), str8("k3"), b"\xb0\x00\x00\x00\x02\x01\x02")
    scanned = scan_message(section(APP_PROPS, map32(*items)) + BODY)
    assert scanned.application_properties == {"k1": "v" * 10, "k2": "s", "k3": b"\x01\x02"}
    assert scanned.application_property_types == {"k1": "string", "k2": "symbol", "k3": "binary"}


def test_boolean_byte_encoding() -> None:
    items = (str8("t"), b"\x56\x01", str8("f"), b"\x56\x00")
    scanned = scan_message(section(APP_PROPS, map8(*items)) + BODY)
    assert scanned.application_properties == {"t": True, "f": False}
    assert type(scanned.application_properties["t"]) is bool


@pytest.mark.parametrize(
    "descriptor",
    [
        b"\x00\x80" + (0x74).to_bytes(8, "big"),  # ulong descriptor
        b"\x00" + str8("amqp:application-properties:map", 0xA3),  # sym8 descriptor
        b"\x00" + str32("amqp:application-properties:map", 0xB3),  # sym32 descriptor
    ],
    ids=["ulong", "sym8", "sym32"],
)
def test_alternative_section_descriptors(descriptor: bytes) -> None:
    data = section(HEADER, list8(b"\x41")) + descriptor + map8(str8("a"), str8("b")) + BODY
    scanned = scan_message(data)
    assert scanned.application_properties == {"a": "b"}
    assert scanned.durable is True
    if descriptor[1] == 0x80:  # proton-c reads numeric descriptors only and ignores symbolic ones
        assert_matches_proton(data, scanned)


def test_header_list32_with_all_fields_and_ubyte_ttl_forms() -> None:
    header = list32(b"\x56\x01", b"\x50\x09", b"\x52\x07", b"\x42", b"\x43")
    scanned = scan_message(section(HEADER, header) + BODY)
    assert (scanned.durable, scanned.priority, scanned.ttl_ms) == (True, 9, 7)
    header = list8(b"\x40", b"\x40", b"\x43")
    scanned = scan_message(section(HEADER, header) + BODY)
    assert (scanned.durable, scanned.priority, scanned.ttl_ms) == (False, 4, 0)


def test_short_properties_list_leaves_times_unset() -> None:
    props = list8(str8("id"), NULL, str8("to"))
    scanned = scan_message(section(PROPERTIES, props) + BODY)
    assert (scanned.absolute_expiry_time_ms, scanned.creation_time_ms) == (None, None)


def test_properties_list32_with_times_after_varied_fields() -> None:
    fields = [
        b"\x98" + uuid.uuid4().bytes,  # message-id uuid
        b"\xb0\x00\x00\x00\x01u",  # user-id vbin32
        str8("to"),
        NULL,
        str8("reply"),
        b"\x80" + (5).to_bytes(8, "big"),  # correlation-id ulong
        str8("ct", 0xA3),
        NULL,
        b"\x83" + (1234).to_bytes(8, "big"),
        b"\x83" + (-5).to_bytes(8, "big", signed=True),
        NULL,
    ]
    data = section(PROPERTIES, list32(*fields)) + BODY
    scanned = scan_message(data)
    assert (scanned.absolute_expiry_time_ms, scanned.creation_time_ms) == (1234, -5)
    assert_matches_proton(data, scanned)


def test_footer_after_body_is_ignored_and_footer_without_body_accepted() -> None:
    footer = section(FOOTER, map8(str8("x", 0xA3), str8("y")))
    scanned = scan_message(section(APP_PROPS, map8(str8("a"), NULL)) + BODY + footer)
    assert scanned.application_properties == {"a": None}
    scanned = scan_message(section(APP_PROPS, map8(str8("a"), NULL)) + footer)
    assert scanned.body_offset is None


def test_multiple_data_sections() -> None:
    data = section(APP_PROPS, map8(str8("a"), str8("b"))) + BODY + BODY
    scanned = scan_message(data)
    assert scanned.body_offset == len(data) - 2 * len(BODY)


# --- malformed input ----------------------------------------------------------------------------

AP = APP_PROPS


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty message"),
        (b"\x40", "expected a section"),
        (b"\x00\x53", "truncated"),
        (b"\x00\x53\x79\x40", "unknown section descriptor"),
        (b"\x00\x53\x6f\x40", "unknown section descriptor"),
        (b"\x00\x80" + (0x1_0000_0074).to_bytes(8, "big") + map8(), "unknown section descriptor"),
        (b"\x00" + str8("amqp:unknown:map", 0xA3) + map8(), "unknown section descriptor"),
        (b"\x00\xa1\x01x", "expected ulong or symbol"),
        (section(AP, b""), "has no value"),
        (section(AP, list8()), "must be a map"),
        (section(AP, NULL), "must be a map"),
        (section(AP, map8(str8("a"), list8(b"\x41"))), "is a list; application properties allow only simple types"),
        (section(AP, map8(str8("a"), b"\x45")), "is a list"),
        (section(AP, map8(str8("a"), map8(str8("b"), NULL))), "is a map"),
        (section(AP, map8(str8("a"), b"\xe0\x03\x02\x54\x01\x02")), "is a array"),
        (section(AP, map8(str8("a"), b"\x00\x53\x01\x40")), "described type, not allowed"),
        (section(AP, map8(str8("a"), b"\x99")), "invalid constructor 0x99"),
        (section(AP, map8(str8("k", 0xA3), NULL)), "is not a string (symbol)"),
        (section(AP, map8(b"\x54\x01", NULL)), "is not a string (constructor 0x54)"),
        (section(AP, map8(str8("k"), NULL, str8("k"), str8("v"))), "duplicate keys"),
        (section(AP, map8(b"\xa1\x02\xc3\x28", NULL)), "key at offset 6 is not valid UTF-8"),
        (section(AP, map8(str8("k"), b"\xa1\x01\xff")), "not valid UTF-8"),
        (section(AP, map8(str8("k"), b"\xb1\x00\x00\x00\x01\xff")), "not valid UTF-8"),
        (section(AP, map8(str8("k"), b"\xa3\x01\xe9")), "not valid ASCII"),
        (section(AP, map8(str8("k"), b"\x56\x02")), "neither 0x00 nor 0x01"),
        (section(AP, map8(str8("k"), b"\x73\x00\x11\x00\x00")), "not a Unicode scalar value"),
        (section(AP, map8(str8("k"), b"\x73\x00\x00\xd8\x00")), "not a Unicode scalar value"),
        (section(AP, map8(str8("k"), NULL, count=3)), "odd element count"),
        (section(AP, map8(str8("k"), count=2)), "no value before the end of the map"),
        (section(AP, map8(str8("k"), NULL, str8("x"), NULL, count=2)), "entries end at offset"),
        (section(AP, map8(str8("k"), b"\x71\x00\x00")), "runs past the end of the map"),
        (section(AP, map8(str8("k"), b"\xa1\x05ab")), "runs past the end of the map"),
        (section(AP, map8(str8("k"), b"\xb1\x00\x00")), "runs past the end of the map"),
        (section(AP, map8(b"\xa1\x09ab", NULL)), "runs past the end of the map"),
        (section(AP, map8(b"\xb1\x00\x00", NULL)), "key at offset 6 is truncated"),
        (section(AP, b"\xd1\x00\x00\x00\x08\xff\xff\xff\xfe" + str8("k") + NULL), "declares 4294967294 elements"),
        (section(AP, b"\xd1\xff\xff\xff\xff\x00\x00\x00\x02"), "past the end of the message"),
        (section(AP, b"\xd1\x00\x00\x00\x02\x00\x00"), "truncated"),
        (section(AP, b"\xd1\x00\x00\x00\x02\x00\x00\x00\x00"), "too small for its count"),
        (section(AP, b"\xc1\x00\x00"), "too small for its count"),
        (section(AP, b"\xc1\x05\x02"), "past the end of the message"),
        (section(AP, map8()) + section(AP, map8()), "repeated or out of order"),
        (section(PROPERTIES, list8()) + section(HEADER, list8()), "header section at offset 6 is repeated or out of order"),
        (section(HEADER, list8(str8("yes"))), "header durable at offset 6 has constructor 0xa1"),
        (section(HEADER, list8(b"\x41", b"\x54\x01")), "header priority"),
        (section(HEADER, list8(b"\x41", b"\x50\x01", b"\x71\x00\x00\x00\x01")), "header ttl"),
        (section(HEADER, list8(b"\x41", b"\x50")), "runs past the end"),
        (section(HEADER, b"\xc0\x01\x05"), "declares 5 elements in 0 bytes"),
        (section(HEADER, map8()), "must be a list"),
        (section(PROPERTIES, list8(*[NULL] * 8, str8("not-a-time"))), "absolute-expiry-time"),
        (section(PROPERTIES, list8(*[NULL] * 9, b"\x71\x00\x00\x00\x00")), "creation-time"),
        (section(PROPERTIES, list8(b"\x99", *[NULL] * 8)), "invalid constructor 0x99"),
        (section(MESSAGE_ANN, list8()), "must be a map"),
        (section(DATA, str8("text")), "must hold binary"),
        (section(DATA, b"\xa0\x05ab"), "past the end"),
        (section(DATA, b"\xb0\x7f\xff\xff\xff"), "past the end"),
        (section(SEQUENCE, map8()), "must be a list"),
        (section(VALUE, b"\xa1\x09"), "past the end"),
        (section(VALUE, b"\x00\x00\x00"), "past the end"),
        (section(FOOTER, map8()) + section(AP, map8()), "footer section at offset 0 is not the last section"),
    ],
)
def test_malformed_messages_raise_scan_error(data: bytes, reason: str) -> None:
    with pytest.raises(ScanError) as info:
        scan_message(data)
    assert reason in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ScanError) as from_view:  # same reason and offsets from a memoryview
        scan_message(memoryview(bytearray(data)))
    assert str(from_view.value) == str(info.value)


def test_every_prefix_of_a_message_is_either_a_section_boundary_or_an_error() -> None:
    data = Message(body=os.urandom(300), inferred=True, properties=DENM_PROPERTIES, ttl=5, durable=True).encode()
    full = scan_message(data)
    header_end = 5 + data[4]  # 00 53 70 c0 <size>
    boundaries = {header_end, full.application_properties_offset, full.application_properties_end}
    for length in range(len(data)):
        try:
            scanned = scan_message(data[:length])
        except ScanError:
            assert length not in boundaries
        else:
            assert length in boundaries
            if length == full.application_properties_end:
                assert scanned.application_properties == full.application_properties
                assert scanned.body_offset is None


def test_non_bytes_like_input_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        scan_message("not bytes")  # type: ignore[arg-type]


# --- property-based ------------------------------------------------------------------------------

_keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(0, 255).map(ubyte),
    st.integers(0, 2**16 - 1).map(ushort),
    st.integers(0, 2**32 - 1).map(uint),
    st.integers(0, 2**64 - 1).map(ulong),
    st.integers(-128, 127).map(byte),
    st.integers(-(2**15), 2**15 - 1).map(short),
    st.integers(-(2**31), 2**31 - 1).map(int32),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32, allow_nan=False).map(float32),
    st.floats(allow_nan=False),
    st.integers(0, 2**32 - 1).map(decimal32),
    st.integers(0, 2**64 - 1).map(decimal64),
    st.binary(min_size=16, max_size=16).map(decimal128),
    st.characters(blacklist_categories=("Cs",)).map(char),
    st.integers(-(2**63), 2**63 - 1).map(timestamp),
    st.uuids(),
    st.binary(max_size=300),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=300).map(symbol),
)


@settings(max_examples=300, deadline=None)
@given(props=st.dictionaries(_keys, _values, max_size=20), body=st.binary(max_size=2000), ttl=st.integers(0, 10**6))
def test_random_property_maps_match_proton(props: dict, body: bytes, ttl: int) -> None:
    data = Message(body=body, inferred=True, properties=props, ttl=ttl / 1000).encode()
    scanned = scan_message(data)
    assert_matches_proton(data, scanned)


def _denm_bytes() -> bytes:
    return Message(
        body=bytes(range(256)),
        inferred=True,
        properties={**DENM_PROPERTIES, "extra": uuid.UUID(int=7), "c": char("x"), "d": decimal64(5)},
        annotations={symbol("x-opt-a"): [1, 2]},
        ttl=9,
        durable=True,
        creation_time=1.5,
    ).encode()


_SAMPLE = _denm_bytes()


def _scan_or_error(data: bytes) -> None:
    try:
        result = scan_message(data)
    except ScanError as exc:
        assert str(exc)
    else:
        assert isinstance(result.application_properties, dict)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, len(_SAMPLE)), position=st.integers(0, len(_SAMPLE) - 1), byte_value=st.integers(0, 255))
def test_truncated_and_mutated_bytes_raise_only_scan_error(cut: int, position: int, byte_value: int) -> None:
    _scan_or_error(_SAMPLE[:cut])
    mutated = bytearray(_SAMPLE)
    mutated[position] = byte_value
    _scan_or_error(bytes(mutated))
    _scan_or_error(bytes(mutated[:cut]))


@settings(max_examples=500, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(_SAMPLE)), st.sampled_from(["insert", "delete", "set"]), st.binary(min_size=1, max_size=5)),
        max_size=6,
    )
)
def test_random_edits_raise_only_scan_error(edits: list) -> None:
    data = bytearray(_SAMPLE)
    for position, kind, chunk in edits:
        position = min(position, len(data))
        if kind == "insert":
            data[position:position] = chunk
        elif kind == "delete":
            del data[position : position + len(chunk)]
        else:
            data[position : position + len(chunk)] = chunk
    _scan_or_error(bytes(data))


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_raise_only_scan_error(data: bytes) -> None:
    _scan_or_error(data)
    _scan_or_error(b"\x00\x53\x74" + data)
    _scan_or_error(b"\x00\x53\x74\xd1" + data)


def _with_header(header: bytes, body: bytes = b"\x00\x53\x75\xa0\x01x") -> bytes:
    return b"\x00\x53\x70" + header + body


@pytest.mark.parametrize("raw", [
    Message(body=b"x", durable=True).encode(), Message(body=b"x", durable=False, ttl=5.0).encode(),
    Message(body=b"x", durable=True, priority=7, ttl=1.0).encode(), Message(body=b"x").encode(),
    _with_header(b"\x45"),  # list0: no field
    _with_header(b"\xc0\x01\x00"),  # list8 of no field
    _with_header(b"\xc0\x02\x01\x41"), _with_header(b"\xc0\x02\x01\x42"), _with_header(b"\xc0\x02\x01\x40"),
    _with_header(b"\xc0\x03\x01\x56\x01"), _with_header(b"\xc0\x03\x01\x56\x00"),  # boolean with its byte
    _with_header(b"\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x41"),  # list32
    _with_header(b"\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x42"),
    b"\x00\x80\x00\x00\x00\x00\x00\x00\x00\x70\xc0\x02\x01\x41\x00\x53\x75\xa0\x01x",  # ulong descriptor
])
def test_header_durable_is_the_scanners_durable(raw: bytes) -> None:
    """The broker's glance at the header (a durable message is stored) says what the full scan says."""
    assert header_durable(raw) is scan_message(raw, decode_properties=False).durable


@pytest.mark.skipif(amqp_scan_module.quick_header_durable is header_durable, reason="the C accelerator is not built")
def test_the_quick_header_durable_is_header_durable_on_any_bytes() -> None:
    """The C reading of the usual header encodings (``_admit.durable``) gives header_durable's answer, or
    header_durable's exception, on real messages, their headers cut short, every byte of the header
    changed and random bytes; a bytearray and an unusual encoding are header_durable's own."""
    rng = random.Random(7)
    seeds = []
    for durable in (True, False):
        for ttl in (None, 5.0):
            message = Message(body=b"x", durable=durable)
            if ttl is not None:
                message.ttl = ttl
            seeds.append(message.encode())
    seeds += [b"", b"\x00", b"\x00\x53\x70", b"\x00\x53\x70\x45", b"\x00\x53\x70\xc0\x01\x00",
              b"\x00\x53\x70\xc0\x02\x01\x41", b"\x00\x53\x70\xc0\x02\x01\x56", b"\x00\x80" + bytes(8) + b"\x70",
              b"\x00\x53\x75\xa0\x01x"]
    cases = list(seeds)
    for seed in seeds:
        cases += [seed[:n] for n in range(len(seed))]
        cases += [seed[:i] + bytes([b]) + seed[i + 1:] for i in range(min(len(seed), 8))
                  for b in (0, 0x40, 0x41, 0x42, 0x45, 0xc0, 0xff)]
    cases += [bytes(rng.randrange(256) for _ in range(rng.randrange(12))) for _ in range(2000)]
    cases += [b"\x00\x53\x70" + bytes(rng.randrange(256) for _ in range(rng.randrange(10))) for _ in range(2000)]
    for raw in cases:
        for data in (raw, bytearray(raw)):
            try:
                expected: object = header_durable(data)
            except Exception as exc:  # (the same exception is what is checked)
                expected = type(exc)
            try:
                got: object = amqp_scan_module.quick_header_durable(data)
            except Exception as exc:
                got = type(exc)
            assert got == expected, raw
