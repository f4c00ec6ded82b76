"""Scan an encoded AMQP 1.0 message for routing without decoding its body (IP_008, IP_014/015).

:func:`scan_message` walks the sections by their encoded sizes, decodes the few header and
properties fields it needs (expiry, IP_033) and the application-properties map (IP_066/067), and
stops where the body starts; the bytes are forwarded unchanged. A message not well formed as far
as the scan reads raises :class:`ScanError` (IP_016). Values are plain Python values and
``application_property_types`` names each one's AMQP type; the mapping: docs/broker.md
("Admission").
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from struct import Struct
from struct import error as _StructError
from typing import NamedTuple, cast
from uuid import UUID

#: what the scanner reads: a frame's bytes, a copy or a view of them
Buffer = bytes | bytearray | memoryview

__all__ = [
    "FLOATING_TYPES",
    "INTEGER_TYPES",
    "STRING_TYPES",
    "AmqpDecimal",
    "decode_application_properties",
    "find_message_annotations",
    "MessageAnnotationsSpan",
    "ScanError",
    "ScannedMessage",
    "scan_message",
    "skip_value",
]

#: AMQP integer type names as they appear in ``ScannedMessage.application_property_types``.
INTEGER_TYPES = frozenset({"ubyte", "ushort", "uint", "ulong", "byte", "short", "int", "long"})
#: AMQP floating-point type names.
FLOATING_TYPES = frozenset({"float", "double"})
#: AMQP textual type names (a char is one code point, not a string).
STRING_TYPES = frozenset({"string", "symbol"})


class ScanError(ValueError):
    """The bytes are not a well-formed AMQP 1.0 message as far as the scan reads (IP_016)."""


@dataclass(frozen=True, slots=True)
class AmqpDecimal:
    """An AMQP decimal32/64/128 value (IEEE 754 decimal, kept as its raw big-endian bytes)."""

    type: str
    raw: bytes


class ScannedMessage(NamedTuple):
    """What routing needs from one message; the message bytes themselves stay untouched.

    Offsets index into the scanned bytes: ``application_properties_offset`` is where that
    section's descriptor starts and ``application_properties_end`` is one past its last byte
    (both None without the section); ``body_offset`` is where the first body section starts
    (None for a message without a body, which proton produces for ``body=None``).
    """

    application_properties: dict[str, object]
    application_property_types: dict[str, str]
    ttl_ms: int | None
    absolute_expiry_time_ms: int | None
    creation_time_ms: int | None
    durable: bool
    priority: int
    application_properties_offset: int | None
    application_properties_end: int | None
    body_offset: int | None


_HEADER = 0x70
_DELIVERY_ANNOTATIONS = 0x71
_MESSAGE_ANNOTATIONS = 0x72
_PROPERTIES = 0x73
_APPLICATION_PROPERTIES = 0x74
_DATA = 0x75
_AMQP_SEQUENCE = 0x76
_AMQP_VALUE = 0x77
_FOOTER = 0x78

_SECTION_NAMES = {
    _HEADER: "header",
    _DELIVERY_ANNOTATIONS: "delivery-annotations",
    _MESSAGE_ANNOTATIONS: "message-annotations",
    _PROPERTIES: "properties",
    _APPLICATION_PROPERTIES: "application-properties",
    _DATA: "data",
    _AMQP_SEQUENCE: "amqp-sequence",
    _AMQP_VALUE: "amqp-value",
    _FOOTER: "footer",
}
_SYMBOLIC_DESCRIPTORS = {
    b"amqp:header:list": _HEADER,
    b"amqp:delivery-annotations:map": _DELIVERY_ANNOTATIONS,
    b"amqp:message-annotations:map": _MESSAGE_ANNOTATIONS,
    b"amqp:properties:list": _PROPERTIES,
    b"amqp:application-properties:map": _APPLICATION_PROPERTIES,
    b"amqp:data:binary": _DATA,
    b"amqp:amqp-sequence:list": _AMQP_SEQUENCE,
    b"amqp:amqp-value:*": _AMQP_VALUE,
    b"amqp:footer:map": _FOOTER,
}

_U32 = Struct(">I")
_U32_PAIR = Struct(">II")
_U64 = Struct(">Q")


def _bool_byte(value: int) -> bool:
    if value == 0:
        return False
    if value == 1:
        return True
    raise ValueError(f"boolean byte 0x{value:02x} is neither 0x00 nor 0x01")


def _char(code_point: int) -> str:
    if code_point > 0x10FFFF or 0xD800 <= code_point <= 0xDFFF:
        raise ValueError(f"char 0x{code_point:x} is not a Unicode scalar value")
    return chr(code_point)


def _uuid(raw: bytes) -> UUID:
    return UUID(bytes=raw)


def _fixed_table() -> tuple:
    """Dispatch table by constructor byte for fixed-width primitives (AMQP 1.0 part 1.6).

    Entry: (width after the constructor, Struct.unpack_from or None, AMQP type name,
    converter applied to the unpacked value, or the constant value when width is 0).
    """
    table: list[tuple | None] = [None] * 256
    entries = {
        0x40: (0, None, "null", None),
        0x41: (0, None, "boolean", True),
        0x42: (0, None, "boolean", False),
        0x56: (1, Struct(">B").unpack_from, "boolean", _bool_byte),
        0x50: (1, Struct(">B").unpack_from, "ubyte", None),
        0x60: (2, Struct(">H").unpack_from, "ushort", None),
        0x70: (4, Struct(">I").unpack_from, "uint", None),
        0x52: (1, Struct(">B").unpack_from, "uint", None),
        0x43: (0, None, "uint", 0),
        0x80: (8, Struct(">Q").unpack_from, "ulong", None),
        0x53: (1, Struct(">B").unpack_from, "ulong", None),
        0x44: (0, None, "ulong", 0),
        0x51: (1, Struct(">b").unpack_from, "byte", None),
        0x61: (2, Struct(">h").unpack_from, "short", None),
        0x71: (4, Struct(">i").unpack_from, "int", None),
        0x54: (1, Struct(">b").unpack_from, "int", None),
        0x81: (8, Struct(">q").unpack_from, "long", None),
        0x55: (1, Struct(">b").unpack_from, "long", None),
        0x72: (4, Struct(">f").unpack_from, "float", None),
        0x82: (8, Struct(">d").unpack_from, "double", None),
        0x74: (4, Struct("4s").unpack_from, "decimal32", partial(AmqpDecimal, "decimal32")),
        0x84: (8, Struct("8s").unpack_from, "decimal64", partial(AmqpDecimal, "decimal64")),
        0x94: (16, Struct("16s").unpack_from, "decimal128", partial(AmqpDecimal, "decimal128")),
        0x73: (4, Struct(">I").unpack_from, "char", _char),
        0x83: (8, Struct(">q").unpack_from, "timestamp", None),
        0x98: (16, Struct("16s").unpack_from, "uuid", _uuid),
    }
    for code, entry in entries.items():
        table[code] = entry
    return tuple(table)


def _skip_table() -> tuple:
    """Encoded width by constructor byte: >= 0 fixed bytes, -1/-4 a 1/4-byte size prefix, None invalid."""
    table: list[int | None] = [None] * 256
    for code in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45):
        table[code] = 0
    for code in (0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56):
        table[code] = 1
    for code in (0x60, 0x61):
        table[code] = 2
    for code in (0x70, 0x71, 0x72, 0x73, 0x74):
        table[code] = 4
    for code in (0x80, 0x81, 0x82, 0x83, 0x84):
        table[code] = 8
    for code in (0x94, 0x98):
        table[code] = 16
    for code in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
        table[code] = -1
    for code in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
        table[code] = -4
    return tuple(table)


_FIXED = _fixed_table()
_SKIP = _skip_table()
_COMPOUND_NAMES = {0x45: "list", 0xC0: "list", 0xD0: "list", 0xC1: "map", 0xD1: "map", 0xE0: "array", 0xF0: "array"}


def _skip_values(data: Buffer, p: int, limit: int, count: int) -> int:
    """Return the offset after ``count`` encoded values starting at ``p``, read by size only."""
    skip = _SKIP
    while count:
        if p >= limit:
            raise ScanError(f"value at offset {p} runs past the end of its container at {limit}")
        c = data[p]
        if c == 0x00:  # described value: a descriptor value, then the value
            p += 1
            count += 1
            continue
        width = skip[c]
        if width is None:
            raise ScanError(f"invalid constructor 0x{c:02x} at offset {p}")
        if width >= 0:
            p += 1 + width
        elif width == -1:
            if p + 2 > limit:
                raise ScanError(f"size of value at offset {p} runs past the end at {limit}")
            p += 2 + data[p + 1]
        else:
            if p + 5 > limit:
                raise ScanError(f"size of value at offset {p} runs past the end at {limit}")
            p += 5 + _U32.unpack_from(data, p + 1)[0]
        count -= 1
    if p > limit:
        raise ScanError(f"value ends at offset {p}, past the end of its container at {limit}")
    return p


def _compound_bounds(data: Buffer, p: int, end: int, what: str, small: int, large: int) -> tuple[int, int, int]:
    """Read a list/map header at ``p``: (element count, first element offset, end offset)."""
    c = data[p]
    if c == small:
        if p + 3 > end:
            raise ScanError(f"{what} at offset {p} is truncated")
        size = data[p + 1]
        count = data[p + 2]
        first = p + 3
        stop = p + 2 + size
        if size < 1:
            raise ScanError(f"{what} at offset {p} declares size {size}, too small for its count")
    elif c == large:
        if p + 9 > end:
            raise ScanError(f"{what} at offset {p} is truncated")
        size, count = _U32_PAIR.unpack_from(data, p + 1)
        first = p + 9
        stop = p + 5 + size
        if size < 4:
            raise ScanError(f"{what} at offset {p} declares size {size}, too small for its count")
    elif c == 0x45 and small == 0xC0:
        return 0, p + 1, p + 1
    else:
        kind = "list" if small == 0xC0 else "map"
        raise ScanError(f"{what} at offset {p} must be a {kind}, found constructor 0x{c:02x}")
    if stop > end:
        raise ScanError(f"{what} at offset {p} declares {stop - first} bytes past the end of the message")
    if count > stop - first:
        raise ScanError(f"{what} at offset {p} declares {count} elements in {stop - first} bytes")
    return count, first, stop


def _field(data: Buffer, p: int, limit: int, what: str, allowed: tuple[str, ...]) -> tuple[object, int]:
    """Decode one fixed-width list field whose AMQP type must be one of ``allowed``."""
    if p >= limit:
        raise ScanError(f"{what} at offset {p} runs past the end of its list at {limit}")
    c = data[p]
    entry = _FIXED[c]
    if entry is None or entry[2] not in allowed:
        raise ScanError(f"{what} at offset {p} has constructor 0x{c:02x}, expected {' or '.join(allowed)}")
    width, unpack, _, post = entry
    nxt = p + 1 + width
    if nxt > limit:
        raise ScanError(f"{what} at offset {p} runs past the end of its list at {limit}")
    if unpack is None:
        return post, nxt
    value = unpack(data, p + 1)[0]
    if post is not None:
        try:
            value = post(value)
        except ValueError as exc:
            raise ScanError(f"{what} at offset {p}: {exc}") from None
    return value, nxt


def _read_application_properties(
    buf: bytes, p: int, limit: int, pairs: int, base: int
) -> tuple[dict[str, object], dict[str, str], int]:
    """Decode the application-properties map entries (AMQP 1.0 part 3.2.5): (values, AMQP type
    names, offset after the last entry); the map itself is checked by :func:`_application_properties`.

    Keys must be strings and values simple types (no list/map/array, no described types). ``buf``
    holds the entries between ``p`` and ``limit``; ``base`` is added to the offsets reported in
    errors. This is the hot loop: str8 keys and values, and fixed-width values, take the inline path.
    """
    props: dict[str, object] = {}
    types: dict[str, str] = {}
    value: object  # a str inline, any simple AMQP value out of line
    fixed = _FIXED
    for _ in range(pairs):
        # key: str8-utf8 inline, str32-utf8 and errors out of line
        c = buf[p] if p < limit else -1
        if c == 0xA1 and p + 2 <= limit:
            q = p + 2
            r = q + buf[p + 1]
            if r > limit:
                raise ScanError(f"application property key at offset {p + base} runs past the end of the map")
            try:
                key = buf[q:r].decode()
            except UnicodeDecodeError:
                raise ScanError(f"application property key at offset {p + base} is not valid UTF-8") from None
        else:
            key, r = _long_key(buf, p, limit, base)
        p = r
        # value: str8-utf8 inline, fixed-width by table, the rest out of line
        c = buf[p] if p < limit else -1
        if c == 0xA1 and p + 2 <= limit:
            q = p + 2
            r = q + buf[p + 1]
            if r > limit:
                raise ScanError(f"value of {key!r} at offset {p + base} runs past the end of the map")
            try:
                value = buf[q:r].decode()
            except UnicodeDecodeError:
                raise ScanError(f"value of {key!r} at offset {p + base} is not valid UTF-8") from None
            type_name = "string"
        else:
            entry = fixed[c] if c >= 0 else None
            if entry is None:
                value, type_name, r = _other_value(buf, p, limit, base, key)
            else:
                width, unpack, type_name, post = entry
                r = p + 1 + width
                if r > limit:
                    raise ScanError(f"value of {key!r} at offset {p + base} runs past the end of the map")
                if unpack is None:
                    value = post
                else:
                    value = unpack(buf, p + 1)[0]
                    if post is not None:
                        value = _converted(post, value, key, p + base)
        props[key] = value
        types[key] = type_name
        p = r
    return props, types, p


def _converted(post: Callable[[object], object], value: object, key: str, offset: int) -> object:
    """A fixed-width value of a type that needs converting (boolean byte, char, decimal, uuid)."""
    try:
        return post(value)
    except ValueError as exc:
        raise ScanError(f"value of {key!r} at offset {offset}: {exc}") from None


def _application_properties(data: Buffer, pos: int, end: int) -> tuple[dict[str, object], dict[str, str], int]:
    """Decode the application-properties map at ``pos``: (values, AMQP type names, section end)."""
    if data[pos] == 0xD1 and pos + 9 <= end:  # map32, what proton and Qpid JMS write
        size, count = _U32_PAIR.unpack_from(data, pos + 1)
        first = pos + 9
        stop = pos + 5 + size
        if size < 4 or stop > end or count > stop - first:
            _compound_bounds(data, pos, end, "application-properties", 0xC1, 0xD1)  # raises the precise error
    else:
        count, first, stop = _compound_bounds(data, pos, end, "application-properties", 0xC1, 0xD1)
    if count & 1:
        raise ScanError(f"application-properties map at offset {pos} has an odd element count {count}")
    pairs = count >> 1
    if isinstance(data, bytes):
        base = 0
        props, types, last = _read_application_properties(data, first, stop, pairs, base)
    else:  # decode from a copy of the map alone, never of the body
        base = first
        props, types, last = _read_application_properties(bytes(data[first:stop]), 0, stop - first, pairs, base)
        last += base
    if last != stop:
        raise ScanError(f"application-properties entries end at offset {last}, the map declares {stop}")
    if len(props) != pairs:
        raise ScanError(f"application-properties map ending at offset {stop} has duplicate keys")
    return props, types, stop


def _long_key(buf: bytes, p: int, limit: int, base: int) -> tuple[str, int]:
    """Decode an application property key that is not a complete str8: str32, or an error."""
    if p + 2 > limit:
        raise ScanError(f"application-properties entry at offset {p + base} runs past the end of the map")
    c = buf[p]
    if c != 0xB1:
        kind = "symbol" if c in (0xA3, 0xB3) else f"constructor 0x{c:02x}"
        raise ScanError(f"application property key at offset {p + base} is not a string ({kind})")
    if p + 5 > limit:
        raise ScanError(f"application property key at offset {p + base} is truncated")
    q = p + 5
    r = q + _U32.unpack_from(buf, p + 1)[0]
    if r > limit:
        raise ScanError(f"application property key at offset {p + base} runs past the end of the map")
    try:
        return buf[q:r].decode(), r
    except UnicodeDecodeError:
        raise ScanError(f"application property key at offset {p + base} is not valid UTF-8") from None


def _other_value(buf: bytes, p: int, limit: int, base: int, key: str) -> tuple[object, str, int]:
    """Decode a variable-width simple value other than a complete str8, or raise for a forbidden one."""
    if p >= limit:
        raise ScanError(f"application property {key!r} has no value before the end of the map")
    c = buf[p]
    if c == 0xA0 or c == 0xA1 or c == 0xA3:
        q = p + 2
        r = q + buf[p + 1] if q <= limit else q
    elif c == 0xB0 or c == 0xB1 or c == 0xB3:
        q = p + 5
        r = q + _U32.unpack_from(buf, p + 1)[0] if q <= limit else q
    elif c == 0x00:
        raise ScanError(f"value of {key!r} at offset {p + base} is a described type, not allowed")
    elif c in _COMPOUND_NAMES:
        raise ScanError(
            f"value of {key!r} at offset {p + base} is a {_COMPOUND_NAMES[c]}; "
            "application properties allow only simple types"
        )
    else:
        raise ScanError(f"value of {key!r} at offset {p + base} has invalid constructor 0x{c:02x}")
    if r > limit:
        raise ScanError(f"value of {key!r} at offset {p + base} runs past the end of the map")
    low = c & 0x0F
    if low == 0:
        return bytes(buf[q:r]), "binary", r
    try:
        if low == 1:
            return buf[q:r].decode(), "string", r
        return buf[q:r].decode("ascii"), "symbol", r
    except UnicodeDecodeError:
        kind = "UTF-8" if low == 1 else "ASCII"
        raise ScanError(f"value of {key!r} at offset {p + base} is not valid {kind}") from None


def _read_header(data: Buffer, pos: int, end: int) -> tuple[bool, int, int | None, int]:
    """Decode the header fields durable, priority and ttl: (durable, priority, ttl, section end)."""
    c = data[pos]
    if c == 0x45:
        return False, 4, None, pos + 1
    if c == 0xC0 and pos + 3 <= end:
        count = data[pos + 2]
        p = pos + 3
        stop = pos + 2 + data[pos + 1]
        if stop > end or count > stop - p:
            _compound_bounds(data, pos, end, "header", 0xC0, 0xD0)  # raises the precise error
    else:
        count, p, stop = _compound_bounds(data, pos, end, "header", 0xC0, 0xD0)
    durable = False
    priority = 4
    ttl = None
    if count:
        c = data[p]
        if c == 0x41:
            durable = True
            p += 1
        elif c == 0x40 or c == 0x42:
            p += 1
        else:
            # null (0x40) is taken above, so the field is a boolean
            value, p = _field(data, p, stop, "header durable", ("boolean", "null"))
            durable = cast(bool, value)
        if count > 1:
            c = data[p] if p < stop else -1
            if c == 0x40:
                p += 1
            elif c == 0x50 and p + 2 <= stop:
                priority = data[p + 1]
                p += 2
            else:
                # null (0x40) is taken above, so the field is a ubyte
                value, p = _field(data, p, stop, "header priority", ("ubyte", "null"))
                priority = cast(int, value)
            if count > 2:
                c = data[p] if p < stop else -1
                if c == 0x70 and p + 5 <= stop:
                    ttl = _U32.unpack_from(data, p + 1)[0]
                elif c != 0x40:
                    ttl, p = _field(data, p, stop, "header ttl", ("uint", "null"))
    return durable, priority, ttl, stop


def _descriptor(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Read a section's descriptor at ``pos``: (section code, value offset)."""
    if data[pos] != 0x00:
        raise ScanError(f"expected a section (described type 0x00) at offset {pos}, found 0x{data[pos]:02x}")
    if pos + 3 > end:
        raise ScanError(f"section at offset {pos} is truncated")
    c = data[pos + 1]
    if c == 0x53:
        return data[pos + 2], pos + 3
    if c == 0x80:
        if pos + 10 > end:
            raise ScanError(f"section descriptor at offset {pos} is truncated")
        code = _U64.unpack_from(data, pos + 2)[0]
        return (code if code < 0x100 else -1), pos + 10
    if c == 0xA3 or c == 0xB3:
        if c == 0xA3:
            first = pos + 3
            stop = first + data[pos + 2]
        else:
            if pos + 6 > end:
                raise ScanError(f"section descriptor at offset {pos} is truncated")
            first = pos + 6
            stop = first + _U32.unpack_from(data, pos + 2)[0]
        if stop > end:
            raise ScanError(f"section descriptor at offset {pos} runs past the end of the message")
        return _SYMBOLIC_DESCRIPTORS.get(bytes(data[first:stop]), -1), stop
    raise ScanError(f"section descriptor at offset {pos} has constructor 0x{c:02x}, expected ulong or symbol")


def _check_first_body_section(data: Buffer, code: int, p: int, end: int, start: int) -> None:
    """Check that the first body section's value fits in the message, reading sizes only."""
    c = data[p]
    if code == _DATA:
        if c != 0xA0 and c != 0xB0:
            raise ScanError(f"data section at offset {start} must hold binary, found constructor 0x{c:02x}")
        _skip_values(data, p, end, 1)
    elif code == _AMQP_SEQUENCE:
        _compound_bounds(data, p, end, "amqp-sequence section", 0xC0, 0xD0)
    else:
        _skip_values(data, p, end, 1)


def _as_bytes(data: bytearray | memoryview) -> memoryview:
    """A byte-wise view of ``data`` (never a copy)."""
    view = memoryview(data)
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def scan_message(data: Buffer, *, decode_properties: bool = True) -> ScannedMessage:
    """Scan one encoded AMQP 1.0 message; raise :class:`ScanError` if it is malformed.

    With ``decode_properties=False`` the application-properties section is only located
    (its offsets are set, the returned maps are empty); :func:`decode_application_properties`
    decodes it later, e.g. only when a cache of already-seen property sections misses.

    IP_008: reads the header (durable, priority, ttl), the properties section's
    absolute-expiry-time and creation-time, and the application properties; every other
    section is skipped by its encoded size, and scanning stops at the first body section
    after checking that its value fits in the message. Section order and uniqueness
    (AMQP 1.0 part 3.2) are enforced up to the body. The input is never modified (IP_014/015).
    """
    if not isinstance(data, bytes):
        data = _as_bytes(data)
    end = len(data)
    if not end:
        raise ScanError("empty message")
    try:
        return _scan_sections(data, end, decode_properties)
    except ScanError:
        raise
    except (IndexError, _StructError, ValueError, OverflowError) as exc:  # defensive: bounds are checked
        raise ScanError(f"malformed message: {exc}") from None


_new_scanned = tuple.__new__


def _scan_sections(data: Buffer, end: int, decode_properties: bool) -> ScannedMessage:
    """Walk the sections in order up to the body, each read by its reader. The sections are told
    apart by an ``if`` chain, the most frequent first: a table of readers writing the fields into a
    list cost 3-12 % of a scan (docs/performance.md)."""
    pos = last = 0
    durable, priority, ttl, expiry, created = False, 4, None, None, None
    props: dict[str, object] = {}
    types: dict[str, str] = {}
    props_start = props_end = body = None
    while pos < end:
        start = pos
        if data[pos] == 0x00 and pos + 3 <= end and data[pos + 1] == 0x53:  # smallulong descriptor
            code = data[pos + 2]
            pos += 3
        else:
            code, pos = _descriptor(data, pos, end)
        if code < _HEADER or code > _FOOTER:
            raise ScanError(f"unknown section descriptor at offset {start}")
        if pos >= end:
            raise ScanError(f"{_SECTION_NAMES[code]} section at offset {start} has no value")
        if code >= _DATA:  # the usual body, one small data section that fits, is seen here
            fits = code == _DATA and data[pos] == 0xA0 and pos + 2 <= end and pos + 2 + data[pos + 1] <= end
            body = start if fits else _end_of_bare_message(data, code, pos, end, start)
            break
        if code <= last:
            raise ScanError(f"{_SECTION_NAMES[code]} section at offset {start} is repeated or out of order")
        last = code
        if code == _APPLICATION_PROPERTIES:
            if decode_properties:
                props, types, pos = _application_properties(data, pos, end)
            else:
                _, _, pos = _compound_bounds(data, pos, end, "application-properties", 0xC1, 0xD1)
            props_start, props_end = start, pos
        elif code == _HEADER:
            durable, priority, ttl, pos = _read_header(data, pos, end)
        elif code == _PROPERTIES:  # often empty: its bounds are all to check then
            count, p, pos = _compound_bounds(data, pos, end, "properties", 0xC0, 0xD0)
            if count > 8:
                expiry, created = _expiry_and_creation(data, p, pos, count)
        else:  # delivery-annotations, message-annotations: skipped by size
            _, _, pos = _compound_bounds(data, pos, end, _SECTION_NAMES[code], 0xC1, 0xD1)
    return _new_scanned(ScannedMessage, (props, types, ttl, expiry, created, durable, priority, props_start,
                                         props_end, body))


def _expiry_and_creation(data: Buffer, p: int, stop: int, count: int) -> tuple[int | None, int | None]:
    """The properties list's absolute-expiry-time (field 8) and creation-time (field 9), from the
    list's first field at ``p`` (``count`` > 8 fields)."""
    p = _skip_values(data, p, stop, 8)
    expiry, p = _field(data, p, stop, "absolute-expiry-time", ("timestamp", "null"))
    created = None
    if count > 9:
        created, p = _field(data, p, stop, "creation-time", ("timestamp", "null"))
    return cast("int | None", expiry), cast("int | None", created)


def _end_of_bare_message(data: Buffer, code: int, pos: int, end: int, start: int) -> int | None:
    """A body section starts the body (its value must fit in the message): its offset. A footer
    must be the last section: None (a message without a body)."""
    if code != _FOOTER:
        _check_first_body_section(data, code, pos, end, start)
        return start
    if _compound_bounds(data, pos, end, "footer", 0xC1, 0xD1)[2] != end:
        raise ScanError(f"footer section at offset {start} is not the last section")
    return None


def decode_application_properties(data: bytes | bytearray | memoryview, start: int, end: int
                                  ) -> tuple[dict[str, object], dict[str, str]]:
    """Decode the application-properties section found by :func:`scan_message` at ``start``..``end``."""
    if not isinstance(data, bytes):
        data = _as_bytes(data)
    try:
        if data[start] == 0x00 and start + 3 <= end and data[start + 1] == 0x53:
            code, pos = data[start + 2], start + 3
        else:
            code, pos = _descriptor(data, start, end)
        if code != _APPLICATION_PROPERTIES:
            raise ScanError(f"no application-properties section at offset {start}")
        props, types, stop = _application_properties(data, pos, end)
    except ScanError:
        raise
    except (IndexError, _StructError, ValueError, OverflowError) as exc:
        raise ScanError(f"malformed message: {exc}") from None
    if stop != end:
        raise ScanError(f"application-properties section at offset {start} does not end at {end}")
    return props, types


class MessageAnnotationsSpan(NamedTuple):
    """Where a message's message-annotations section is, or would go (AMQP 1.0 part 3.2.3).

    ``start``..``end`` is the whole section (descriptor included), ``start == end`` when the
    message has none: then ``start`` is where one belongs (after the header and the
    delivery-annotations, before the bare message). ``entries`` is the offset of the map's first
    key and ``items`` its number of keys plus values (0 without a section).
    """

    start: int
    end: int
    entries: int
    items: int


def find_message_annotations(data: bytes | bytearray | memoryview) -> MessageAnnotationsSpan:
    """Locate the message-annotations section, reading only the sections before the bare
    message (which is not read at all); raise :class:`ScanError` if those are malformed."""
    end = len(data)
    pos = 0
    try:
        while pos < end:
            code, value = _descriptor(data, pos, end)
            if value >= end:
                raise ScanError(f"section at offset {pos} has no value")
            if code == _MESSAGE_ANNOTATIONS:
                count, first, stop = _compound_bounds(data, value, end, "message-annotations", 0xC1, 0xD1)
                return MessageAnnotationsSpan(pos, stop, first, count)
            if code not in (_HEADER, _DELIVERY_ANNOTATIONS):
                break
            pos = _skip_values(data, value, end, 1)
    except ScanError:
        raise
    except (IndexError, _StructError, ValueError, OverflowError) as exc:
        raise ScanError(f"malformed message: {exc}") from None
    return MessageAnnotationsSpan(pos, pos, pos, 0)


def skip_value(data: bytes | bytearray | memoryview, p: int, limit: int) -> int:
    """The offset just after the one encoded value at ``p`` (read by size only, never past ``limit``)."""
    return _skip_values(data, p, limit, 1)


def header_durable(data: bytes | bytearray) -> bool:
    """The header's ``durable`` field of an admitted message (False without a header): one look at
    the first bytes for the usual small descriptor, a full scan otherwise."""
    if len(data) < 4 or data[0] != 0x00:
        return False
    if data[1] == 0x53:
        if data[2] != _HEADER:
            return False
        # the usual encodings, read at a glance (the message was admitted: its header is well formed):
        # list0, or list8 whose first field is true, false or null; any other is read in full
        if data[3] == 0x45:
            return False
        if data[3] == 0xC0 and len(data) > 6:
            first = data[6] if data[5] else 0x40
            if first == 0x41:
                return True
            if first == 0x42 or first == 0x40:
                return False
        return _read_header(data, 3, len(data))[0]
    return scan_message(data, decode_properties=False).durable


#: :func:`header_durable`, its usual encodings read in C where the accelerator is built
#: (``_admit.durable``; anything else by :func:`header_durable`): what the router asks of each message
quick_header_durable: Callable[[bytes | bytearray], bool]
try:
    from interchange.broker._admit import durable as _c_durable
    quick_header_durable = partial(_c_durable, header_durable)
except ImportError:  # not built (no compiler)
    quick_header_durable = header_durable
