"""Fault injection for the durable store: :class:`FaultyOps`, the store's file operations with
failures where a plan says, and a model of what a power cut would keep.

Failures act as the kernel's would at their worst (a short ``pwrite``, a ``rename`` that took
effect); after a crash the files are seen as kill -9 leaves them or as a power cut would
(:meth:`FaultyOps.power_cut_image`: only what was synced). :func:`workload` and :func:`run_with`
drive a store under a plan and check what recovery brings back (:class:`Outcome`). As a module
(``python -m interchange.testing.store_faults <directory> <seed>``) it is the child of the
real-process test. The failure model in full: docs/testing.md ("Fault injection").
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interchange.broker.journal import JournalBooks, StoredMessage, segment_name
from interchange.broker.segment_files import OsFileOps, recover
from interchange.broker.store import Commit, JournalStore

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


class FaultyOps:
    """The store's file operations (:class:`~interchange.broker.segment_files.FileOps`) made with ``os``, with
    planned failures (see the module docstring)."""

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


# ---------------------------------------------------------------------- the scripted workload
SEGMENT_BYTES = 700  # a few records per segment: the workload crosses into new segments often
ZERO_CHUNK = 1024
ERRNOS = (errno.ENOSPC, errno.EIO)
KINDS = ("open", "pwrite", "fdatasync", "fsync", "ftruncate", "close", "rename", "unlink", "mkdir", "listdir", "read")

Expected = dict[int, tuple[bytes, tuple[str, ...]]]


@dataclass
class Outcome:
    """What the workload was told: the messages whose commits reported ok or a failure, and the
    releases (one is on disk once a commit of its turn or a later one reports ok; before that, the
    purge of its segment may have deleted the message already, which is what releasing it asks)."""

    ok: dict[int, StoredMessage] = field(default_factory=dict)
    refused: dict[int, bytes] = field(default_factory=dict)  #: (ids repeat only in a store that cannot write)
    durable_releases: set[tuple[int, str]] = field(default_factory=set)
    pending_releases: set[tuple[int, str]] = field(default_factory=set)
    at_failure: "Outcome | None" = None  #: a copy right after the first failed commit
    faults: list[Any] = field(default_factory=list)

    def copy(self) -> Outcome:
        return Outcome(dict(self.ok), dict(self.refused), set(self.durable_releases), set(self.pending_releases))

    def expected(self) -> Expected:
        """What must come back: acknowledged, minus every release."""
        released = self.durable_releases | self.pending_releases
        result = {}
        for message_id, message in self.ok.items():
            addresses = tuple(a for a in message.addresses if (message_id, a) not in released)
            if addresses:
                result[message_id] = (bytes(message.raw), addresses)
        return result

    def check(self, found: Expected, context: str, exact: bool = True) -> None:
        """``found`` is exactly what was acknowledged, whole, minus the releases on disk, and minus
        any of those not on disk yet (none when nothing is pending). Not ``exact``: refused messages
        may be back too (until a later commit has written their DEL)."""
        back = [i for i, (raw, _) in found.items() if self.refused.get(i) == raw]
        assert not back or not exact, f"refused messages came back: {back} ({context})"
        must = self.expected()
        for message_id, (raw, addresses) in found.items():
            if message_id in back:
                continue
            assert message_id in self.ok, f"message {message_id} was never acknowledged ({context})"
            message = self.ok[message_id]
            assert raw == bytes(message.raw), f"message {message_id} is not whole ({context})"
            lowest = set(must.get(message_id, (b"", ()))[1])
            highest = {a for a in message.addresses if (message_id, a) not in self.durable_releases}
            assert lowest <= set(addresses) <= highest, f"message {message_id}: {addresses} ({context})"
        assert set(must) <= set(found), f"acknowledged messages lost: {set(must) - set(found)} ({context})"


async def _step(store: JournalStore, outcome: Outcome, rng: random.Random, number: int) -> bool:
    """One loop turn: a few releases and puts, then wait for their commits; True if all were ok."""
    live = [(i, a) for i, m in outcome.ok.items() for a in m.addresses if i % 9  # (those stay: kept long)
            and (i, a) not in outcome.durable_releases and (i, a) not in outcome.pending_releases]
    for message_id, address in live[:rng.randrange(0, 3)]:
        store.remove(message_id, address)
        outcome.pending_releases.add((message_id, address))
    sent: list[tuple[StoredMessage, Commit]] = []
    for _ in range(rng.randrange(1, 4)):
        raw = f"m{number}-{len(sent)}:".encode() * rng.randrange(2, 40)
        message = StoredMessage(raw, None, 1, False, "p", ("a", "b") if rng.random() < 0.3 else ("a",))
        sent.append((message, store.put(message)))
    if number % 4 == 3:
        store.purge(now_ms=0)
    await store.drain()
    for message, commit in sent:
        if commit.fault is None:
            outcome.ok[message.message_id] = message
        else:
            outcome.refused[message.message_id] = bytes(message.raw)
    if sent[-1][1].fault is None:  # the turn's releases went with its last write
        outcome.durable_releases |= outcome.pending_releases
        outcome.pending_releases.clear()
        return all(commit.fault is None for _, commit in sent)
    return False


SEEDED = 5


async def _seed(directory: Path) -> dict[int, StoredMessage]:
    """A store from an earlier run: a few messages, and the last record torn by a crash (so recovery
    has a tail to cut off, under the same faults)."""
    directory.mkdir()
    store, _ = await JournalStore.open(directory, segment_bytes=SEGMENT_BYTES, now_ms=0, zero_chunk=ZERO_CHUNK,
                                       probe_room=ZERO_CHUNK // 2)
    messages = [StoredMessage(f"s{i}".encode() * 10, None, 1, False, "p", ("a",)) for i in range(SEEDED + 1)]
    for message in messages:
        store.put(message)
    await store.close()
    [segment] = directory.glob("*.seg")
    data = segment.read_bytes()
    end = len(data.rstrip(b"\0"))
    segment.write_bytes(data[:end - 7] + bytes(len(data) - end + 7))
    return {m.message_id: m for m in messages[:SEEDED]}


async def workload(directory: Path, ops: FaultyOps, snapshot: Path | None = None, steps: int = 14,
                    seeded: bool = True) -> Outcome:
    """The scripted workload on a store from an earlier run (or on none: its directory is created)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    outcome = Outcome(ok=await _seed(directory) if seeded else {})
    ops.everything_synced(directory.parent)
    store, _ = await JournalStore.open(directory, segment_bytes=SEGMENT_BYTES, now_ms=0, ops=ops,
                                       probe_s=3600, probe_room=ZERO_CHUNK // 2, zero_chunk=ZERO_CHUNK)
    await store.drain()  # the start probe has reported
    rng = random.Random(11)
    try:
        for number in range(steps):
            if not await _step(store, outcome, rng, number) and outcome.at_failure is None and snapshot:
                outcome.at_failure = outcome.copy()  # nothing is queued now: a kill here leaves these
                kill_snapshot(directory, snapshot / "kill")
                ops.power_cut_image(directory.parent, snapshot / "cut")
        for number in range(steps, steps + 30):  # space is back: write until a commit succeeds
            if await _step(store, outcome, rng, number):
                break
    finally:
        await store.close()
    return outcome


def check_recovered(directory: Path, outcome: Outcome, exact: bool, whole: bool, faults: list[Any]) -> None:
    found, damage = recovered(directory)
    context = f"{directory}: faults {faults}"
    outcome.check(found, context, exact)
    if whole:  # (the seeded torn record stays when its repair failed: replay reads it the same way)
        ours = [(file, reason) for file, reason in damage if Path(file).name != segment_name(1)]
        assert ours == [], f"a half-written record was left: {ours} ({context})"


def run_with(tmp: Path, plan: Plan, exact_at_failure: bool, seeded: bool = True) -> Outcome:
    ops = FaultyOps(plan)
    directory = tmp / "disk" / "store"
    snapshot = tmp / "at-failure"
    outcome = asyncio.run(workload(directory, ops, snapshot, seeded=seeded))
    outcome.faults = faults = ops.injected
    check_recovered(directory, outcome, exact=True, whole=exact_at_failure, faults=faults)
    ops.power_cut_image(directory.parent, tmp / "cut")
    check_recovered(tmp / "cut" / "store", outcome, exact=True, whole=True, faults=faults)
    if outcome.at_failure is not None:
        check_recovered(snapshot / "kill", outcome.at_failure, exact=exact_at_failure, whole=exact_at_failure, faults=faults)
        check_recovered(snapshot / "cut" / "store", outcome.at_failure, exact=exact_at_failure, whole=True, faults=faults)
    return outcome


def workload_calls(directory: Path, seeded: bool) -> FaultyOps:
    ops = FaultyOps()
    outcome = asyncio.run(workload(directory, ops, seeded=seeded))
    assert not outcome.refused and len(outcome.ok) > 20 and not outcome.pending_releases
    assert recovered(directory) == (outcome.expected(), [])
    return ops


# ---------------------------------------------------------------------- the child of the real-process test
async def _child(directory: Path, seed: int) -> None:
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
