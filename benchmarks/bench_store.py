"""Durable store candidates: SQLite in WAL mode vs the append-only segment journal.

The workload is the broker's: group commits of ``--batch`` messages (one fsync each), every
batch also deleting the previous batch's messages (a consumer settled them), for 200 B and
5 KB messages. Both run in one thread with the same fsync policy (SQLite ``synchronous=FULL``:
the WAL is synced at every commit; the journal: ``fdatasync`` per batch), on the same disk.
Reported: messages/s and CPU µs per message (put + delete), and the load average.

    .venv/bin/python benchmarks/bench_store.py [--messages 20000] [--batch 100]
"""
from __future__ import annotations

import argparse
import itertools
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from interchange.broker.journal import JournalBooks, StoredMessage
from interchange.broker.segment_files import OsFileOps, SegmentWriter


def journal_run(directory: Path, payload: bytes, messages: int, batch: int) -> None:
    """What the store's writer thread does per group commit: one append (per segment) and one fdatasync."""
    books = JournalBooks()
    writer = SegmentWriter(str(directory), OsFileOps(), fsync=True)
    previous: list[int] = []
    try:
        for _ in range(messages // batch):
            records: list[tuple[int, bytes]] = []
            puts = []
            for _ in range(batch):
                stored = StoredMessage(payload, 2_000_000_000_000, 1, False, "actor-1", ("denm",))
                records.append(books.put(stored))
                puts.append((stored.message_id, stored.addresses))
            for message_id in previous:
                books.remove(message_id, "denm")
            dels = books.take_dels()
            if dels is not None:
                records.append(dels[:2])
            for segment, group in itertools.groupby(records, key=lambda entry: entry[0]):
                writer.commit(segment, b"".join(record for _, record in group), puts)
            for number in books.reclaimable(0):
                writer.unlink([number])
            previous = [message_id for message_id, _ in puts]
    finally:
        writer.close()


def sqlite_run(directory: Path, payload: bytes, messages: int, batch: int) -> None:
    db = sqlite3.connect(directory / "store.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE message (id INTEGER PRIMARY KEY, expiry INTEGER, arrival INTEGER, federated INTEGER, "
               "publisher TEXT, raw BLOB)")
    db.execute("CREATE TABLE holder (id INTEGER, address TEXT, PRIMARY KEY (id, address)) WITHOUT ROWID")
    next_id = 0
    previous: list[int] = []
    try:
        for _ in range(messages // batch):
            ids = list(range(next_id + 1, next_id + batch + 1))
            next_id += batch
            db.execute("BEGIN")
            db.executemany("INSERT INTO message VALUES (?, ?, ?, ?, ?, ?)",
                           [(i, 2_000_000_000_000, 1, 0, "actor-1", payload) for i in ids])
            db.executemany("INSERT INTO holder VALUES (?, ?)", [(i, "denm") for i in ids])
            db.executemany("DELETE FROM holder WHERE id = ? AND address = ?", [(i, "denm") for i in previous])
            db.executemany("DELETE FROM message WHERE id = ?", [(i,) for i in previous])
            db.execute("COMMIT")
            previous = ids
    finally:
        db.close()


def measure(name: str, run: Callable[[Path, bytes, int, int], None], size: int, messages: int, batch: int) -> None:
    payload = os.urandom(size)
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        wall, cpu = time.perf_counter(), time.process_time()
        run(Path(tmp), payload, messages, batch)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{name:8} {size:6d} B  batch {batch:4d}: {messages / wall:10,.0f} msgs/s  "
          f"{cpu / messages * 1e6:6.1f} µs CPU/msg  ({messages // batch} fsyncs in {wall:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, action="append")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    for batch in args.batch or [1, 100]:
        messages = args.messages if batch > 1 else min(args.messages, 1_000)
        for size in (200, 5_000):
            measure("journal", journal_run, size, messages, batch)
            measure("sqlite", sqlite_run, size, messages, batch)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
