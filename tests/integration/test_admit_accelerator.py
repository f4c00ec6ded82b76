"""The C accelerator of admission (interchange.broker._admit) against the pure-Python path.

The Python path (amqp_scan + validation) is the reference: for every message, the accelerated
Admission must give the same outcome (same properties with the same value types, same expiry,
same Rejected description and condition), and the C function itself must decode the same
properties, reach the same verdict and read the same ttl / absolute-expiry-time, or answer
None ("not handled here") — which it may only do for input it is documented to leave to Python.
"""
from __future__ import annotations

import math
import os
import struct
import sys
import uuid

import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
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

from interchange.broker import _admit  # must be built: a broken build fails here, loudly
from interchange.broker.admission import PURE_PYTHON_ENV, Admission, accelerator_available
from interchange.broker.amqp_scan import ScanError, decode_application_properties, scan_message
from interchange.broker.engine import Rejected
from interchange.broker.ttl_policy import TtlPolicy
from interchange.broker.validation import MESSAGE_TYPES, validate_application_properties

NOW = 1_700_000_000_000
QT = ",120212302013111223,1202123020110,"
#: AMQP types the C module leaves to Python (it returns None for a message carrying one).
UNHANDLED_TYPES = {"char", "uuid", "decimal32", "decimal64", "decimal128"}
POLICIES = [TtlPolicy(), TtlPolicy(maximum_ttl_ms=60_000, repetition_interval_ms={"DENM": 1_000}, minimum_ttl_ms=0)]


def valid_properties(message_type: str = "DENM") -> dict[str, object]:
    props: dict[str, object] = {
        "publisherId": "DE15608",
        "publicationId": f"DE15608:{message_type}-1",
        "originatingCountry": "DE",
        "protocolVersion": f"{message_type}:1.3.1",
        "messageType": message_type,
        "baselineVersion": "1.8.0",
        "quadTree": QT,
        "latitude": 52.52,
        "longitude": float32(13.5),
    }
    props.update({
        "DENM": {"causeCode": int32(1), "subCauseCode": int32(4), "serviceType": ",HLN-TJA,"},
        "IVIM": {"iviStatus": ubyte(0), "iviType": ",1,0,-2,", "pictogramCategoryCode": ",557,",
                 "iviContainer": ",giv,tc,"},
        "SPATEM": {"id": ",5-57,5-59,", "name": ",Main street,-1,"},
        "MAPEM": {"id": ",5-57,"},
        "SREM": {"id": ",6-12,"},
        "SSEM": {"name": ",x,"},
        "CAM": {"stationType": short(5), "vehicleRole": ulong(15)},
        "CPM": {"type": "Vehicle"},
        "POIM-PA": {"shardId": 2, "shardCount": uint(3)},
    }[message_type])
    return props


def note(text: str) -> None:
    """Count what the generated cases exercise: pytest --hypothesis-show-statistics."""
    if currently_in_test_context():
        event(text)


# --- comparing outcomes --------------------------------------------------------------------------


def typed(props: dict) -> list[tuple[str, str, str]]:
    """A dict as (key, value type, value) triples: 1 != True, 1.0 != 1, NaN == NaN, order kept."""
    out = []
    for key, value in props.items():
        text = value.hex() if isinstance(value, float) else repr(value)
        out.append((key, type(value).__name__, text))
    return out


def outcome(admission: Admission, raw, shard_count: int | None) -> tuple:
    try:
        message = admission.admit(raw, "pub", False, shard_count, NOW)
    except Rejected as exc:
        return ("rejected", exc.description, exc.condition)
    assert message.raw is raw
    return ("admitted", typed(message.properties), message.expiry_ms, message.shard_key, message.size)


def assert_same_outcome(raw, shard_count: int | None = None, policy: TtlPolicy = POLICIES[0]) -> tuple:
    # fresh instances: the Python path's cache must not carry one message's result to another
    accelerated = Admission(policy, accelerated=True)
    pure = Admission(policy, accelerated=False)
    expected = outcome(pure, raw, shard_count)
    assert outcome(accelerated, raw, shard_count) == expected
    note(f"outcome: {expected[0]}")
    return expected


def check_c(raw, shard_count: int | None = None, *, must_handle: bool = False) -> tuple | None:
    """_admit.admit against scan_message + decode_application_properties + validate (the reference)."""
    result = _admit.admit(raw, shard_count)
    try:
        scanned = scan_message(raw, decode_properties=False)
        start, end = scanned.application_properties_offset, scanned.application_properties_end
        if start is None:
            props, types = {}, {}
        else:
            props, types = decode_application_properties(raw, start, end)
    except ScanError:
        assert result is None, "C accepted a message the reference finds malformed"
        return None
    if result is None:
        if must_handle:
            big_capability = shard_count is not None and not -(2**63) <= shard_count < 2**63
            assert UNHANDLED_TYPES & set(types.values()) or big_capability, "C left a plain message to Python"
        note("C: not handled")
        return None
    c_props, valid, ttl, absolute = result
    note(f"C: valid={valid}")
    assert typed(c_props) == typed(props)
    assert type(valid) is bool
    assert valid == (validate_application_properties(props, types, capability_shard_count=shard_count) == [])
    assert (ttl, absolute) == (scanned.ttl_ms, scanned.absolute_expiry_time_ms)
    return result


# --- the accelerator is built and used -----------------------------------------------------------


def test_accelerator_is_built_and_in_use() -> None:
    """Fails when the C extension did not build (setup.py marks it optional) or is not used."""
    assert _admit.admit is not None
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        assert not Admission(TtlPolicy()).accelerated
    else:
        assert accelerator_available()
        assert Admission(TtlPolicy()).accelerated


def test_environment_variable_and_argument_select_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    assert not Admission(TtlPolicy()).accelerated
    assert Admission(TtlPolicy(), accelerated=True).accelerated
    monkeypatch.setenv(PURE_PYTHON_ENV, "0")
    assert Admission(TtlPolicy()).accelerated
    monkeypatch.delenv(PURE_PYTHON_ENV)
    assert Admission(TtlPolicy()).accelerated
    assert not Admission(TtlPolicy(), accelerated=False).accelerated


def test_valid_message_is_admitted_by_c_without_the_python_path() -> None:
    admission = Admission(TtlPolicy(), accelerated=True)
    raw = Message(body=b"x", properties=valid_properties(), inferred=True).encode()
    message = admission.admit(raw, "a", False, None, 1_000)
    assert (admission.cache_misses, admission.cache_hits) == (0, 0)  # Python never ran
    assert message.expiry_ms == 1_000 + 648_000
    assert message.properties["causeCode"] == 1 and type(message.properties["longitude"]) is float


def test_invalid_message_is_worded_by_the_python_path() -> None:
    admission = Admission(TtlPolicy(), accelerated=True)
    raw = Message(body=b"x", properties={**valid_properties(), "causeCode": "1"}, inferred=True).encode()
    assert _admit.admit(raw, None)[1] is False
    for _ in range(2):
        with pytest.raises(Rejected) as excinfo:
            admission.admit(raw, "a", False, None, 0)
        assert excinfo.value.description == (
            "invalid application properties: causeCode: must be an integer, got AMQP string (IP_026)"
        )
    assert (admission.cache_misses, admission.cache_hits) == (1, 1)  # repeated rejections stay cheap


@pytest.mark.parametrize("message_type", sorted(MESSAGE_TYPES))
def test_valid_set_of_each_message_type(message_type: str) -> None:
    raw = Message(body=b"x", properties=valid_properties(message_type), inferred=True).encode()
    result = check_c(raw, 3, must_handle=True)
    assert result is not None and result[1] is True
    assert assert_same_outcome(raw, 3)[0] == "admitted"


# --- hand-made cases -----------------------------------------------------------------------------


def str8(text: str, code: int = 0xA1) -> bytes:
    raw = text.encode()
    return bytes([code, len(raw)]) + raw


def str32(text: str, code: int = 0xB1) -> bytes:
    raw = text.encode()
    return bytes([code]) + struct.pack(">I", len(raw)) + raw


def map8(*items: bytes, count: int | None = None) -> bytes:
    body = b"".join(items)
    return bytes([0xC1, len(body) + 1, len(items) if count is None else count]) + body


def list8(*items: bytes) -> bytes:
    body = b"".join(items)
    return bytes([0xC0, len(body) + 1, len(items)]) + body


def section(code: int, value: bytes) -> bytes:
    return bytes([0x00, 0x53, code]) + value


HEADER, DELIVERY_ANN, MESSAGE_ANN, PROPERTIES, APP_PROPS, DATA, SEQUENCE, VALUE, FOOTER = range(0x70, 0x79)
NULL = b"\x40"
BODY = section(DATA, b"\xa0\x03abc")
#: the valid DENM as hand-encoded map entries (str8 keys and values, smallint codes)
DENM_ENTRIES = [
    str8("publisherId"), str8("DE15608"),
    str8("originatingCountry"), str8("DE"),
    str8("protocolVersion"), str8("DENM:1"),
    str8("messageType"), str8("DENM"),
    str8("quadTree"), str8(QT),
    str8("causeCode"), b"\x54\x01",
    str8("subCauseCode"), b"\x54\x00",
]
DENM_MAP = map8(*DENM_ENTRIES)


def with_entries(*extra: bytes) -> bytes:
    return section(APP_PROPS, map8(*DENM_ENTRIES, *extra)) + BODY


HANDLED = [
    pytest.param(section(APP_PROPS, DENM_MAP) + BODY, id="map8"),
    pytest.param(section(APP_PROPS, DENM_MAP), id="no-body"),
    pytest.param(section(HEADER, b"\x45") + section(APP_PROPS, DENM_MAP) + BODY, id="header-list0"),
    pytest.param(section(HEADER, list8(b"\x41", b"\x50\x09", b"\x52\x07")) + section(APP_PROPS, DENM_MAP) + BODY,
                 id="header-smalluint-ttl"),
    pytest.param(section(HEADER, list8(b"\x56\x01", NULL, b"\x43")) + section(APP_PROPS, DENM_MAP) + BODY,
                 id="header-uint0-ttl"),
    pytest.param(section(HEADER, list8(b"\x42", NULL, NULL, b"\x71\x00\x00\x00\x01")) + section(APP_PROPS, DENM_MAP),
                 id="header-rest-unchecked"),
    pytest.param(section(PROPERTIES, list8(*[NULL] * 8, b"\x83" + (NOW + 5).to_bytes(8, "big"), NULL))
                 + section(APP_PROPS, DENM_MAP) + BODY, id="absolute-expiry"),
    pytest.param(section(PROPERTIES, list8(*[NULL] * 8, NULL, b"\x83" + (7).to_bytes(8, "big")))
                 + section(APP_PROPS, DENM_MAP) + BODY, id="creation-time-only"),
    pytest.param(section(PROPERTIES, list8(b"\x00\x53\x01\xa1\x01x", *[NULL] * 7, b"\x83" + (-5).to_bytes(8, "big", signed=True)))
                 + section(APP_PROPS, DENM_MAP) + BODY, id="described-field-skipped"),
    pytest.param(section(DELIVERY_ANN, map8()) + section(MESSAGE_ANN, map8(str8("x", 0xA3), list8()))
                 + section(APP_PROPS, DENM_MAP) + BODY, id="annotations"),
    pytest.param(section(APP_PROPS, DENM_MAP) + section(DATA, b"\xb0\x00\x00\x00\x01z"), id="vbin32-body"),
    pytest.param(section(APP_PROPS, DENM_MAP) + section(SEQUENCE, b"\x45"), id="sequence-list0"),
    pytest.param(section(APP_PROPS, DENM_MAP) + section(VALUE, b"\x00\x53\x01\xa1\x01x"), id="described-value-body"),
    pytest.param(section(APP_PROPS, DENM_MAP) + BODY + b"\xff\xff trailing bytes are not read", id="after-body"),
    pytest.param(section(APP_PROPS, DENM_MAP) + section(FOOTER, map8()), id="footer-without-body"),
    pytest.param(section(FOOTER, map8()), id="footer-only"),
    pytest.param(BODY, id="body-only"),
    pytest.param(section(APP_PROPS, map8()) + BODY, id="empty-map"),
    pytest.param(with_entries(str32("publicationId"), str32("DE15608:x")), id="str32"),
    pytest.param(with_entries(str8("custom-a-b"), b"\x56\x00", str8("custom-é-\n"), b"\x56\x01"), id="boolean-byte"),
    pytest.param(with_entries(str8("custom-a-b"), b"\xb3\x00\x00\x00\x02ab", str8("custom-a-c"), b"\xa0\x00"),
                 id="sym32-vbin8"),
    pytest.param(with_entries(str8("shardId"), b"\x80" + (2**64 - 1).to_bytes(8, "big")), id="huge-shard-id"),
    pytest.param(with_entries(str8("shardId"), b"\x80" + (2**63).to_bytes(8, "big"), str8("shardCount"), b"\x52\x05"),
                 id="huge-shard-id-with-count"),
    pytest.param(with_entries(str8("custom-x-y"), b"\x83" + (2**64 - 1).to_bytes(8, "big")), id="timestamp"),
    pytest.param(with_entries(str8("latitude"), b"\x72\x7f\xc0\x00\x00"), id="float32-nan"),
    pytest.param(with_entries(str8("custom-x-y"), b"\x72\x7f\xc0\x00\x01"), id="float32-nan-custom"),
    pytest.param(with_entries(str8("longitude"), b"\x82" + struct.pack(">d", 180.0)), id="double-edge"),
    pytest.param(with_entries(str8("causeCode"), b"\x54\xff"), id="duplicate-standard-is-bail"),
]


@pytest.mark.parametrize("raw", HANDLED)
@pytest.mark.parametrize("shard_count", [None, 5])
def test_hand_encoded_messages(raw: bytes, shard_count: int | None) -> None:
    check_c(raw, shard_count)
    assert_same_outcome(raw, shard_count)


BAIL = [
    pytest.param(b"", "rejected", id="empty"),
    pytest.param(b"\x00\x80" + (APP_PROPS).to_bytes(8, "big") + DENM_MAP, "admitted", id="ulong-descriptor"),
    pytest.param(b"\x00" + str8("amqp:application-properties:map", 0xA3) + DENM_MAP, "admitted", id="symbolic-descriptor"),
    pytest.param(with_entries(str8("custom-a-b"), b"\x98" + bytes(16)), "admitted", id="uuid"),
    pytest.param(with_entries(str8("custom-a-b"), b"\x73\x00\x00\x00\x41"), "admitted", id="char"),
    pytest.param(with_entries(str8("custom-a-b"), b"\x74" + bytes(4)), "admitted", id="decimal32"),
    pytest.param(with_entries(str8("custom-a-b"), b"\x84" + bytes(8)), "admitted", id="decimal64"),
    pytest.param(with_entries(str8("custom-a-b"), b"\x94" + bytes(16)), "admitted", id="decimal128"),
    pytest.param(with_entries(str8("custom-a-b"), b"\x00\x53\x01\x40"), "rejected", id="described-value"),
    pytest.param(with_entries(str8("custom-a-b"), b"\x45"), "rejected", id="list-value"),
    pytest.param(with_entries(str8("custom-a-b"), NULL, str8("custom-a-b"), NULL), "rejected", id="duplicate-keys"),
    pytest.param(with_entries(str8("causeCode"), b"\x54\x02"), "rejected", id="duplicate-standard-key"),
    pytest.param(with_entries(str8("custom-a-b", 0xA3), NULL), "rejected", id="symbol-key"),
    pytest.param(with_entries(b"\x54\x01", NULL), "rejected", id="int-key"),
    pytest.param(with_entries(b"\xa1\x02\xc3\x28", NULL), "rejected", id="invalid-utf8-key"),
    pytest.param(with_entries(str8("custom-a-b"), b"\xa1\x02\xed\xa0"), "rejected", id="invalid-utf8-value"),
    pytest.param(with_entries(str8("quadTree"), b"\xa1\x03,\xff,"), "rejected", id="invalid-utf8-standard-value"),
    pytest.param(with_entries(str8("custom-a-b"), b"\xa3\x01\xe9"), "rejected", id="non-ascii-symbol"),
    pytest.param(with_entries(str8("custom-a-b"), b"\x56\x02"), "rejected", id="boolean-byte-2"),
    pytest.param(section(APP_PROPS, map8(*DENM_ENTRIES, str8("k"), count=len(DENM_ENTRIES) + 1)), "rejected", id="odd-count"),
    pytest.param(section(APP_PROPS, DENM_MAP) + section(APP_PROPS, map8()), "rejected", id="repeated-section"),
    pytest.param(section(APP_PROPS, DENM_MAP) + section(HEADER, b"\x45"), "rejected", id="out-of-order"),
    pytest.param(section(HEADER, list8(b"\x41", b"\x50\x01", b"\x71\x00\x00\x00\x01")) + section(APP_PROPS, DENM_MAP),
                 "rejected", id="int-ttl"),
    pytest.param(section(PROPERTIES, list8(*[NULL] * 8, str8("x"))) + section(APP_PROPS, DENM_MAP), "rejected",
                 id="string-expiry"),
    pytest.param(section(APP_PROPS, DENM_MAP) + section(FOOTER, map8()) + b"\x00", "rejected", id="footer-not-last"),
    pytest.param(section(APP_PROPS, DENM_MAP) + section(DATA, b"\xa0\x05ab"), "rejected", id="short-body"),
    pytest.param(section(APP_PROPS, DENM_MAP)[:-1], "rejected", id="truncated"),
]


@pytest.mark.parametrize("raw, expected", BAIL)
def test_bail_out_cases_return_none_and_python_decides(raw: bytes, expected: str) -> None:
    assert _admit.admit(raw, None) is None
    check_c(raw)
    assert assert_same_outcome(raw)[0] == expected


def test_capability_shard_count_that_is_no_small_int_is_left_to_python() -> None:
    raw = with_entries(str8("shardId"), b"\x54\x02")
    for capability in (2**63, -(2**63) - 1, 2**100, 3.0, "3"):
        assert _admit.admit(raw, capability) is None
    assert assert_same_outcome(raw, 2**100)[0] == "admitted"
    assert assert_same_outcome(raw, 2**63 - 1)[0] == "admitted"
    assert assert_same_outcome(raw, 1)[0] == "rejected"


def test_input_kinds() -> None:
    raw = Message(body=b"x", properties=valid_properties(), inferred=True).encode()
    expected = _admit.admit(raw, None)
    assert expected is not None and expected[1]
    for kind in (bytearray(raw), memoryview(raw), memoryview(bytearray(raw)).toreadonly()):
        assert typed(_admit.admit(kind, None)[0]) == typed(expected[0])
        assert assert_same_outcome(kind)[0] == "admitted"
    assert _admit.admit(memoryview(raw + raw)[::2], None) is None  # not contiguous: Python decides
    assert _admit.admit("text", None) is None
    with pytest.raises(TypeError):
        _admit.admit(raw)  # type: ignore[call-arg]


# --- property-based: generated property maps -------------------------------------------------------

_INT_TYPES = [(byte, -(2**7), 2**7 - 1), (short, -(2**15), 2**15 - 1), (int32, -(2**31), 2**31 - 1),
              (int, -(2**63), 2**63 - 1), (ubyte, 0, 2**8 - 1), (ushort, 0, 2**16 - 1), (uint, 0, 2**32 - 1),
              (ulong, 0, 2**64 - 1)]
_EDGE_INTS = [-(2**63), -(2**31) - 1, -(2**31), -129, -2, -1, 0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 255, 256,
              2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1]


@st.composite
def amqp_ints(draw, values=st.one_of(st.sampled_from(_EDGE_INTS), st.integers(-3, 300),
                                     st.integers(-(2**63), 2**64 - 1))) -> object:
    value = draw(values)
    wrapper = draw(st.sampled_from([w for w, low, high in _INT_TYPES if low <= value <= high]))
    return wrapper(value)


_floats = st.one_of(
    st.floats(-200, 200).map(lambda v: v),
    st.sampled_from([math.nan, math.inf, -math.inf, 180.0, -180.0, 90.0, -90.0, 90.00000000000001, -0.0]),
    st.floats(),
    st.floats(width=32).map(float32),
    st.sampled_from([90.0, -180.0, math.nan, 1e39]).map(lambda v: float32(v if v < 1e38 else math.inf)),
)
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24)
_any_value = st.one_of(
    st.none(), st.booleans(), amqp_ints(), _floats, _text, st.binary(max_size=20),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=10).map(symbol),
    st.integers(-(2**63), 2**63 - 1).map(timestamp),
)
_unhandled_value = st.one_of(
    st.uuids(), st.characters(blacklist_categories=("Cs",)).map(char),
    st.integers(0, 2**32 - 1).map(decimal32), st.integers(0, 2**64 - 1).map(decimal64),
    st.binary(min_size=16, max_size=16).map(decimal128),
)


def _from(alphabet: str, max_size: int = 12) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, max_size=max_size)


_quadtrees = st.one_of(
    st.lists(st.text(alphabet="0123", min_size=1, max_size=22), min_size=1, max_size=5).map(lambda t: "," + ",".join(t) + ","),
    st.lists(st.text(alphabet="0123", min_size=17, max_size=19), min_size=1, max_size=3).map(lambda t: "," + ",".join(t) + ","),
    _from(",0123", 40), _from(",01234 é", 30),
    st.sampled_from([",", ",,", "", QT, QT[:-1], QT[1:], QT + ",", QT.replace("1", "4", 1)]),
)
_comma_lists = st.one_of(_from(",ab-1é", 10), st.sampled_from([",", ",,", ",a,", ",a,,b,", "a,", ",a", ",-1,", ""]))
_integer_lists = st.one_of(_from(",-019a+ ", 12), st.sampled_from([",1,", ",-1,", ",--1,", ",1-,", ",1,,2,", ",٣,", ",,"]))
_publisher_ids = st.one_of(
    st.from_regex(r"[A-Z]{2}[0-9]{1,6}", fullmatch=True), _from("ADZaz09é", 8),
    st.sampled_from(["DE16383", "DE16384", "DE00000", "DE0016383", "DE", "D1", "DE١"]),
)
_countries = st.one_of(_from("ADZaz1É", 3), st.sampled_from(["DE", "de", "D", "DEU", ""]))
_message_types = st.one_of(st.sampled_from(sorted(MESSAGE_TYPES)), st.sampled_from(["denm", "DENMX", "", "POIM"]))

#: standard name -> a strategy of the right kind (mostly), with values around its rule's edges
_NAMED: dict[str, st.SearchStrategy] = {
    "publisherId": _publisher_ids,
    "publicationId": st.one_of(_from("DE15608:x", 12), st.sampled_from(["DE15608:1", "DE15608:", ":1", "DE15608", "DE1:1"])),
    "originatingCountry": _countries,
    "protocolVersion": st.one_of(st.just(""), _text),
    "baselineVersion": st.one_of(st.just(""), _text),
    "serviceType": _comma_lists,
    "messageType": _message_types,
    "longitude": _floats,
    "latitude": _floats,
    "quadTree": _quadtrees,
    "shardId": amqp_ints(st.one_of(st.integers(-2, 6), st.sampled_from(_EDGE_INTS))),
    "shardCount": amqp_ints(st.one_of(st.integers(-2, 6), st.sampled_from(_EDGE_INTS))),
    "causeCode": amqp_ints(),
    "subCauseCode": amqp_ints(),
    "iviStatus": amqp_ints(),
    "iviType": _integer_lists,
    "pictogramCategoryCode": _integer_lists,
    "iviContainer": _comma_lists,
    "id": _comma_lists,
    "name": _comma_lists,
    "stationType": amqp_ints(),
    "vehicleRole": amqp_ints(),
    "type": st.one_of(st.sampled_from(["Vehicle", "RSU", "vehicle", "RSU ", ""]), _text),
}
_names = st.one_of(
    st.sampled_from(sorted(_NAMED)),
    st.lists(st.sampled_from(["custom", "-", "a", "é", "\n", "x-y", "--", "custom-"]), max_size=5).map("".join),
    _text,
    st.text(alphabet="ab-", min_size=240, max_size=300).map(lambda s: "custom-a-" + s),  # str32 keys
)


_custom_names = st.one_of(
    st.builds("custom-{}-{}".format, st.text(alphabet="abé\n", min_size=1, max_size=3), _from("ab-é\n", 3)),
    st.builds("custom-{}-{}".format, _from("ab-é\n", 3), _from("ab-é\n", 3)),
)


@st.composite
def property_maps(draw, unhandled: bool = False) -> dict[str, object]:
    """A valid set of a random messageType with 0-3 changes (about a third stay valid), plus extras."""
    props = dict(valid_properties(draw(st.sampled_from(sorted(MESSAGE_TYPES)))))
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):
        name = draw(st.sampled_from(sorted(_NAMED)))
        action = draw(st.sampled_from(["drop", "named", "named", "named", "any"]))
        if action == "drop":
            props.pop(name, None)
        elif action == "named":
            props[name] = draw(_NAMED[name])
        else:
            props[name] = draw(_any_value)
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):
        name = draw(st.one_of(_custom_names, _custom_names, _custom_names, _names))
        props[name] = draw(_unhandled_value if unhandled and draw(st.booleans()) else _any_value)
    return props


_longs = st.integers(-(2**63), 2**63 - 1)


@st.composite
def messages(draw, unhandled: bool = False) -> bytes:
    message = Message(
        body=draw(st.one_of(st.binary(max_size=40), st.none(), _text, st.lists(_longs, max_size=3),
                            st.dictionaries(_text, _longs, max_size=2))),
        properties=draw(property_maps(unhandled)) if draw(st.integers(0, 9)) else None,
        inferred=draw(st.booleans()),
        durable=draw(st.booleans()),
    )
    if draw(st.booleans()):
        message.ttl = draw(st.integers(0, 10**7)) / 1000
    if draw(st.booleans()):
        message.expiry_time = (NOW + draw(st.integers(-(10**6), 10**7))) / 1000
    if draw(st.booleans()):
        message.creation_time = NOW / 1000
    if draw(st.booleans()):
        message.annotations = {symbol("x-opt-a"): draw(_longs)}
    if draw(st.booleans()):
        message.instructions = {symbol("x-opt-i"): "i"}
    if draw(st.booleans()):
        message.priority = draw(st.integers(0, 9))
    return message.encode()


_capabilities = st.one_of(st.none(), st.integers(-1, 6), st.sampled_from([2**31 - 1, 2**63 - 1, 2**63, -(2**63)]))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=messages(), shard_count=_capabilities, policy=st.sampled_from(POLICIES))
def test_generated_messages_same_outcome(raw: bytes, shard_count: int | None, policy: TtlPolicy) -> None:
    check_c(raw, shard_count, must_handle=True)
    assert_same_outcome(raw, shard_count, policy)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=messages(unhandled=True), shard_count=_capabilities)
def test_generated_messages_with_unhandled_types_same_outcome(raw: bytes, shard_count: int | None) -> None:
    check_c(raw, shard_count, must_handle=True)
    assert_same_outcome(raw, shard_count)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(props=property_maps(), shard_count=_capabilities)
def test_mostly_valid_maps_reach_the_same_verdict(props: dict, shard_count: int | None) -> None:
    """Maps close to valid ones (few changes), so both verdicts are well represented."""
    raw = Message(body=b"x", properties=props, inferred=True).encode()
    check_c(raw, shard_count, must_handle=True)
    assert_same_outcome(raw, shard_count)


# --- property-based: damaged bytes -----------------------------------------------------------------

_SAMPLES = [
    Message(body=bytes(range(64)), inferred=True, properties=valid_properties("DENM"), annotations={symbol("x-opt-a"): [1, 2]},
            ttl=9, durable=True, creation_time=1.5, expiry_time=(NOW + 5000) / 1000).encode(),
    Message(body="amqp-value", properties={**valid_properties("CAM"), "custom-a-b": b"\x00\xff", "custom-c-d": None,
                                           "custom-e-f": symbol("s"), "custom-g-h": timestamp(5)}).encode(),
    section(HEADER, list8(b"\x41", b"\x50\x09", b"\x52\x07")) + with_entries(str32("publicationId"), str32("DE15608:x"))
    + section(FOOTER, map8()),
]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sample=st.sampled_from(_SAMPLES),
    edits=st.lists(
        st.tuples(st.integers(0, 10**4), st.sampled_from(["insert", "delete", "set", "cut"]), st.binary(min_size=1, max_size=5)),
        min_size=1, max_size=4,
    ),
    shard_count=st.sampled_from([None, 3]),
)
def test_damaged_bytes_same_outcome(sample: bytes, edits: list, shard_count: int | None) -> None:
    data = bytearray(sample)
    for position, kind, chunk in edits:
        position %= len(data) + 1
        if kind == "insert":
            data[position:position] = chunk
        elif kind == "delete":
            del data[position : position + len(chunk)]
        elif kind == "set":
            data[position : position + len(chunk)] = chunk
        else:
            del data[position:]
    raw = bytes(data)
    check_c(raw, shard_count)
    assert_same_outcome(raw, shard_count)


@pytest.mark.parametrize("sample", range(len(_SAMPLES)))
def test_every_truncation_and_single_byte_change_same_outcome(sample: int) -> None:
    raw = _SAMPLES[sample]
    for cut in range(len(raw) + 1):
        check_c(raw[:cut])
        assert_same_outcome(raw[:cut])
    for position in range(len(raw)):
        original = raw[position]
        for value in {0x00, 0x40, 0x45, 0x53, 0x70, 0x83, 0xA1, 0xB1, 0xC1, 0xD1, 0xFF, original ^ 1, (original + 1) & 0xFF}:
            mutated = raw[:position] + bytes([value]) + raw[position + 1 :]
            check_c(mutated)
            assert_same_outcome(mutated)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_never_crash(data: bytes) -> None:
    for raw in (data, b"\x00\x53\x74" + data, b"\x00\x53\x74\xd1" + data, b"\x00\x53\x74\xc1" + data):
        check_c(raw)
        assert_same_outcome(raw)


def test_uuid_property_values_are_left_to_python() -> None:
    raw = Message(body=b"x", properties={**valid_properties(), "custom-a-u": uuid.UUID(int=7)}, inferred=True).encode()
    assert _admit.admit(raw, None) is None
    assert assert_same_outcome(raw)[0] == "admitted"


# --- no read past the end of the buffer ------------------------------------------------------------


class GuardedBuffer:
    """Bytes placed at the very end of a readable page followed by an unreadable one (Linux).

    A read one byte past the end of the message faults (the test process dies), where a read
    past the end of a ``bytes`` object would go unnoticed (its data has a trailing NUL and
    lives inside a larger pymalloc arena).
    """

    def __init__(self) -> None:
        import ctypes
        import mmap

        self.page = mmap.PAGESIZE
        self.map = mmap.mmap(-1, 64 * self.page)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        self.end = 63 * self.page
        if libc.mprotect(self.address + self.end, self.page, 0) != 0:  # PROT_NONE
            raise OSError(ctypes.get_errno(), "mprotect")
        self.view = memoryview(self.map)

    def place(self, data: bytes) -> memoryview:
        assert len(data) <= self.end
        start = self.end - len(data)
        self.view[start : self.end] = data
        return self.view[start : self.end]


@pytest.fixture(scope="module")
def guarded() -> GuardedBuffer:
    if not sys.platform.startswith("linux"):
        pytest.skip("needs mprotect")
    return GuardedBuffer()


def test_no_read_past_the_end_of_truncated_or_changed_messages(guarded: GuardedBuffer) -> None:
    for raw in _SAMPLES + [param.values[0] for param in HANDLED + BAIL]:
        for cut in range(len(raw) + 1):
            _admit.admit(guarded.place(raw[:cut]), None)
        for position in range(len(raw)):
            for value in (0x00, 0xFF, 0x7F, raw[position] ^ 0x80):
                changed = raw[:position] + bytes([value]) + raw[position + 1 :]
                view = guarded.place(changed)
                result = _admit.admit(view, 1)
                assert result is None or typed(result[0]) == typed(_admit.admit(changed, 1)[0])


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300))
def test_no_read_past_the_end_of_random_bytes(guarded: GuardedBuffer, data: bytes) -> None:
    for prefix in (b"", b"\x00\x53\x74", b"\x00\x53\x74\xd1", b"\x00\x53\x70\xd0", b"\x00\x53\x73\xc0\xff\x0a"):
        _admit.admit(guarded.place(prefix + data), None)
