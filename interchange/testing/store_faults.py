"""Fault injection for the durable store: :class:`FaultyOps`, the store's file operations with
failures where a plan says, and a model of what a power cut would keep.

A planned failure acts as the kernel's would at its worst: a failing ``pwrite`` first writes half of
its bytes (a short write, then the error), a failing ``close`` still releases the descriptor, a
failing ``rename`` with EIO has taken effect (the caller cannot know); every other failing call
does nothing. Two views of the files after a crash:

- kill -9: the files as they are (the page cache survives the process);
- power cut (:meth:`FaultyOps.power_cut_image`): each file as of its last successful
  ``fsync``/``fdatasync`` and each directory's entries as of its last successful ``fsync`` (nothing
  unsynced survives). The real sync calls are made only with ``sync`` (durability is modelled,
  which keeps the tests fast on any disk).

Run as a script (``python tests/store_faults.py <directory> <seed>``) it is the child of the
real-process test: a store with a random disk-full window that prints each message's outcome.
"""
from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import random
import shutil
import stat
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from interchange.broker.journal import JournalBooks, StoredMessage
from interchange.broker.segment_files import OsFileOps, recover

#: plan(kind, index of this call among its kind, index among all calls) -> errno to fail with, or None
Plan = Callable[[str, int, int], int | None]


def never(kind: str, index: int, total: int) -> int | None:
    return None


def single(kind: str, index: int, code: int) -> Plan:
    """Fail call ``index`` of ``kind`` with ``code``."""
    return lambda k, i, t: code if k == kind and i == index else None


def window(first: int, length: int, code: int) -> Plan:
    """Fail every call from overall call ``first`` for ``length`` calls (a disk full for a while)."""
    return lambda k, i, t: code if first <= t < first + length else None


class FaultyOps(OsFileOps):
    """:class:`~interchange.broker.segment_files.OsFileOps` with planned failures (see the module docstring)."""

    def __init__(self, plan: Plan = never, capacity: tuple[Path, int] | None = None, sync: bool = False) -> None:
        self.plan = plan
        self.sync = sync  #: make the real sync calls too
        self.capacity = capacity  #: (directory, bytes): its files may not grow beyond that in all (ENOSPC)
        self.calls: Counter[str] = Counter()
        self.total = 0
        self.injected: list[tuple[str, int, int]] = []  #: (kind, index, errno) of each failure
        self.synced: dict[int, bytes] = {}  #: inode -> its content at its last sync
        self.entries: dict[str, dict[str, int]] = {}  #: directory -> its entries (name -> inode) at its last sync
        self.directories: set[int] = set()

    def _fault(self, kind: str) -> int | None:
        index = self.calls[kind]
        self.calls[kind] += 1
        code = self.plan(kind, index, self.total)
        self.total += 1
        if code is not None:
            self.injected.append((kind, index, code))
        return code

    def _raise(self, code: int, what: str) -> None:
        raise OSError(code, f"{os.strerror(code)} (injected: {what})")

    # ------------------------------------------------------------------ the calls
    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if (code := self._fault("open")) is not None:
            self._raise(code, f"open {path}")
        return os.open(path, flags, mode)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if (code := self._fault("pwrite")) is not None:
            os.pwrite(fd, data[:len(data) // 2], offset)
            self._raise(code, "pwrite")
        if self.capacity is not None:
            used = sum(path.stat().st_size for path in self.capacity[0].rglob("*") if path.is_file())
            limit = os.fstat(fd).st_size + self.capacity[1] - used  # how far this file may grow
            if offset + len(data) > limit:
                if offset < limit:  # what fits is written (a short write); the next call fails
                    return os.pwrite(fd, data[:limit - offset], offset)
                self._raise(errno.ENOSPC, "capacity used up")
        return os.pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        if (code := self._fault("fdatasync")) is not None:
            self._raise(code, "fdatasync")
        if self.sync:
            os.fdatasync(fd)
        self._synced(fd)

    def fsync(self, fd: int) -> None:
        if (code := self._fault("fsync")) is not None:
            self._raise(code, "fsync")
        if self.sync:
            os.fsync(fd)
        self._synced(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        if (code := self._fault("ftruncate")) is not None:
            self._raise(code, "ftruncate")
        os.ftruncate(fd, length)

    def close(self, fd: int) -> None:
        code = self._fault("close")
        os.close(fd)
        if code is not None:
            self._raise(code, "close")

    def rename(self, source: str, target: str) -> None:
        code = self._fault("rename")
        if code == errno.EIO:
            os.rename(source, target)
        if code is not None:
            self._raise(code, f"rename {source}")
        os.rename(source, target)

    def unlink(self, path: str) -> None:
        if (code := self._fault("unlink")) is not None:
            self._raise(code, f"unlink {path}")
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        if (code := self._fault("mkdir")) is not None:
            self._raise(code, f"mkdir {path}")
        os.mkdir(path)
        self.directories.add(os.stat(path).st_ino)

    def listdir(self, path: str) -> list[str]:
        if (code := self._fault("listdir")) is not None:
            self._raise(code, f"listdir {path}")
        return os.listdir(path)

    def read(self, path: str) -> bytes:
        if (code := self._fault("read")) is not None:
            self._raise(code, f"read {path}")
        return Path(path).read_bytes()

    # ------------------------------------------------------------------ the power-cut model
    def _synced(self, fd: int) -> None:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            self._sync_entries(os.readlink(f"/proc/self/fd/{fd}"))
        else:
            self.synced[info.st_ino] = Path(f"/proc/self/fd/{fd}").read_bytes()

    def _sync_entries(self, directory: str) -> None:
        self.entries[directory] = {name: os.lstat(os.path.join(directory, name)).st_ino
                                   for name in os.listdir(directory)}

    def everything_synced(self, root: Path) -> None:
        """Take what is under ``root`` now as durable (the state a run starts from)."""
        self._sync_entries(str(root))
        for name in os.listdir(root):
            path = root / name
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                self.directories.add(info.st_ino)
                self.everything_synced(path)
            else:
                self.synced[info.st_ino] = path.read_bytes()

    def power_cut_image(self, root: Path, target: Path) -> None:
        """Write into ``target`` what a power cut now would leave of ``root``."""
        target.mkdir(parents=True, exist_ok=True)
        for name, inode in self.entries.get(str(root), {}).items():
            if inode in self.directories:
                self.power_cut_image(root / name, target / name)
            else:
                (target / name).write_bytes(self.synced.get(inode, b""))


def recovered(directory: Path) -> tuple[dict[int, tuple[bytes, tuple[str, ...]]], list[tuple[str, str]]]:
    """What a fresh process recovers from ``directory`` with working files (and repairs there): id ->
    (raw, addresses), and the damage it reported, (file, reason)."""
    books = JournalBooks()
    recovery = recover(str(directory), books, 0, OsFileOps())
    assert recovery.unreadable is None, recovery.unreadable
    return ({m.message_id: (bytes(m.raw), m.addresses) for m in recovery.messages},
            [(repair.file, repair.reason) for repair in recovery.corrupt])


def digest(raw: bytes | bytearray) -> str:
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


def kill_snapshot(directory: Path, target: Path) -> None:
    """A copy of the files as a kill -9 now would leave them."""
    if directory.exists():
        shutil.copytree(directory, target)
    else:
        target.mkdir(parents=True)


# ---------------------------------------------------------------------- the child of the real-process test
async def _child(directory: Path, seed: int) -> None:
    from interchange.broker.store import JournalStore

    rng = random.Random(seed)
    first = rng.randrange(20, 200)
    ops = FaultyOps(window(first, rng.randrange(5, 60), rng.choice((errno.ENOSPC, errno.EIO))), sync=True)
    store, _ = await JournalStore.open(directory, segment_bytes=4096, now_ms=0, ops=ops, probe_s=0.01,
                                       probe_room=4096, zero_chunk=8192)
    print("ready", flush=True)
    number = 0
    while True:
        batch = []
        for _ in range(rng.randrange(1, 6)):
            number += 1
            raw = f"message {number} ".encode() * rng.randrange(1, 40)
            message = StoredMessage(raw, None, 1, False, "p", ("s",))
            batch.append((message, store.put(message)))
        await store.drain()
        for message, commit in batch:
            outcome = "ok" if commit.fault is None else "refused"
            print(f"{outcome} {message.message_id} {digest(message.raw)}", flush=True)


if __name__ == "__main__":
    asyncio.run(_child(Path(sys.argv[1]), int(sys.argv[2])))
