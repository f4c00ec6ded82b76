"""The C steady client (``benchmarks/loadgen/steady.c``, bench_deadline_phases.py's ``--steady c``) builds,
makes real round trips against a node process (published, accepted, delivered back on its own receiver),
and its output parses as the benchmark reads it; a round trip the node does not complete is an error, never
a reported time.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from certs import TestPki
from interchange.testing.broker_harness import BROKER_CN, NodeProcess
from interchange.testing.stalled_clients import ensure_c_steady, steady_command


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built afresh by build.sh (not a binary left in build/ by an earlier run)."""
    return ensure_c_steady(tmp_path_factory.mktemp("steady-bin") / "steady")


def node_schedstat(node: NodeProcess) -> str:
    return f"/proc/{node.process.pid}/task/{node.process.pid}/schedstat"


def test_round_trips_against_a_node(binary: Path, deadline_node: NodeProcess, pki: TestPki) -> None:
    done = subprocess.run(steady_command(deadline_node.bi_port, pki.directory, BROKER_CN, count=200, binary=binary,
                                         watch={"node": node_schedstat(deadline_node),
                                                "node_all": f"/proc/{deadline_node.process.pid}/task"}),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["ready"] is True and lines[-1]["done"] == 200 and lines[-1]["cpu_s"] > 0
    trips = lines[1:-1]
    assert len(trips) == 200
    assert lines[0]["at"] <= trips[0]["at"]
    for before, after in zip(trips, trips[1:]):
        assert before["at"] + before["rtt"] <= after["at"], "one round trip at a time"
    assert all(0 < trip["rtt"] < 10 for trip in trips)
    assert all(set(trip["d"]) == {"me", "node", "node_all"} for trip in trips)
    assert all(value >= 0 for trip in trips for pair in trip["d"].values() for value in pair)
    node_cpu = sum(trip["d"]["node"][0] for trip in trips)
    assert node_cpu > 0, "the node's main thread ran during the round trips"
    # the process's threads include the main thread (its other threads are nearly idle here, so without it
    # the sum would be a small part). Not >= node_cpu to the nanosecond: the two files are read one after the
    # other around each round trip, and a thread running on the other CPU has its schedstat runtime brought
    # up to date only at its next tick or switch, so each pair of readings can disagree by up to a tick
    assert sum(trip["d"]["node_all"][0] for trip in trips) >= 0.5 * node_cpu
    assert abs(trips[0]["at"] - time.monotonic()) < 120, "CLOCK_MONOTONIC, Python's time.monotonic()"


def test_paced_round_trips(binary: Path, deadline_node: NodeProcess, pki: TestPki) -> None:
    done = subprocess.run(steady_command(deadline_node.bi_port, pki.directory, BROKER_CN, count=20, pace_ms=25, binary=binary),
                          capture_output=True, text=True, timeout=60, check=True)
    starts = [line["at"] for line in map(json.loads, done.stdout.splitlines()) if "rtt" in line]
    assert len(starts) == 20
    assert starts[-1] - starts[0] >= 19 * 0.025 - 0.002


@pytest.mark.parametrize("option, value", [("--target", "not-a-target"), ("--source", "not-a-source"),
                                           ("--sub-cn", "actor-1")])
def test_a_round_trip_the_node_refuses_is_an_error(option: str, value: str, binary: Path, deadline_node: NodeProcess,
                                                   pki: TestPki) -> None:
    """A target or source the node refuses (actor-1 may not read ``all``): an error line and exit 1."""
    done = subprocess.run([*steady_command(deadline_node.bi_port, pki.directory, BROKER_CN, count=5, binary=binary),
                           option, value], capture_output=True, text=True, timeout=60)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1, lines
    assert not [line for line in lines if "rtt" in line]
    assert "error" in lines[-1], lines


def test_commands_on_stdin(binary: Path, deadline_node: NodeProcess, pki: TestPki) -> None:
    """``watch NAME PATH`` adds a file from the next round trip on; ``stop`` ends the run."""
    process = subprocess.Popen(steady_command(deadline_node.bi_port, pki.directory, BROKER_CN, pace_ms=5, binary=binary),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None
    try:
        assert "ready" in json.loads(process.stdout.readline())
        assert set(json.loads(process.stdout.readline())["d"]) == {"me"}
        process.stdin.write(f"watch node {node_schedstat(deadline_node)}\n")
        process.stdin.flush()
        for _ in range(50):
            line = json.loads(process.stdout.readline())
            if "node" in line["d"]:
                break
        else:
            raise AssertionError("the watch was not taken up")
        process.stdin.write("stop\n")
        process.stdin.flush()
        rest = [json.loads(line) for line in process.stdout]
        assert process.wait(30) == 0
        assert "done" in rest[-1]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert os.path.exists(f"/proc/{deadline_node.process.pid}")
