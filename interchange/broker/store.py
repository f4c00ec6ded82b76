"""The durable message store of one broker process: files, writer thread, group commit.

:class:`MessageStore` is the door the broker core sees; :class:`JournalStore` the one the node
ships: the segment journal of :mod:`interchange.broker.journal` in ``<data_dir>/store/p<k>``.
Group commit: records are encoded on the loop per turn, a writer thread appends them and calls
``fdatasync`` once per batch, then each :class:`Commit`'s waiters run (the publisher's
``accepted``); a message is accepted only once its record is synced. A failed write leaves the
journal as it was; a full or failing disk is a :class:`StoreFault` (``fault``), probed every
``probe_s`` until a write succeeds. Why a journal and not SQLite, and the failure cases in full:
docs/broker.md ("Durable messages").
"""
from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from interchange.broker.journal import JournalBooks, StoredMessage
from interchange.broker.segment_files import (
    FULL_ERRNOS, FileOps, OsFileOps, Repair, SegmentWriter, StoreRecovery, recover,
)

__all__ = ["Commit", "FileOps", "JournalStore", "MessageStore", "OsFileOps", "Repair", "StoreFault", "StoreRecovery"]

Waiter = Callable[[Any, bool], None]
#: (level, event, details): how the store reports what the operator should see (the node's JSON log)
EventLog = Callable[[str, str, dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class StoreFault:
    """Why the store cannot take durable messages now."""

    reason: str  #: e.g. "writing the store in /data/store/p0: [Errno 28] No space left on device"
    full: bool  #: the disk (or a quota) is full: durable messages come back once there is space


class Commit:
    """The messages of one group commit: ``add(callback, arg)`` runs ``callback(arg, ok)`` on the event loop
    once the batch is on disk (``ok``) or could not be written (not ``ok``; ``fault`` says why)."""

    __slots__ = ("waiters", "fault")

    def __init__(self) -> None:
        self.waiters: list[tuple[Waiter, Any]] = []
        self.fault: StoreFault | None = None

    @property
    def reason(self) -> str | None:
        return None if self.fault is None else self.fault.reason

    @property
    def full(self) -> bool:
        return self.fault is not None and self.fault.full

    def add(self, callback: Waiter, arg: Any) -> None:
        self.waiters.append((callback, arg))

    def done(self, fault: StoreFault | None) -> None:
        self.fault = fault
        ok = fault is None
        for callback, arg in self.waiters:
            callback(arg, ok)


class MessageStore(Protocol):
    """What the broker needs from a durable store (called on the event loop only, never blocking)."""

    def put(self, message: StoredMessage) -> Commit:
        """Append ``message`` (sets its ``message_id``); the returned commit reports when it is on disk."""

    def remove(self, message_id: int, address: str) -> None:
        """``address`` is done with the message (settled, evicted, expired, deleted)."""

    def purge(self, now_ms: int) -> None:
        """Delete what only holds settled or expired messages (in the background)."""

    @property
    def live(self) -> int:
        """Messages some source still holds."""

    @property
    def fault(self) -> StoreFault | None:
        """Why durable messages cannot be stored now (None: they can)."""

    async def drain(self) -> None:
        """Wait until everything put or removed so far is on disk."""

    async def close(self) -> None:
        """Drain, then stop."""


@dataclass(slots=True)
class _Write:
    """One loop turn's records for one segment, and what to undo in the books if they fail."""

    segment: int
    data: bytes
    commit: Commit
    puts: list[tuple[int, tuple[str, ...]]]  #: (id, addresses) of the PUT records
    dels: list[tuple[int, str]]  #: the pairs of the DEL record, if any


@dataclass(frozen=True, slots=True)
class _Probe:
    segment: int


_STOP = object()
#: Room a probe wants ahead of the records before durable messages are taken again.
PROBE_ROOM = 64 * 1024


class JournalStore:
    """The append-only segment journal on disk (see the module docstring)."""

    def __init__(self, directory: Path, books: JournalBooks, fsync: bool = True, *, ops: FileOps | None = None,
                 event: EventLog | None = None, probe_s: float = 1.0, probe_room: int = PROBE_ROOM,
                 zero_chunk: int = SegmentWriter.ZERO_CHUNK, unreadable: str | None = None) -> None:
        self.directory = directory
        self._books = books
        self._event = event
        self._probe_s = probe_s
        self._probe_room = probe_room
        self._loop = asyncio.get_running_loop()
        self._segment = books.segment  #: the segment of the records collected this turn
        self._records: list[bytes] = []
        self._puts: list[tuple[int, tuple[str, ...]]] = []
        self._commit = Commit()
        self._scheduled = False
        self._fault: StoreFault | None = None
        self._probing = False  #: a probe is queued or its timer runs
        self._timer: asyncio.TimerHandle | None = None
        refused = None if unreadable is None else OSError(0, unreadable)
        self._writer = SegmentWriter(str(directory), ops or OsFileOps(), fsync, zero_chunk, refused)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_loop, name=f"store-{directory.name}", daemon=True)
        self._thread.start()
        self._closed = False
        self.fsyncs = 0  #: group commits written so far
        self.writes = 0  #: segment writes so far (one per segment per group commit)
        self._permanent = unreadable is not None  #: no probes: only a restart with a readable store helps
        if unreadable is not None:
            self._fault = StoreFault(f"the store in {directory} could not be read at start: {unreadable}", False)
        else:  # find out now whether the disk takes writes (and make room for the first records)
            self._probing = True
            self._queue.put(_Probe(books.segment))

    @classmethod
    async def open(cls, directory: Path, *, segment_bytes: int = 8 * 1024 * 1024, fsync: bool = True,
                   now_ms: int, ops: FileOps | None = None, event: EventLog | None = None, probe_s: float = 1.0,
                   probe_room: int = PROBE_ROOM, zero_chunk: int = SegmentWriter.ZERO_CHUNK,
                   ) -> tuple["JournalStore", StoreRecovery]:
        """Open the store in ``directory``, replaying and repairing its segments off the loop, and find out
        whether the disk takes writes (the directory is created with the first segment)."""
        books = JournalBooks(segment_bytes)
        recovery = await asyncio.to_thread(recover, str(directory), books, now_ms, ops or OsFileOps())
        store = cls(directory, books, fsync, ops=ops, event=event, probe_s=probe_s, probe_room=probe_room,
                    zero_chunk=zero_chunk, unreadable=recovery.unreadable)
        await store.drain()  # the first probe has reported: the first durable message meets a known state
        return store, recovery

    # ------------------------------------------------------------------ event loop side
    def put(self, message: StoredMessage) -> Commit:
        segment, record = self._books.put(message)
        if segment != self._segment:
            if self._records:  # the earlier records of this turn go to the previous segment, as one write
                self._send()
            self._segment = segment
        self._records.append(record)
        self._puts.append((message.message_id, message.addresses))
        self._schedule()
        return self._commit

    def remove(self, message_id: int, address: str) -> None:
        if self._books.remove(message_id, address):
            self._schedule()

    def purge(self, now_ms: int) -> None:
        gone = self._books.reclaimable(now_ms)
        if gone:
            self._submit()
            self._queue.put(("unlink", gone))

    @property
    def live(self) -> int:
        return self._books.live

    @property
    def fault(self) -> StoreFault | None:
        return self._fault

    async def drain(self) -> None:
        self._submit()
        future = self._loop.create_future()
        self._queue.put(("sync", future))
        await future

    async def close(self) -> None:
        if self._closed:
            return
        await self.drain()
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join)

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._submit)

    def _submit(self) -> None:
        """Hand this loop turn's records to the writer thread, joined here (the thread then needs the
        GIL only to take them and to report back)."""
        self._scheduled = False
        dels = self._books.take_dels()
        if dels is not None:
            segment, record, pairs = dels
            if segment != self._segment:
                if self._records:
                    self._send()
                self._segment = segment
            self._records.append(record)
            self._send(pairs)
        elif self._records:
            self._send()

    def _send(self, dels: list[tuple[int, str]] | None = None) -> None:
        records = self._records
        data = b"".join(records) if len(records) > 1 else records[0]
        self._queue.put(_Write(self._segment, data, self._commit, self._puts, dels or []))
        self._records, self._puts, self._commit = [], [], Commit()

    def _report(self, outcomes: list[tuple[_Write | _Probe, OSError | None]], abandoned: list[int],
                problems: list[str]) -> None:
        """The writer's results, in order: the books learn of failures before any waiter runs."""
        for segment in abandoned:
            self._books.abandon(segment)
        for problem in problems:
            self._log("warning", "store_unlink_failed", {"reason": problem})
        for operation, error in outcomes:
            fault = None
            if error is not None:
                fault = self._fault if self._permanent else StoreFault(
                    f"writing the store in {self.directory}: {error}", error.errno in FULL_ERRNOS)
            if isinstance(operation, _Probe):
                self._probing = False
            elif error is not None:
                self._books.failed([message_id for message_id, _ in operation.puts], operation.dels,
                                   operation.segment, len(operation.data))
            self._set_fault(fault)
            if isinstance(operation, _Write):
                operation.commit.done(fault)
        if self._fault is not None and not self._probing and not self._closed and not self._permanent:
            self._probing = True
            self._timer = self._loop.call_later(self._probe_s, self._probe)

    def _probe(self) -> None:
        self._timer = None
        if self._closed or self._fault is None:
            self._probing = False
            return
        self._queue.put(_Probe(self._books.segment))

    def _set_fault(self, fault: StoreFault | None) -> None:
        previous = self._fault
        if fault == previous:
            return
        self._fault = fault
        if fault is not None:
            if previous is None or previous.full != fault.full:  # (once, not per refused message)
                self._log("error", "store_write_failed", {"reason": fault.reason, "disk_full": fault.full})
        else:
            self._log("info", "store_writes_resumed", {"directory": str(self.directory)})
            self._schedule()  # releases noted while the disk failed

    def _log(self, level: str, event: str, details: dict[str, Any]) -> None:
        if self._event is not None:
            self._event(level, event, details)

    # ------------------------------------------------------------------ writer thread
    def _write_loop(self) -> None:
        try:
            while True:
                ops = [self._queue.get()]
                while True:  # group commit: everything that queued up while the disk was busy
                    try:
                        ops.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                if not self._run(ops):
                    return
        finally:
            self._writer.close()

    def _run(self, ops: list[Any]) -> bool:
        """Consecutive writes to one segment become one append and one fdatasync; the rest in order."""
        outcomes: list[tuple[_Write | _Probe, OSError | None]] = []
        problems: list[str] = []
        unit: list[_Write] = []
        futures = []
        running = True
        for op in ops:
            if isinstance(op, _Write):
                if unit and unit[0].segment != op.segment:
                    self._commit_unit(unit, outcomes)
                    unit = []
                unit.append(op)
                continue
            self._commit_unit(unit, outcomes)
            unit = []
            if op is _STOP:
                running = False
            elif isinstance(op, _Probe):
                outcomes.append((op, self._attempt(op.segment, b"", (), self._probe_room)))
            elif op[0] == "unlink":
                problems.extend(self._writer.unlink(op[1]))
            else:
                futures.append(op[1])
        self._commit_unit(unit, outcomes)
        writer = self._writer
        if outcomes or writer.abandoned or problems:
            abandoned, writer.abandoned = writer.abandoned, []
            self._loop.call_soon_threadsafe(self._report, outcomes, abandoned, problems)
        for future in futures:
            self._loop.call_soon_threadsafe(_resolve, future)
        return running

    def _commit_unit(self, unit: list[_Write], outcomes: list[tuple[_Write | _Probe, OSError | None]]) -> None:
        if not unit:
            return
        if len(unit) == 1:
            data, puts = unit[0].data, unit[0].puts
        else:
            data = b"".join(write.data for write in unit)
            puts = [put for write in unit for put in write.puts]
        error = self._attempt(unit[0].segment, data, puts, 0)
        if error is None:
            self.writes += 1
            self.fsyncs += 1
        outcomes.extend((write, error) for write in unit)

    def _attempt(self, segment: int, data: bytes, puts: Any, room: int) -> OSError | None:
        try:
            self._writer.commit(segment, data, puts, room)
        except OSError as exc:
            return exc
        return None


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
