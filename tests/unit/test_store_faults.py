"""The durable store on a full or failing disk: ENOSPC and EIO injected at every file operation of
a scripted workload (segment creation, header, records, fsyncs, rename, truncation, deletion,
recovery), with the store writing on after the fault as if space had come back; then the
directory is recovered as a fresh process would (the files as a kill -9 leaves them, and as a
power cut would): exactly the messages whose commits reported ok come back (whole), no refused
one does. Also: recovery on a disk that takes no writes, an unreadable store, the probe that
resumes durable writes, records that fit where the zero pre-extension does not, and a real
store process SIGKILLed during a disk-full window; the broker core refuses durable messages while
the store cannot write."""
from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from broker_harness import denm
from interchange.broker import segment_files
from interchange.broker.admission import Admission
from interchange.broker.durable import Durability
from interchange.broker.engine import Rejected
from interchange.broker.journal import MAGIC, JournalBooks, StoredMessage, segment_name
from interchange.broker.segment_files import SegmentWriter, recover
from interchange.broker.store import Commit, JournalStore
from interchange.broker.ttl_policy import TtlPolicy
from store_faults import FaultyOps, Plan, digest, kill_snapshot, never, recovered, single, window

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


async def _workload(directory: Path, ops: FaultyOps, snapshot: Path | None = None, steps: int = 14,
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


def _check(directory: Path, outcome: Outcome, exact: bool, whole: bool, faults: list[Any]) -> None:
    found, damage = recovered(directory)
    context = f"{directory}: faults {faults}"
    outcome.check(found, context, exact)
    if whole:  # (the seeded torn record stays when its repair failed: replay reads it the same way)
        ours = [(file, reason) for file, reason in damage if Path(file).name != segment_name(1)]
        assert ours == [], f"a half-written record was left: {ours} ({context})"


def _run_with(tmp: Path, plan: Plan, exact_at_failure: bool, seeded: bool = True) -> Outcome:
    ops = FaultyOps(plan)
    directory = tmp / "disk" / "store"
    snapshot = tmp / "at-failure"
    outcome = asyncio.run(_workload(directory, ops, snapshot, seeded=seeded))
    outcome.faults = faults = ops.injected
    _check(directory, outcome, exact=True, whole=exact_at_failure, faults=faults)
    ops.power_cut_image(directory.parent, tmp / "cut")
    _check(tmp / "cut" / "store", outcome, exact=True, whole=True, faults=faults)
    if outcome.at_failure is not None:
        _check(snapshot / "kill", outcome.at_failure, exact=exact_at_failure, whole=exact_at_failure, faults=faults)
        _check(snapshot / "cut" / "store", outcome.at_failure, exact=exact_at_failure, whole=True, faults=faults)
    return outcome


def _clean_calls(directory: Path, seeded: bool) -> FaultyOps:
    ops = FaultyOps()
    outcome = asyncio.run(_workload(directory, ops, seeded=seeded))
    assert not outcome.refused and len(outcome.ok) > 20 and not outcome.pending_releases
    assert recovered(directory) == (outcome.expected(), [])
    return ops


@pytest.fixture(scope="module")
def clean_calls(tmp_path_factory: pytest.TempPathFactory) -> FaultyOps:
    """The calls of the workload when nothing fails (what the fault runs enumerate)."""
    return _clean_calls(tmp_path_factory.mktemp("clean") / "store", seeded=True)


@pytest.fixture(scope="module")
def fresh_calls(tmp_path_factory: pytest.TempPathFactory) -> FaultyOps:
    """The same on a data directory where the store does not exist yet."""
    return _clean_calls(tmp_path_factory.mktemp("fresh") / "store", seeded=False)


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
        outcome = _run_with(tmp_path / f"{index}", single(kind, index, code), exact_at_failure=True)
        assert outcome.faults == [(kind, index, code)]
        if kind in ("listdir", "read"):  # an unreadable store: nothing written, nothing lost
            assert set(outcome.ok) == set(range(1, SEEDED + 1)) and outcome.refused


@pytest.mark.parametrize("code", ERRNOS, ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("kind", ["mkdir", "fsync", "open"])
def test_one_failure_while_the_store_directory_is_made_loses_nothing(
        fresh_calls: FaultyOps, tmp_path: Path, kind: str, code: int) -> None:
    for index in range(min(fresh_calls.calls[kind], 6)):  # (the first segment: directory, parent, file)
        outcome = _run_with(tmp_path / f"{index}", single(kind, index, code), exact_at_failure=True, seeded=False)
        assert outcome.faults == [(kind, index, code)]


@pytest.mark.parametrize("code", ERRNOS, ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("length", [2, 6])
def test_a_run_of_failures_then_space_loses_and_resurrects_nothing(
        clean_calls: FaultyOps, tmp_path: Path, length: int, code: int) -> None:
    """Every call from one point on fails for a while (the truncation that undoes a failed write
    fails too, segments are given up): once writes succeed again, exactly what was acknowledged."""
    for first in range(clean_calls.total):
        _run_with(tmp_path / f"{first}", window(first, length, code), exact_at_failure=False)


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
            _run_with(tmp_path / str(number), plan, exact_at_failure=exact)
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
@pytest.mark.parametrize("seed", range(4))
def test_a_store_process_killed_during_a_full_disk_keeps_what_it_accepted(tmp_path: Path, seed: int) -> None:
    """A child process writes through a disk-full (or failing) window and is SIGKILLed at a random
    moment after it; every message it reported accepted comes back whole, no refused one does."""
    directory = tmp_path / "store"
    script = Path(__file__).parent / "store_faults.py"
    child = subprocess.Popen([sys.executable, str(script), str(directory), str(seed)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    lines = []
    wanted = random.Random(seed).randrange(400, 900)
    try:
        assert child.stdout.readline() == "ready\n"
        while len(lines) < wanted:
            line = child.stdout.readline()
            assert line, "the store process stopped"
            lines.append(line.split())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    ok = {int(i): d for outcome, i, d in lines if outcome == "ok"}
    refused = {int(i) for outcome, i, d in lines if outcome == "refused"}
    assert refused and ok, "the disk-full window did not happen before the kill"
    found, _ = recovered(directory)
    assert not set(found) & refused
    assert {i: digest(raw) for i, (raw, _) in found.items() if i in ok} == ok


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
