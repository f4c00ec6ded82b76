"""The durable store on a full or failing disk, the long runs: runs of 2 and 6 failing calls from
every call of the scripted workload on (ENOSPC and EIO), and a real store process SIGKILLed during a
disk-full window; each time exactly what was acknowledged comes back, whole, and nothing refused
(one failure at every call, recovery and the mutants: tests/unit/test_store_faults.py)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from interchange.testing.store_faults import ERRNOS, FaultyOps, digest, recovered, run_with, window, workload_calls


@pytest.fixture(scope="module")
def clean_calls(tmp_path_factory: pytest.TempPathFactory) -> FaultyOps:
    """The calls of the workload when nothing fails (what the fault runs enumerate)."""
    return workload_calls(tmp_path_factory.mktemp("clean") / "store", seeded=True)


@pytest.mark.parametrize("code", ERRNOS, ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("length", [2, 6])
def test_a_run_of_failures_then_space_loses_and_resurrects_nothing(
        clean_calls: FaultyOps, tmp_path: Path, length: int, code: int) -> None:
    """Every call from one point on fails for a while (the truncation that undoes a failed write
    fails too, segments are given up): once writes succeed again, exactly what was acknowledged."""
    for first in range(clean_calls.total):
        run_with(tmp_path / f"{first}", window(first, length, code), exact_at_failure=False)



@pytest.mark.parametrize("seed", range(4))
def test_a_store_process_killed_during_a_full_disk_keeps_what_it_accepted(tmp_path: Path, seed: int) -> None:
    """A child process writes through a disk-full (or failing) window and is SIGKILLed at a random
    moment after it; every message it reported accepted comes back whole, no refused one does."""
    directory = tmp_path / "store"
    child = subprocess.Popen([sys.executable, "-m", "interchange.testing.store_faults", str(directory), str(seed)],
                             stdout=subprocess.PIPE, text=True)
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
