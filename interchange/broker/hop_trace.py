"""Loop prevention for multi-hop federation (IP_109), sans-I/O: a hop trace in message annotations.

Each importing interchange appends itself to :data:`TRACE_KEY` and keeps the smaller hop limit in
:data:`LIMIT_KEY`, both in the message-annotations section (``x-opt-`` keys), so the bare message
stays byte for byte what the publisher sent (IP_014/015). :meth:`HopGuard.inspect` decides:
:class:`Drop` (``loop``, ``hop_limit``) or :class:`Forward`. A node with multi-hop federation off
still drops loops and over-limit messages but adds nothing. Details: docs/broker.md ("Multi-hop
federation").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from struct import Struct
from typing import Literal

from interchange.broker.amqp_scan import MessageAnnotationsSpan, ScanError, find_message_annotations, skip_value

__all__ = ["DEFAULT_HOP_LIMIT", "LIMIT_KEY", "MAX_HOP_LIMIT", "TRACE_KEY", "Drop", "Forward", "HopGuard",
           "HopTrace", "read_trace", "stamp_trace"]

TRACE_KEY = "x-opt-croads-trace"
LIMIT_KEY = "x-opt-croads-hop-limit"
DEFAULT_HOP_LIMIT = 4
MAX_HOP_LIMIT = 32
#: Longest trace accepted (a longer one is malformed: no limit allows it).
MAX_TRACE = MAX_HOP_LIMIT + 1

_U8 = Struct(">B")
_U16 = Struct(">H")
_U32 = Struct(">I")
_U64 = Struct(">Q")
_SECTION = b"\x00\x53\x72"  # described type, smallulong descriptor 0x72: message-annotations

DropReason = Literal["loop", "hop_limit"]


@dataclass(frozen=True, slots=True)
class HopTrace:
    """What a message carries: the interchanges it passed and its hop limit (None: not set)."""

    trace: tuple[str, ...] = ()
    hop_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Forward:
    """Import the message: ``raw`` is what to route (stamped or as received), ``trace`` its path."""

    raw: bytes | bytearray
    trace: tuple[str, ...]
    hop_limit: int
    bare_at: int = field(default=-1, compare=False)  #: where in ``raw`` the bare message starts (-1: not known)


@dataclass(frozen=True, slots=True)
class Drop:
    """Drop the message (and count it): it looped back here or went over its hop limit."""

    reason: DropReason
    trace: tuple[str, ...]


class HopGuard:
    """One interchange's loop prevention for the messages it imports.

    ``stamp`` (multi-hop federation switched on): forwarded messages get the extended trace and
    the effective hop limit written into their annotations, so the next interchange can check them.
    """

    def __init__(self, own_name: str, hop_limit: int = DEFAULT_HOP_LIMIT, stamp: bool = False) -> None:
        if not 1 <= hop_limit <= MAX_HOP_LIMIT:
            raise ValueError(f"hop limit must be 1..{MAX_HOP_LIMIT}, not {hop_limit}")
        self.own_name = own_name
        self.hop_limit = hop_limit
        self.stamp = stamp

    def inspect(self, raw: bytes | bytearray, neighbour: str) -> Forward | Drop:
        """Decide for one message imported from ``neighbour``; raise ScanError if its annotations
        are malformed (IP_016)."""
        span = find_message_annotations(raw)
        carried = _read(raw, span)
        path = carried.trace
        if not path or path[-1] != neighbour:
            path += (neighbour,)  # the neighbour originated it (or did not record itself)
        if self.own_name in carried.trace:  # (the link itself is no loop, even one to our own name)
            return Drop("loop", path)
        limit = self.hop_limit if carried.hop_limit is None else min(carried.hop_limit, self.hop_limit)
        if len(path) > limit:  # len(path) hops: each interchange in the path handed it on once
            return Drop("hop_limit", path)
        path += (self.own_name,)
        if not self.stamp:
            return Forward(raw, path, limit, span.end)
        stamped = _stamp(raw, HopTrace(path, limit), span)
        return Forward(stamped, path, limit, len(stamped) - (len(raw) - span.end))


# ---------------------------------------------------------------- decoding
def read_trace(raw: bytes | bytearray) -> HopTrace:
    """The trace and hop limit in ``raw``'s message annotations (empty when absent)."""
    return _read(raw, find_message_annotations(raw))


def _read(raw: bytes | bytearray, span: MessageAnnotationsSpan) -> HopTrace:
    trace: tuple[str, ...] = ()
    limit: int | None = None
    p = span.entries
    for _ in range(span.items // 2):
        key, p = _key(raw, p, span.end)
        value_end = skip_value(raw, p, span.end)
        if key == TRACE_KEY:
            trace = _string_list(raw, p, value_end)
        elif key == LIMIT_KEY:
            limit = _unsigned(raw, p, value_end)
        p = value_end
    return HopTrace(trace, limit)


def _key(raw: bytes | bytearray, p: int, end: int) -> tuple[str | None, int]:
    """An annotation key: a symbol's text, None for a ulong key (AMQP reserves those)."""
    stop = skip_value(raw, p, end)
    c = raw[p]
    if c == 0xA3:
        return bytes(raw[p + 2:stop]).decode("ascii", "replace"), stop
    if c == 0xB3:
        return bytes(raw[p + 5:stop]).decode("ascii", "replace"), stop
    if c in (0x80, 0x53, 0x44):
        return None, stop
    raise ScanError(f"message-annotations key at offset {p} must be a symbol or ulong, found 0x{c:02x}")


def _string_list(raw: bytes | bytearray, p: int, end: int) -> tuple[str, ...]:
    c = raw[p]
    if c == 0x45:
        return ()
    if c == 0xC0:
        count, q = raw[p + 2], p + 3
    elif c == 0xD0:
        count, q = _U32.unpack_from(raw, p + 5)[0], p + 9
    else:
        raise ScanError(f"{TRACE_KEY} at offset {p} must be a list, found 0x{c:02x}")
    if count > MAX_TRACE:
        raise ScanError(f"{TRACE_KEY} at offset {p} names {count} interchanges, more than {MAX_TRACE}")
    names = []
    for _ in range(count):
        stop = skip_value(raw, q, end)
        if raw[q] == 0xA1:
            text = raw[q + 2:stop]
        elif raw[q] == 0xB1:
            text = raw[q + 5:stop]
        else:
            raise ScanError(f"{TRACE_KEY} entry at offset {q} must be a string, found 0x{raw[q]:02x}")
        try:
            names.append(bytes(text).decode("utf-8"))
        except UnicodeDecodeError:
            raise ScanError(f"{TRACE_KEY} entry at offset {q} is not UTF-8") from None
        q = stop
    return tuple(names)


_UNSIGNED = {0x43: (0, None), 0x44: (0, None), 0x50: (1, _U8), 0x52: (1, _U8), 0x53: (1, _U8),
             0x60: (2, _U16), 0x70: (4, _U32), 0x80: (8, _U64)}


def _unsigned(raw: bytes | bytearray, p: int, end: int) -> int:
    entry = _UNSIGNED.get(raw[p])
    if entry is None or p + 1 + entry[0] > end:
        raise ScanError(f"{LIMIT_KEY} at offset {p} must be an unsigned integer, found 0x{raw[p]:02x}")
    width, unpack = entry
    return 0 if unpack is None else int(unpack.unpack_from(raw, p + 1)[0])


# ---------------------------------------------------------------- encoding
def stamp_trace(raw: bytes | bytearray, hops: HopTrace) -> bytes:
    """``raw`` with its message annotations carrying ``hops`` (our two keys replaced, every
    other annotation kept as encoded); the bare message after the section is not touched."""
    return _stamp(raw, hops, find_message_annotations(raw))


def _stamp(raw: bytes | bytearray, hops: HopTrace, span: MessageAnnotationsSpan) -> bytes:
    kept = []
    p = span.entries
    for _ in range(span.items // 2):
        key, value_at = _key(raw, p, span.end)
        value_end = skip_value(raw, value_at, span.end)
        if key not in (TRACE_KEY, LIMIT_KEY):
            kept.append(bytes(raw[p:value_end]))
        p = value_end
    entries = [_symbol(TRACE_KEY), _list_of_strings(hops.trace)]
    if hops.hop_limit is not None:
        entries += [_symbol(LIMIT_KEY), b"\x70" + _U32.pack(hops.hop_limit)]
    body = b"".join(entries + kept)
    count = 2 * len(kept) + len(entries)
    section = _SECTION + b"\xd1" + _U32.pack(len(body) + 4) + _U32.pack(count) + body
    return bytes(raw[:span.start]) + section + bytes(raw[span.end:])


def _symbol(name: str) -> bytes:
    data = name.encode("ascii")
    return b"\xa3" + _U8.pack(len(data)) + data


def _list_of_strings(names: tuple[str, ...]) -> bytes:
    items = []
    for name in names:
        data = name.encode("utf-8")
        items.append(b"\xa1" + _U8.pack(len(data)) + data if len(data) < 256 else b"\xb1" + _U32.pack(len(data)) + data)
    body = b"".join(items)
    return b"\xd0" + _U32.pack(len(body) + 4) + _U32.pack(len(names)) + body
