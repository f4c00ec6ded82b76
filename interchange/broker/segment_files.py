"""The durable journal's segment files: the writer thread's appends and start-up recovery.

Contract on a full or failing disk (ENOSPC, EDQUOT, EIO at any call): :meth:`SegmentWriter.commit`
returns once the records are ``fdatasync``'d or raises ``OSError`` with the segment put back as it
was (else the segment is given up and a DEL of the failed messages goes first); a segment is
created whole or not at all; :func:`recover` never needs free space, and an unreadable store is
reported and left untouched. Every file operation goes through :class:`FileOps`
(:class:`OsFileOps` in production), so tests can fail any single call. Details: docs/broker.md
("Durable messages").
"""
from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from interchange.broker.journal import MAGIC, JournalBooks, StoredMessage, encode_dels, segment_name

__all__ = ["FULL_ERRNOS", "FileOps", "OsFileOps", "Repair", "SegmentWriter", "StoreRecovery", "recover"]

#: The errors that mean "no space" (a quota counts too): the store waits for space to come back.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_TMP = ".tmp"


class FileOps(Protocol):
    """The file system calls the store makes (``os`` semantics: an ``OSError`` on failure)."""

    def open(self, path: str, flags: int, mode: int = 0o600) -> int: ...

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int: ...

    def fdatasync(self, fd: int) -> None: ...

    def fsync(self, fd: int) -> None: ...

    def ftruncate(self, fd: int, length: int) -> None: ...

    def close(self, fd: int) -> None: ...

    def rename(self, source: str, target: str) -> None: ...

    def unlink(self, path: str) -> None: ...

    def mkdir(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def read(self, path: str) -> bytes: ...


class OsFileOps:
    """The real calls."""

    open = staticmethod(os.open)
    pwrite = staticmethod(os.pwrite)
    fdatasync = staticmethod(os.fdatasync)
    fsync = staticmethod(os.fsync)
    ftruncate = staticmethod(os.ftruncate)
    close = staticmethod(os.close)
    rename = staticmethod(os.rename)
    unlink = staticmethod(os.unlink)
    mkdir = staticmethod(os.mkdir)
    listdir = staticmethod(os.listdir)

    @staticmethod
    def read(path: str) -> bytes:
        with open(path, "rb") as handle:
            return handle.read()


def _close_quietly(ops: FileOps, fd: int) -> None:
    """Close a descriptor whose data is synced or given up: a close error changes nothing then."""
    try:
        ops.close(fd)
    except OSError:
        pass


def _sync_directory(ops: FileOps, directory: str) -> None:
    fd = ops.open(directory, os.O_RDONLY)
    try:
        ops.fsync(fd)
    finally:
        _close_quietly(ops, fd)


class SegmentWriter:
    """The writer thread's open segment file (one per store; used by that thread only)."""

    ZERO_CHUNK = 1024 * 1024

    def __init__(self, directory: str, ops: FileOps, fsync: bool = True, zero_chunk: int = ZERO_CHUNK,
                 refused: OSError | None = None) -> None:
        self.directory = directory
        self.ops = ops
        self.fsync = fsync
        self.zero_chunk = zero_chunk
        self._zeros = bytes(zero_chunk)
        self.number = 0  #: the open segment (0: none)
        self.fd = -1
        self.end = 0  #: end of the last synced record in it
        self.offset = 0  #: where the next record goes (``end`` between commits)
        self.zeroed = 0  #: the file's size (zeros from ``offset`` up to here)
        self.floor = 1  #: segments below this number are never written again
        self.given_up: OSError | None = refused  #: why the segments below ``floor`` were given up
        if refused is not None:
            self.floor = 1 << 62
        self.kill: list[tuple[int, str]] = []  #: pairs to DEL before anything else is acknowledged
        self._directory_ready = False
        self._doomed: set[int] = set()  #: settled segments still to delete
        self._unsynced = {os.path.dirname(directory) or "."}  #: directories whose entries are not known durable
        self.abandoned: list[int] = []  #: segments given up since the owner last took this list

    # ---------------------------------------------------------------- appends
    def commit(self, segment: int, data: bytes, puts: Iterable[tuple[int, tuple[str, ...]]] = (),
               room: int = 0) -> None:
        """Append ``data`` to ``segment`` and sync it, with at least ``room`` zeros after it; on
        ``OSError`` the store is as it was before (see the module docstring). ``puts``: the
        (id, addresses) of the PUT records in ``data``, to be killed if they cannot be cut off."""
        if segment < self.floor:
            cause = self.given_up
            raise OSError(cause.errno if cause else errno.EIO,
                          f"segment {segment} is closed" + (f" ({cause.strerror})" if cause else ""))
        if segment != self.number:
            self._switch(segment)
        if self.kill:
            data = encode_dels(self.kill) + data
        try:
            self._append(data, room)
            if self.fsync:
                self.ops.fdatasync(self.fd)
        except OSError as exc:
            self._undo(exc, puts)
            raise
        self.end = self.offset
        self.kill = []

    def _append(self, data: bytes, room: int) -> None:
        need = self.offset + len(data)
        if self.zeroed < need + room:
            self._extend(need + room, need + room if room else 0)
        view = memoryview(data)
        offset = self.offset
        while view:
            written = self.ops.pwrite(self.fd, view, offset)
            offset += written
            view = view[written:]
        self.offset = need
        self.zeroed = max(self.zeroed, need)

    def _extend(self, need: int, required: int) -> None:
        """Zeros ahead, whole chunks up to past ``need``; a full disk may stop that early (the records
        then extend the file themselves), but not short of ``required`` (a probe's room)."""
        target = self.zeroed + -(-(need - self.zeroed) // self.zero_chunk) * self.zero_chunk
        zeros = memoryview(self._zeros)
        try:
            while self.zeroed < target:
                self.zeroed += self.ops.pwrite(self.fd, zeros[:target - self.zeroed], self.zeroed)
        except OSError as exc:
            if exc.errno not in FULL_ERRNOS or self.zeroed < required:
                raise

    def _undo(self, failure: OSError, puts: Iterable[tuple[int, tuple[str, ...]]]) -> None:
        """Cut the segment back to its last synced end; give it up when that fails too."""
        try:
            self.ops.ftruncate(self.fd, self.end)
            if self.fsync:
                self.ops.fdatasync(self.fd)
        except OSError:
            self.kill.extend((message_id, address) for message_id, addresses in puts for address in addresses)
            self._give_up(self.number, failure)
            return
        self.offset = self.zeroed = self.end

    # ---------------------------------------------------------------- segments
    def _switch(self, segment: int) -> None:
        """Close the open segment (its records were synced at their commit) and create ``segment``."""
        if self.fd >= 0:
            _close_quietly(self.ops, self.fd)
            self.floor = max(self.floor, self.number + 1)  # never written again (a new name would replace it)
            self.fd, self.number = -1, 0
        self._ensure_directory()
        path = os.path.join(self.directory, segment_name(segment))
        fd = self.ops.open(path + _TMP, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            written = 0
            while written < len(MAGIC):
                written += self.ops.pwrite(fd, MAGIC[written:], written)
            if self.fsync:
                self.ops.fsync(fd)
        except OSError:
            _close_quietly(self.ops, fd)
            self._unlink_quietly(path + _TMP)
            raise
        try:
            self.ops.rename(path + _TMP, path)
            if self.fsync:  # the new name must survive a crash before its records are acknowledged
                _sync_directory(self.ops, self.directory)
        except OSError as exc:  # the name may exist now (a header, no records): never written again
            _close_quietly(self.ops, fd)
            self._unlink_quietly(path + _TMP)
            self._give_up(segment, exc)
            raise
        self.fd, self.number = fd, segment
        self.end = self.offset = self.zeroed = len(MAGIC)

    def _ensure_directory(self) -> None:
        """Create the store directory (and its parents) if missing, and make its entry durable in its
        parent once per process (an earlier one may have made it and died before that)."""
        if self._directory_ready:
            return
        missing = []
        path = self.directory
        while not os.path.isdir(path):
            missing.append(path)
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        for path in reversed(missing):
            try:
                self.ops.mkdir(path)
            except FileExistsError:
                pass
            self._unsynced.add(os.path.dirname(path) or ".")
        if self.fsync:
            for parent in sorted(self._unsynced, reverse=True):
                _sync_directory(self.ops, parent)
                self._unsynced.discard(parent)
        self._directory_ready = True

    def _give_up(self, segment: int, failure: OSError) -> None:
        if self.number == segment and self.fd >= 0:
            _close_quietly(self.ops, self.fd)
            self.fd, self.number = -1, 0
        if segment >= self.floor:
            self.floor = segment + 1
            self.abandoned.append(segment)
        self.given_up = failure

    def _unlink_quietly(self, path: str) -> None:
        try:
            self.ops.unlink(path)
        except OSError:
            pass

    def unlink(self, segments: list[int]) -> list[str]:
        """Delete settled segments, oldest first; one that cannot be deleted stops the newer ones (a
        DEL in them may be what keeps its messages dead) until a later call deletes it. The failures."""
        self._doomed.update(segments)
        for number in sorted(self._doomed):
            if number == self.number:  # (never the one the books append to; defensive)
                self._give_up(number, OSError(errno.ENOENT, "segment deleted"))
            try:
                self.ops.unlink(os.path.join(self.directory, segment_name(number)))
            except FileNotFoundError:
                pass
            except OSError as exc:
                return [f"deleting {segment_name(number)}: {exc} (it and {len(self._doomed) - 1} newer "
                        f"settled segments stay until it can be deleted)"]
            self._doomed.discard(number)
        return []

    def close(self) -> None:
        if self.fd >= 0:
            _close_quietly(self.ops, self.fd)
            self.fd, self.number = -1, 0


# -------------------------------------------------------------------- recovery
@dataclass(frozen=True, slots=True)
class Repair:
    """A damaged segment found at start: its file, the intact bytes kept, why, and what the repair did."""

    file: str
    kept_bytes: int
    reason: str
    error: str | None = None  #: the repair failed (the file was left as it is; replay reads it the same)


@dataclass
class StoreRecovery:
    """What the store found when it opened: the live messages and the damage it repaired."""

    messages: list[StoredMessage]
    corrupt: list[Repair]
    segments: int
    records: int
    unreadable: str | None = None  #: the store could not be read (nothing recovered, nothing touched)


def recover(directory: str, books: JournalBooks, now_ms: int, ops: FileOps) -> StoreRecovery:
    """Read every segment, replay them, cut damaged tails off; never writes a byte (see the module docstring)."""
    try:
        names = ops.listdir(directory)
    except FileNotFoundError:
        names = []
    except OSError as exc:
        return StoreRecovery([], [], 0, 0, f"listing {directory}: {exc}")
    files = []
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(".seg" + _TMP):  # a segment whose creation a crash interrupted: never written to
            try:
                ops.unlink(path)
            except OSError:
                pass
            continue
        stem, dot, suffix = name.partition(".")
        if suffix != "seg" or not stem.isdigit():
            continue
        try:
            files.append((int(stem), ops.read(path)))
        except OSError as exc:
            return StoreRecovery([], [], 0, 0, f"reading {path}: {exc}")
    files.sort()
    replay = books.replay(files, now_ms)
    corrupt = []
    for number, intact, reason in replay.corrupt:
        path = os.path.join(directory, segment_name(number))
        corrupt.append(Repair(path, intact, reason, _cut(ops, path, intact)))
    return StoreRecovery(replay.messages, corrupt, replay.segments, replay.records)


def _cut(ops: FileOps, path: str, intact: int) -> str | None:
    """Keep the intact part of a damaged segment (later appends go to a newer one); a file with no
    intact header goes. Needs no free space. The error, when that failed."""
    try:
        if not intact:
            ops.unlink(path)
            return None
        fd = ops.open(path, os.O_WRONLY)
        try:
            ops.ftruncate(fd, intact)
            ops.fsync(fd)
        finally:
            _close_quietly(ops, fd)
    except OSError as exc:
        return str(exc)
    return None

