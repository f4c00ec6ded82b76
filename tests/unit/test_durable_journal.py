"""Durable messages without a node: the journal's records (a cut or damaged record ends its segment),
segments released oldest first, replay of held unexpired messages in order, and an imported message
recovered from the store counted once as a duplicate."""
from __future__ import annotations

from pathlib import Path

from proton import Message

from interchange.broker.admission import Admission
from interchange.broker.durable import Durability
from interchange.broker.journal import MAGIC, JournalBooks, StoredMessage, decode_records
from interchange.broker.store import JournalStore
from interchange.broker.ttl_policy import TtlPolicy
from interchange.testing.broker_harness import denm

PUBLISHER, CONSUMER = "actor-1", "actor-2"


# ------------------------------------------------------------------------------ sans-I/O journal
def _stored(body: bytes, *addresses: str, expiry: int | None = 10_000) -> StoredMessage:
    return StoredMessage(body, expiry, 1, False, PUBLISHER, addresses)


def _message(body: str, durable: bool, ttl_s: float = 120.0, shard: str = "denm-1") -> Message:
    message = denm(body=body.encode(), publicationId=f"NO00001:{shard}")
    message.durable = durable
    message.ttl = ttl_s
    return message


def test_a_cut_or_damaged_record_ends_the_segment_there() -> None:
    books = JournalBooks()
    records = [books.put(_stored(bytes([i]) * 100, "s"))[1] for i in range(3)]
    whole = MAGIC + b"".join(records)
    cut = whole[:-7]
    report = JournalBooks().replay([(1, cut)], now_ms=0)
    assert [m.raw[:1] for m in report.messages] == [b"\x00", b"\x01"]
    [(segment, intact, reason)] = report.corrupt
    assert segment == 1 and intact == len(MAGIC) + len(records[0]) + len(records[1]) and "cut short" in reason
    damaged = bytearray(whole)
    damaged[len(MAGIC) + len(records[0]) + 20] ^= 0xFF  # a flipped bit in the second record's payload
    records_read, end, problem = decode_records(bytes(damaged), len(MAGIC))
    assert len(records_read) == 1 and end == len(MAGIC) + len(records[0]) and "CRC" in str(problem)
    assert JournalBooks().replay([(1, b"garbage")], now_ms=0).corrupt == [(1, 0, "no segment header")]


async def test_an_imported_message_recovered_from_the_store_counts_as_a_duplicate_once(tmp_path: Path) -> None:
    admission = Admission(TtlPolicy())
    raw = bytes(_message("imported", durable=True).encode())
    store, _ = await JournalStore.open(tmp_path, now_ms=0)
    store.put(StoredMessage(raw, None, 1, True, "neighbour.test", ("s",)))
    await store.close()
    store, recovery = await JournalStore.open(tmp_path, now_ms=0)
    try:
        durability = Durability(store)
        durability.recover(recovery.messages, lambda r, p, f: admission.admit(r, p, f, None, 0))
        other = bytes(_message("other", durable=True).encode())
        assert not durability.is_duplicate_import(other)
        assert durability.is_duplicate_import(raw) and not durability.is_duplicate_import(raw)
        assert durability.duplicate_imports == 1 and len(durability.waiting_for("s")) == 1
    finally:
        await store.close()


def test_replay_keeps_held_unexpired_messages_in_order() -> None:
    books = JournalBooks()
    data = bytearray(MAGIC)
    for message in (_stored(b"a", "s1", "s2"), _stored(b"b", "s1"), _stored(b"c", "s1", expiry=500),
                    _stored(b"d", "s2", expiry=None)):
        data += books.put(message)[1]
    assert books.remove(1, "s1") and books.remove(2, "s1")
    assert not books.remove(2, "s1")  # not held any more: nothing to write
    segment, dels, _ = books.take_dels()  # type: ignore[misc]
    assert segment == 1 and books.take_dels() is None
    data += dels
    replayed = JournalBooks()
    report = replayed.replay([(1, bytes(data))], now_ms=1_000)
    assert [(m.raw, m.addresses) for m in report.messages] == [(b"a", ("s2",)), (b"d", ("s2",))]
    assert report.corrupt == [] and report.records == 5 and replayed.segment == 2 and replayed.last_id == 4
    assert replayed.remove(1, "s2") and replayed.live == 1


def test_segments_go_oldest_first_once_settled_or_expired() -> None:
    books = JournalBooks(segment_bytes=300)
    for i in range(6):  # ~120 bytes each: two per segment
        books.put(_stored(bytes(80), "s", expiry=1_000 if i < 2 else 5_000))
    assert books.segments == [1, 2, 3]
    assert books.reclaimable(now_ms=500) == []
    assert books.reclaimable(now_ms=1_000) == [1]  # its two messages expired
    books.remove(5, "s")
    books.remove(6, "s")  # segment 3 is the one appended to: kept
    assert books.reclaimable(now_ms=1_000) == []
    books.remove(3, "s")
    books.remove(4, "s")
    assert books.reclaimable(now_ms=1_000) == [2] and books.live == 0
