"""The federation harness's check that a recorded pid still runs its node: a node caught while
``ip netns exec`` replaces itself with Python (its command line reads empty for an instant) is
running, a dead one not yet reaped (a zombie, whose command line is empty for good) is not."""
from __future__ import annotations

import subprocess
import sys
import time

from interop_kit.federation import _process_state, _running

MARKER = "--config=/nonexistent/federation-marker.json"


def test_a_process_caught_in_exec_counts_as_running() -> None:
    for _ in range(20):  # each start has an exec window; the tight loop below reads through it
        process = subprocess.Popen(["env", sys.executable, "-c", "import time; time.sleep(5)", MARKER])
        try:
            readings = {_running(process.pid, MARKER) for _ in range(200)}
        finally:
            process.kill()
            process.wait()
        assert readings == {True}


def test_a_zombie_and_another_command_do_not_count() -> None:
    process = subprocess.Popen(["true", MARKER])
    try:
        deadline = time.monotonic() + 10.0
        while _process_state(process.pid) != "Z":
            assert time.monotonic() < deadline, "`true` did not exit within 10 s"
            time.sleep(0.01)
        began = time.monotonic()
        assert not _running(process.pid, MARKER)
        assert time.monotonic() - began < 0.5
    finally:
        process.wait()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert not _running(other.pid, MARKER)
        assert not _running(None, MARKER)
    finally:
        other.kill()
        other.wait()
