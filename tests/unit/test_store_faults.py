"""The durable store on a full or failing disk: ENOSPC and EIO injected at every file operation of
a scripted workload (segment creation, header, records, fsyncs, rename, truncation, deletion,
recovery), with the store writing on after the fault as if space had come back; then the
directory is recovered as a fresh process would (the files as a kill -9 leaves them, and as a
power cut would): exactly the messages whose commits reported ok come back (whole), no refused
one does. Also: recovery on a disk that takes no writes, an unreadable store, the probe that
resumes durable writes, records that fit where the zero pre-extension does not; the broker core
refuses durable messages while the store cannot write (a real store process SIGKILLed:
tests/integration/test_store_faults_process.py)."""
from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interchange.broker import segment_files
from interchange.broker.admission import Admission
from interchange.broker.durable import Durability
from interchange.broker.engine import Rejected
from interchange.broker.journal import MAGIC, JournalBooks, StoredMessage, segment_name
from interchange.broker.segment_files import SegmentWriter, recover
from interchange.broker.store import JournalStore
from interchange.broker.ttl_policy import TtlPolicy
from interchange.testing.broker_harness import denm
from interchange.testing.store_faults import (
    ERRNOS,
    KINDS,
    SEEDED,
    ZERO_CHUNK,
    Expected,
    FaultyOps,
    Plan,
    never,
    recovered,
    run_with,
    single,
    workload_calls,
)


@pytest.fixture(scope="module")
def clean_calls(tmp_path_factory: pytest.TempPathFactory) -> FaultyOps:
    """The calls of the workload when nothing fails (what the fault runs enumerate)."""
    return workload_calls(tmp_path_factory.mktemp("clean") / "store", seeded=True)


@pytest.fixture(scope="module")
def fresh_calls(tmp_path_factory: pytest.TempPathFactory) -> FaultyOps:
    """The same on a data directory where the store does not exist yet."""
    return workload_calls(tmp_path_factory.mktemp("fresh") / "store", seeded=False)


def test_the_workload_uses_every_operation(clean_calls: FaultyOps, fresh_calls: FaultyOps) -> None:
    for kind in KINDS:
        assert (fresh_calls if kind == "mkdir" else clean_calls).calls[kind] > 0, kind
    assert clean_calls.calls["fdatasync"] > 10 and clean_calls.calls["rename"] >= 3  # many commits, segments


@pytest.mark.parametrize("code", ERRNOS, ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("kind", KINDS)
def test_one_failure_at_any_call_loses_and_resurrects_nothing(
        clean_calls: FaultyOps, tmp_path: Path, kind: str, code: int) -> None:
    """Every call of ``kind`` in turn fails once; the store writes on afterwards. Recovered, at the
    end and right after the failure, kill -9 or power cut: exactly what was acknowledged, whole."""
    for index in range(clean_calls.calls[kind]):
        outcome = run_with(tmp_path / f"{index}", single(kind, index, code), exact_at_failure=True)
        assert outcome.faults == [(kind, index, code)]
        if kind in ("listdir", "read"):  # an unreadable store: nothing written, nothing lost
            assert set(outcome.ok) == set(range(1, SEEDED + 1)) and outcome.refused


@pytest.mark.parametrize("code", ERRNOS, ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("kind", ["mkdir", "fsync", "open"])
def test_one_failure_while_the_store_directory_is_made_loses_nothing(
        fresh_calls: FaultyOps, tmp_path: Path, kind: str, code: int) -> None:
    for index in range(min(fresh_calls.calls[kind], 6)):  # (the first segment: directory, parent, file)
        outcome = run_with(tmp_path / f"{index}", single(kind, index, code), exact_at_failure=True, seeded=False)
        assert outcome.faults == [(kind, index, code)]


def _old_switch(self: SegmentWriter, segment: int) -> None:
    """Segment creation as it was: the number taken before the header is written, in place."""
    if self.fd >= 0:
        self.ops.close(self.fd)
    self.fd = self.ops.open(os.path.join(self.directory, segment_name(segment)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    self.number = segment
    self.ops.pwrite(self.fd, MAGIC, 0)
    self.end = self.offset = self.zeroed = len(MAGIC)
    self.ops.fsync(self.fd)
    segment_files._sync_directory(self.ops, self.directory)


def _undo_without_kill(self: SegmentWriter, failure: OSError, puts: Any) -> None:
    """The undo, but a segment given up gets no DEL for the records left in it."""
    try:
        self.ops.ftruncate(self.fd, self.end)
        self.ops.fdatasync(self.fd)
    except OSError:
        self._give_up(self.number, failure)
        return
    self.offset = self.zeroed = self.end


def _unlink_on(self: SegmentWriter, segments: list[int]) -> list[str]:
    """Deleting settled segments past one that could not be deleted."""
    for number in segments:
        with contextlib.suppress(OSError):
            self.ops.unlink(os.path.join(self.directory, segment_name(number)))
    return []


def _pair(first: tuple[str, int], second: tuple[str, int]) -> Plan:
    return lambda kind, index, total: errno.EIO if (kind, index) in (first, second) else None


MUTANTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], Callable[[FaultyOps], list[Plan]], bool]] = {
    # name: (the broken code, the plans that should show it, exact at the failure)
    "a failed write is not cut back": (
        lambda mp: mp.setattr(SegmentWriter, "_undo", lambda self, failure, puts: None),
        lambda calls: [single("pwrite", i, errno.ENOSPC) for i in range(calls.calls["pwrite"])], True),
    "a given-up segment's records get no DEL": (
        lambda mp: mp.setattr(SegmentWriter, "_undo", _undo_without_kill),
        lambda calls: [_pair(("pwrite", i), ("ftruncate", 1)) for i in range(calls.calls["pwrite"])], False),
    "the number is taken before the header is written": (
        lambda mp: mp.setattr(SegmentWriter, "_switch", _old_switch),
        lambda calls: [single("pwrite", i, errno.ENOSPC) for i in range(calls.calls["pwrite"])], True),
    "the directory is not synced after a rename": (
        lambda mp: mp.setattr(segment_files, "_sync_directory", lambda ops, directory: None),
        lambda calls: [never], True),
    "a failed write's releases are not written again": (
        lambda mp: mp.setattr(JournalBooks, "failed", lambda self, puts, dels, segment, size: None),
        lambda calls: [single("fdatasync", i, errno.EIO) for i in range(calls.calls["fdatasync"])], True),
    "settled segments are deleted past one that is not": (
        lambda mp: mp.setattr(SegmentWriter, "unlink", _unlink_on),
        lambda calls: [single("unlink", i, errno.EIO) for i in range(calls.calls["unlink"])], True),
    "a failed truncation is taken for a success": (
        lambda mp: mp.setattr(SegmentWriter, "_give_up", lambda self, segment, failure: None),
        lambda calls: [_pair(("fdatasync", i), ("ftruncate", 1)) for i in range(calls.calls["fdatasync"])], False),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_the_checks_catch_a_broken_store(clean_calls: FaultyOps, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         mutant: str) -> None:
    """Each of these mistakes makes some fault run above fail (the checks are not vacuous)."""
    breaks, plans, exact = MUTANTS[mutant]
    breaks(monkeypatch)
    for number, plan in enumerate(plans(clean_calls)):
        try:
            run_with(tmp_path / str(number), plan, exact_at_failure=exact)
        except AssertionError:
            return
    pytest.fail(f"no fault run noticed: {mutant}")


# ------------------------------------------------------------------------------ recovery
def _damaged_store(directory: Path) -> tuple[Expected, int, dict[str, bytes]]:
    """Segment 1: three records and a torn fourth; segment 2: no header; a leftover 3.seg.tmp. (What
    should come back, the intact length of segment 1, the files.)"""
    directory.mkdir(parents=True)
    books = JournalBooks()
    messages = [StoredMessage(f"r{i}".encode() * 30, None, 1, False, "p", ("a",)) for i in range(4)]
    records = [books.put(m)[1] for m in messages]
    (directory / segment_name(1)).write_bytes(MAGIC + b"".join(records)[:-9] + bytes(500))
    (directory / segment_name(2)).write_bytes(b"\x00garbage")
    (directory / (segment_name(3) + ".tmp")).write_bytes(MAGIC[:3])
    expected = {m.message_id: (bytes(m.raw), m.addresses) for m in messages[:3]}
    intact = len(MAGIC) + sum(len(r) for r in records[:3])
    return expected, intact, {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.mark.parametrize("code", ERRNOS, ids=["ENOSPC", "EIO"])
def test_recovery_needs_no_space_and_survives_failing_repairs(tmp_path: Path, code: int) -> None:
    directory = tmp_path / "store"
    expected, intact, before = _damaged_store(directory)
    ops = FaultyOps(lambda kind, index, total: None if kind in ("listdir", "read", "close") else code)
    recovery = recover(str(directory), JournalBooks(), 0, ops)
    assert {m.message_id: (bytes(m.raw), m.addresses) for m in recovery.messages} == expected
    assert [(Path(r.file).name, r.kept_bytes, "injected" in str(r.error)) for r in recovery.corrupt] == [
        (segment_name(1), intact, True), (segment_name(2), 0, True)]
    assert ops.calls["pwrite"] == 0 and ops.calls["mkdir"] == 0  # never a byte written
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before  # left as it was
    # with a working disk: the same messages, the damage cut away (or deleted), still nothing written
    ops = FaultyOps()
    recovery = recover(str(directory), JournalBooks(), 0, ops)
    assert {m.message_id: (bytes(m.raw), m.addresses) for m in recovery.messages} == expected
    assert [r.error for r in recovery.corrupt] == [None, None] and ops.calls["pwrite"] == 0
    assert sorted(p.name for p in directory.iterdir()) == [segment_name(1)]
    assert (directory / segment_name(1)).stat().st_size == intact
    assert recovered(directory) == (expected, [])


async def test_a_store_opens_and_refuses_on_a_disk_that_takes_no_writes(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    expected, _, _ = _damaged_store(directory)
    full = FaultyOps(lambda kind, index, total: None if kind in ("listdir", "read", "close") else errno.ENOSPC)
    events: list[tuple[str, str, dict[str, Any]]] = []
    store, recovery = await JournalStore.open(directory, now_ms=0, ops=full, probe_s=3600,
                                              event=lambda *e: events.append(e))
    try:
        assert {m.message_id for m in recovery.messages} == set(expected)
        await store.drain()
        fault = store.fault
        assert fault is not None and fault.full and "No space left on device" in fault.reason
        commit = store.put(StoredMessage(b"new", None, 1, False, "p", ("a",)))
        await store.drain()
        assert commit.fault is not None and commit.fault.full
        assert [e[1] for e in events] == ["store_write_failed"] and events[0][0] == "error"
    finally:
        await store.close()
    assert recovered(directory)[0] == expected


async def test_an_unreadable_store_refuses_durable_messages_and_touches_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    expected, _, before = _damaged_store(directory)
    ops = FaultyOps(single("read", 0, errno.EIO))
    store, recovery = await JournalStore.open(directory, now_ms=0, ops=ops, probe_s=0.01)
    try:
        assert recovery.unreadable is not None and "Input/output error" in recovery.unreadable
        assert recovery.messages == [] and store.fault is not None and not store.fault.full
        commit = store.put(StoredMessage(b"new", None, 1, False, "p", ("a",)))
        await store.drain()
        await asyncio.sleep(0.05)  # no probe ends this: only a restart with a readable store
        assert commit.fault is not None and store.fault is not None
    finally:
        await store.close()
    assert ops.calls["pwrite"] == ops.calls["unlink"] == ops.calls["ftruncate"] == 0
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    assert recovered(directory)[0] == expected


# ------------------------------------------------------------------------------ the disk fills and frees
class Switch:
    """A disk that is full while ``full`` is set (every write, truncation aside, fails with ENOSPC)."""

    def __init__(self) -> None:
        self.full = False

    def __call__(self, kind: str, index: int, total: int) -> int | None:
        return errno.ENOSPC if self.full and kind in ("open", "pwrite", "mkdir", "rename") else None


async def _until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


async def test_writes_resume_by_themselves_when_space_returns(tmp_path: Path) -> None:
    switch = Switch()
    ops = FaultyOps(switch)
    events: list[tuple[str, str, dict[str, Any]]] = []
    directory = tmp_path / "store"
    store, _ = await JournalStore.open(directory, segment_bytes=2048, now_ms=0, ops=ops, probe_s=0.02,
                                       probe_room=ZERO_CHUNK // 2, zero_chunk=ZERO_CHUNK,
                                       event=lambda *e: events.append(e))
    ok, refused = [], []
    try:
        for round_ in range(3):
            for i in range(30):  # past the preallocated zeros and into new segments
                message = StoredMessage(f"{round_}-{i}".encode() * 20, None, 1, False, "p", ("a",))
                commit = store.put(message)
                await store.drain()
                (ok if commit.fault is None else refused).append((message.message_id, bytes(message.raw)))
            switch.full = not switch.full
            if not switch.full:
                await _until(lambda: store.fault is None)  # the probe found space (nothing was put meanwhile)
    finally:
        await store.close()
    assert refused and len(ok) > 30
    names = [e[1] for e in events]
    assert names.count("store_write_failed") == 1 and names.count("store_writes_resumed") == 1, names
    assert {i: raw for i, (raw, _) in recovered(directory)[0].items()} == dict(ok)


async def test_records_fit_where_the_zero_extension_does_not(tmp_path: Path) -> None:
    """A disk with a few KB left: the 1 MiB extension fails, the records are written all the same."""
    root = tmp_path / "disk"
    root.mkdir()
    ops = FaultyOps(capacity=(root, 70 * 1024))  # the start probe's 64 KiB room fits, 1 MiB does not
    store, _ = await JournalStore.open(root / "store", now_ms=0, ops=ops, probe_s=3600)
    try:
        await store.drain()
        assert store.fault is None
        accepted = []
        while True:
            message = StoredMessage(os.urandom(200), None, 1, False, "p", ("a",))
            commit = store.put(message)
            await store.drain()
            if commit.fault is not None:
                break
            accepted.append((message.message_id, bytes(message.raw)))
        assert commit.fault.full and len(accepted) > 250  # ~70 KB of 242-byte records before the disk was full
    finally:
        await store.close()
    assert {i: raw for i, (raw, _) in recovered(root / "store")[0].items()} == dict(accepted)


# ------------------------------------------------------------------------------ a real process, SIGKILLed


# ------------------------------------------------------------------------------ the broker core's side
async def test_durability_refuses_while_the_store_cannot_write_and_forgets_failed_writes(tmp_path: Path) -> None:
    switch = Switch()
    store, _ = await JournalStore.open(tmp_path / "store", now_ms=0, ops=FaultyOps(switch), probe_s=0.02,
                                       probe_room=ZERO_CHUNK // 2, zero_chunk=ZERO_CHUNK)
    durability = Durability(store)
    admission = Admission(TtlPolicy())

    def routed(body: bytes) -> Any:
        message = admission.admit(bytes(denm(body=body).encode()), "actor-1", False, None, 0)
        message.holders = {"denm"}
        return message

    try:
        durability.check_writable()  # a healthy store: nothing to refuse
        switch.full = True
        message = routed(b"routed when the disk filled")
        commit = durability.store_routed(message)
        assert commit is not None
        await store.drain()
        assert commit.fault is not None and commit.full and "No space left" in str(commit.reason)
        assert message.holders is None and message.store_id == 0  # memory-only now: no DEL will be written for it
        assert durability.stored == 0 and store.live == 0
        with pytest.raises(Rejected) as refused:
            durability.check_writable()
        assert refused.value.condition == "amqp:resource-limit-exceeded" and "disk is full" in refused.value.description
        assert durability.refused == 1
        switch.full = False
        await _until(lambda: store.fault is None)
        durability.check_writable()
        message = routed(b"stored")
        commit = durability.store_routed(message)
        await store.drain()
        assert commit is not None and commit.fault is None and durability.stored == 1 and message.store_id
    finally:
        await store.close()
    assert [raw for raw, _ in recovered(tmp_path / "store")[0].values()] == [bytes(message.raw)]
