"""The durable message journal's records, replay and bookkeeping (sans-I/O).

Records ``<u32 length><u32 crc32><u8 kind><payload>``: ``PUT`` (a message and the sources holding
it, IP_032), ``DEL`` (message, source) pairs done with, one per group commit. A message is live
while some address holds it and its TTL has not run out (IP_033). Replay stops a segment at a cut
or CRC-damaged record (reported, never refused); zeros mark a segment's clean end. A failed write
is undone in the books (``failed``), an abandoned segment never appended to; segments go oldest
first once all their messages are dead. The files, the writer thread and the group commit are
:mod:`interchange.broker.store`'s. Details: docs/broker.md ("Durable messages").
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["MAGIC", "JournalBooks", "Replay", "StoredMessage", "decode_records", "segment_name"]

MAGIC = b"CRJ1\r\n\x1a\n"  #: first bytes of every segment file (a file without them is not a segment)
_PUT, _DEL = 1, 2
_FRAME = struct.Struct("<IIB")  # length (kind + payload), crc32 (kind + payload), kind
_PUT_HEAD = struct.Struct("<QqqBHH")  # id, expiry (-1: none), arrival, flags, publisher length, address count
_DEL_HEAD = struct.Struct("<QH")  # id, address length (then the address), per pair
_COUNT = struct.Struct("<I")
_LEN = struct.Struct("<H")
_FEDERATED = 1
#: A record longer than this is corruption, not a message (messages are at most a few MB).
MAX_RECORD = 256 * 1024 * 1024


def segment_name(number: int) -> str:
    return f"{number:08d}.seg"


@dataclass(slots=True)
class StoredMessage:
    """One durable message as the journal keeps it (``message_id`` 0 until the journal gives one)."""

    raw: bytes | bytearray
    expiry_ms: int | None
    arrival_ms: int
    federated: bool
    publisher: str
    addresses: tuple[str, ...]
    message_id: int = 0


def _encode(kind: int, payload: bytes) -> bytes:
    kind_byte = bytes((kind,))
    crc = zlib.crc32(payload, zlib.crc32(kind_byte))
    return _FRAME.pack(len(payload) + 1, crc, kind) + payload


def encode_put(message: StoredMessage) -> bytes:
    publisher = message.publisher.encode()
    expiry = -1 if message.expiry_ms is None else message.expiry_ms
    flags = _FEDERATED if message.federated else 0
    parts: list[bytes | bytearray] = [_PUT_HEAD.pack(message.message_id, expiry, message.arrival_ms, flags,
                                                     len(publisher), len(message.addresses)), publisher]
    for address in message.addresses:
        encoded = address.encode()
        parts.append(_LEN.pack(len(encoded)))
        parts.append(encoded)
    parts.append(message.raw)
    return _encode(_PUT, b"".join(parts))


def encode_dels(pairs: list[tuple[int, str]]) -> bytes:
    parts = [_COUNT.pack(len(pairs))]
    for message_id, address in pairs:
        encoded = address.encode()
        parts.append(_DEL_HEAD.pack(message_id, len(encoded)))
        parts.append(encoded)
    return _encode(_DEL, b"".join(parts))


def _decode_dels(payload: bytes) -> list[tuple[int, str]]:
    (count,) = _COUNT.unpack_from(payload)
    p = _COUNT.size
    pairs = []
    for _ in range(count):
        message_id, n = _DEL_HEAD.unpack_from(payload, p)
        p += _DEL_HEAD.size
        pairs.append((message_id, payload[p:p + n].decode()))
        p += n
    if p != len(payload):
        raise ValueError("DEL record length does not match its pairs")
    return pairs


def _decode_put(payload: bytes) -> StoredMessage:
    message_id, expiry, arrival, flags, publisher_len, count = _PUT_HEAD.unpack_from(payload)
    p = _PUT_HEAD.size
    publisher = payload[p:p + publisher_len].decode()
    p += publisher_len
    addresses = []
    for _ in range(count):
        (n,) = _LEN.unpack_from(payload, p)
        addresses.append(payload[p + 2:p + 2 + n].decode())
        p += 2 + n
    if p > len(payload):
        raise ValueError("PUT record shorter than its fields")
    return StoredMessage(payload[p:], None if expiry < 0 else expiry, arrival, bool(flags & _FEDERATED),
                         publisher, tuple(addresses), message_id)


Record = tuple[int, StoredMessage | list[tuple[int, str]]]


def decode_records(data: bytes, offset: int = 0) -> tuple[list[Record], int, str | None]:
    """Decode records from ``data[offset:]``: (records, end of the last intact one, why it stopped
    early or None when every byte was read)."""
    records: list[Record] = []
    end = len(data)
    p = offset
    while p < end:
        if end - p < _FRAME.size:
            return records, p, f"record header cut short at offset {p}"
        length, crc, kind = _FRAME.unpack_from(data, p)
        if length == 0 and data.count(0, p) == end - p:
            return records, p, None  # the preallocated rest of the segment: never written
        if length < 1 or length > MAX_RECORD:
            return records, p, f"impossible record length {length} at offset {p}"
        stop = p + _FRAME.size - 1 + length
        if stop > end:
            return records, p, f"record at offset {p} cut short ({end - p} of {stop - p} bytes)"
        body = data[p + _FRAME.size - 1:stop]
        if zlib.crc32(body) != crc:
            return records, p, f"CRC mismatch in the record at offset {p}"
        payload = body[1:]
        try:
            if kind == _PUT:
                records.append((_PUT, _decode_put(payload)))
            elif kind == _DEL:
                records.append((_DEL, _decode_dels(payload)))
            else:
                return records, p, f"unknown record kind {kind} at offset {p}"
        except (struct.error, UnicodeDecodeError, ValueError) as exc:
            return records, p, f"unreadable record at offset {p}: {exc}"
        p = stop
    return records, p, None


@dataclass
class _Segment:
    ids: set[int] = field(default_factory=set)  #: live messages PUT in this segment
    max_expiry: int = 0  #: the latest expiry of a message in it (-1: one never expires)


@dataclass
class Replay:
    """What replaying the segment files found."""

    messages: list[StoredMessage]  #: live, unexpired, in journal order (per-shard order kept, IP_128)
    corrupt: list[tuple[int, int, str]]  #: (segment, intact length, reason) of each segment cut short
    segments: int = 0
    records: int = 0


class JournalBooks:
    """The journal's bookkeeping (one per store): ids, live messages per segment, the write position.

    ``put`` returns the record bytes to append and the segment to append them to; ``remove`` notes
    a source's release, and ``take_dels`` turns the releases noted since into one DEL record;
    ``reclaimable`` says which segment files can be deleted.
    """

    def __init__(self, segment_bytes: int = 8 * 1024 * 1024) -> None:
        self.segment_bytes = segment_bytes
        self.segment = 1  #: the segment appended to
        self.segment_size = len(MAGIC)
        self.last_id = 0
        self._holders: dict[int, tuple[int, set[str]]] = {}  # id -> (segment, addresses holding it)
        self._segments: dict[int, _Segment] = {1: _Segment()}
        self._dels: list[tuple[int, str]] = []

    @property
    def live(self) -> int:
        return len(self._holders)

    @property
    def segments(self) -> list[int]:
        return sorted(self._segments)

    def replay(self, files: Iterable[tuple[int, bytes]], now_ms: int) -> Replay:
        """Rebuild the books from the segment files (in number order); new records go to a new segment."""
        found: dict[int, StoredMessage] = {}
        segment_of: dict[int, int] = {}
        report = Replay([], [])
        last = 0
        for number, data in files:
            last = max(last, number)
            report.segments += 1
            self._segments.setdefault(number, _Segment())
            if not data.startswith(MAGIC):
                report.corrupt.append((number, 0, "no segment header"))
                continue
            records, end, problem = decode_records(data, len(MAGIC))
            if problem is not None:
                report.corrupt.append((number, end, problem))
            report.records += len(records)
            for kind, record in records:
                if kind == _PUT:
                    assert isinstance(record, StoredMessage)
                    found[record.message_id] = record
                    segment_of[record.message_id] = number
                    self.last_id = max(self.last_id, record.message_id)
                else:
                    assert isinstance(record, list)
                    for message_id, address in record:
                        message = found.get(message_id)
                        if message is not None:
                            message.addresses = tuple(a for a in message.addresses if a != address)
        for message_id, message in found.items():
            if not message.addresses or (message.expiry_ms is not None and message.expiry_ms <= now_ms):
                continue
            report.messages.append(message)
            self._track(message_id, segment_of[message_id], set(message.addresses), message.expiry_ms)
        self.segment = max(last + 1, self.segment)
        self.segment_size = len(MAGIC)
        self._segments.setdefault(self.segment, _Segment())
        return report

    def _track(self, message_id: int, segment: int, holders: set[str], expiry_ms: int | None) -> None:
        self._holders[message_id] = (segment, holders)
        info = self._segments[segment]
        info.ids.add(message_id)
        if info.max_expiry >= 0:
            info.max_expiry = -1 if expiry_ms is None else max(info.max_expiry, expiry_ms)

    def put(self, message: StoredMessage) -> tuple[int, bytes]:
        """Give ``message`` its id; (segment to append to, the PUT record)."""
        self.last_id += 1
        message.message_id = self.last_id
        record = encode_put(message)
        if self.segment_size + len(record) > self.segment_bytes and self.segment_size > len(MAGIC):
            self.segment += 1
            self.segment_size = len(MAGIC)
            self._segments[self.segment] = _Segment()
        self.segment_size += len(record)
        self._track(message.message_id, self.segment, set(message.addresses), message.expiry_ms)
        return self.segment, record

    def remove(self, message_id: int, address: str) -> bool:
        """``address`` is done with the message; False if it did not hold it (nothing to write)."""
        entry = self._holders.get(message_id)
        if entry is None or address not in entry[1]:
            return False
        segment, holders = entry
        holders.discard(address)
        if not holders:
            del self._holders[message_id]
            self._segments[segment].ids.discard(message_id)
        self._dels.append((message_id, address))
        return True

    def take_dels(self) -> tuple[int, bytes, list[tuple[int, str]]] | None:
        """(segment, one DEL record, its pairs) for the releases noted since the last call, or None."""
        if not self._dels:
            return None
        pairs = self._dels
        record = encode_dels(pairs)
        self._dels = []
        self.segment_size += len(record)
        return self.segment, record, pairs

    def failed(self, puts: Iterable[int], dels: list[tuple[int, str]], segment: int, size: int) -> None:
        """A write of ``size`` bytes to ``segment`` did not reach the disk: the messages it PUT were never
        stored (forgotten here), and its releases go into the next DEL record again."""
        lost = set(puts)
        for message_id in lost:
            entry = self._holders.pop(message_id, None)
            if entry is not None and entry[0] in self._segments:
                self._segments[entry[0]].ids.discard(message_id)
        again = [pair for pair in dels if pair[0] not in lost]
        if again:
            self._dels[:0] = again
        if segment == self.segment:
            self.segment_size = max(len(MAGIC), self.segment_size - size)

    def abandon(self, segment: int) -> None:
        """The writer gave ``segment`` up after a failure: appends go to a newer one from now on."""
        if segment >= self.segment:
            self.segment = segment + 1
            self.segment_size = len(MAGIC)
            self._segments.setdefault(self.segment, _Segment())

    def reclaimable(self, now_ms: int) -> list[int]:
        """Segments to delete, oldest first: every message PUT in them is dead or expired; stops at
        the first one that still holds a live message (and never takes the one appended to)."""
        gone = []
        for number in sorted(self._segments):
            info = self._segments[number]
            if number >= self.segment:
                break
            expired = info.max_expiry >= 0 and info.max_expiry <= now_ms
            if info.ids and not expired:
                break
            for message_id in info.ids:
                self._holders.pop(message_id, None)
            del self._segments[number]
            gone.append(number)
        return gone
