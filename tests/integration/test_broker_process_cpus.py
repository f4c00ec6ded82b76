"""Where a node's broker processes run (``[broker] process_cpus``, ``[broker.limits] handshake_cpus``): real
node processes (``python -m interchange broker``), their threads' CPUs read from
``/proc/<pid>/task/<tid>/status`` (``Cpus_allowed_list``), a broker process killed and restarted by the node.

These need CPUs 0 and 1 (CI has 2 cores): with fewer they fail, never skip. The config checks and the
control message: tests/unit/test_process_cpus.py.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from certs import TestPki
from interchange.app.config import BrokerConfig, LimitsConfig, LogConfig, NodeConfig, TlsConfig
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.cpu_placement import node_cpus, parse_cpu_list
from interchange.testing.paths import REPO_ROOT
from interchange.testing.broker_harness import (
    BROKER_CN,
    client_connection,
    complete_records,
    denm,
    receive_from_every_process,
    start_node_process,
    terminate,
)

#: A process confined to one CPU shares it with whatever else the suite runs there (a Spark JVM on the other
#: worker): a step that takes 3-4 s alone took up to ~90 s in all over a CI run.
WAIT_S = 60.0


@pytest.fixture(autouse=True)
def two_cpus() -> None:
    cpus = node_cpus()
    assert cpus is not None and {0, 1} <= cpus, f"these tests need CPUs 0 and 1 (this machine: {cpus})"


class _Node:
    """A node of two broker processes run as operators run it: its ports, process 1's pid, its logs."""

    def __init__(self, pki: TestPki, directory: Path, **broker: object) -> None:
        identity = pki.identity(BROKER_CN)
        config = NodeConfig(
            name=BROKER_CN, data_dir=directory,
            tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle, crls=list(pki.crls)),
            broker=BrokerConfig(host="127.0.0.1", port=0, processes=2,
                                targets=[TargetSpec(address="in-1", publishers=frozenset({"actor-1"}), process=1)],
                                sources=[SourceSpec(address="denm", consumers=frozenset({"actor-2"}))], **broker),
            log=LogConfig(path=directory / "node.log", level="info"))
        path = directory / "node.json"
        path.write_text(config.model_dump_json())
        self.log = directory / "node.log"
        self.process, line = start_node_process(path)
        words = line.replace(",", "").split()
        self.ports = [int(word) for word in words[words.index("AMQPS") + 2:words.index("plain")]]
        assert len(self.ports) == 2, line

    def worker_pid(self) -> int:
        """Process 1's pid: the node process's child."""
        children = []
        for entry in os.listdir("/proc"):
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except (OSError, ValueError):
                continue
            if entry.isdigit() and int(stat[stat.rindex(")") + 2:].split()[1]) == self.process.pid:
                children.append(int(entry))
        assert len(children) == 1, children
        return children[0]

    def records(self, event: str, process: int = 0) -> list[dict]:
        path = self.log if process == 0 else self.log.with_name("node.p1.log")
        return [r for r in complete_records(path) if r["event"] == event] if path.exists() else []

    def wait_for(self, event: str, count: int = 1, process: int = 0) -> list[dict]:
        deadline = time.monotonic() + WAIT_S
        while len(found := self.records(event, process)) < count:
            assert time.monotonic() < deadline, f"{count} {event} not logged by process {process}: {found}"
            time.sleep(0.05)
        return found


def _threads(pid: int) -> dict[int, tuple[frozenset[int], bool]]:
    """Each thread of ``pid``: its CPUs (``Cpus_allowed_list``) and whether it is scheduled SCHED_IDLE
    (the TLS handshake worker, :mod:`interchange.broker.handshake_queue`)."""
    threads = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{task}/status").read_text()
            idle = os.sched_getscheduler(int(task)) == os.SCHED_IDLE
        except (OSError, ProcessLookupError):
            continue  # ended meanwhile
        listed = next(line.split(":", 1)[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list:"))
        threads[int(task)] = (parse_cpu_list(listed), idle)
    return threads


def _assert_placed(pid: int, loop: set[int], handshake: set[int]) -> None:
    """The main (event loop) thread and every thread but the handshake worker on ``loop``; the handshake
    worker (there is one: a connection came in) on ``handshake``."""
    threads = _threads(pid)
    assert threads[pid] == (frozenset(loop), False), threads
    assert {cpus for cpus, idle in threads.values() if not idle} == {frozenset(loop)}, threads
    assert {cpus for cpus, idle in threads.values() if idle} == {frozenset(handshake)}, threads


def _round_trip(pki: TestPki, port: int, body: bytes) -> None:
    """A message published to ``in-1`` on ``port`` comes back from that process's copy of ``denm``."""
    connection = client_connection(pki, "actor-1", port)
    try:
        connection.create_sender("in-1").send(denm(body=body))
    finally:
        connection.close()
    assert receive_from_every_process(pki, [port], "denm", 1, timeout=WAIT_S) == [body]


def _kill_worker_and_wait(node: _Node) -> int:
    old = node.worker_pid()
    os.kill(old, signal.SIGKILL)
    node.wait_for("broker_process_restarted")
    new = node.worker_pid()
    assert new != old
    return new


def test_place_process_moves_every_thread() -> None:
    """In a child process: a thread started before and one after ``place_process`` both end on its CPUs."""
    high = max(node_cpus() or ())
    script = f"""
import json, os, threading
from interchange.broker.cpu_placement import place_process
stop = threading.Event()
early = threading.Thread(target=stop.wait); early.start()
assert place_process(frozenset({{{high}}}))
late = threading.Thread(target=stop.wait); late.start()
print(json.dumps({{t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}}))
stop.set()
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=REPO_ROOT).stdout
    threads = json.loads(out)
    assert len(threads) == 3 and all(cpus == [high] for cpus in threads.values()), threads


def test_each_process_runs_on_its_entry_and_a_restarted_one_too(pki: TestPki, tmp_path: Path) -> None:
    """process_cpus [[1], [0]] with handshake_cpus [1]: process 0 wholly on CPU 1; process 1's loop and
    other threads on CPU 0, its handshake worker on CPU 1; the same after process 1 is killed and restarted."""
    node = _Node(pki, tmp_path, process_cpus=[[1], [0]], limits=LimitsConfig(handshake_cpus=[1]))
    try:
        connection = client_connection(pki, "actor-2", node.ports[0])  # a handshake: process 0's worker starts
        connection.close()
        _round_trip(pki, node.ports[1], b"before")
        _assert_placed(node.process.pid, {1}, {1})
        _assert_placed(node.worker_pid(), {0}, {1})
        [record] = node.wait_for("broker_process_cpus")
        assert record["details"]["process"] == 0 and record["details"]["process_cpus"] == [1]
        assert record["details"]["cpus"] == [1] and record["details"]["handshake_cpus"] == [1]
        node.wait_for("broker_process_cpus", process=1)

        pid = _kill_worker_and_wait(node)
        assert _threads(pid)[pid][0] == {0}  # placed before any connection came in
        _round_trip(pki, node.ports[1], b"after-restart")
        _assert_placed(pid, {0}, {1})
        records = node.wait_for("broker_process_cpus", count=2, process=1)
        assert [r["details"]["cpus"] for r in records] == [[0], [0]]
        assert not node.records("broker_process_restart_failed")
    finally:
        terminate(node.process)


def test_without_process_cpus_a_restarted_worker_gets_the_nodes_cpus(pki: TestPki, tmp_path: Path) -> None:
    """handshake_cpus [1] alone: once process 0 has confined its loop to CPU 0 (its first handshake), a
    worker it (re)starts from that thread would inherit CPU 0 only and refuse handshake_cpus [1]; it is
    given the node's CPUs at start instead, restarts, and serves."""
    node = _Node(pki, tmp_path, limits=LimitsConfig(handshake_cpus=[1]))
    try:
        connection = client_connection(pki, "actor-2", node.ports[0])  # process 0's loop to CPU 0 from now on
        connection.close()
        assert _threads(node.process.pid)[node.process.pid][0] == {0}
        pid = _kill_worker_and_wait(node)
        assert _threads(pid)[pid][0] == frozenset(os.sched_getaffinity(0))  # the node's at start (it is our child)
        _round_trip(pki, node.ports[1], b"after-restart")
        assert _threads(pid)[pid][0] == {0}  # its own loop, confined by its own first handshake
        assert not node.records("broker_process_restart_failed"), node.records("broker_process_restart_failed")
        assert not node.records("broker_process_cpus")  # logged only with process_cpus
    finally:
        terminate(node.process)


def test_a_placed_loop_keeps_its_whole_entry_beside_the_handshake_cpus(pki: TestPki, tmp_path: Path) -> None:
    """process_cpus [[0, 1], [0, 1]] with handshake_cpus [1]: the handshake workers go to CPU 1, but the loops
    are not moved to "the others" (CPU 0): they keep their entry."""
    node = _Node(pki, tmp_path, process_cpus=[[0, 1], [0, 1]], limits=LimitsConfig(handshake_cpus=[1]))
    try:
        connection = client_connection(pki, "actor-2", node.ports[0])
        connection.close()
        _round_trip(pki, node.ports[1], b"placed")
        _assert_placed(node.process.pid, {0, 1}, {1})
        _assert_placed(node.worker_pid(), {0, 1}, {1})
    finally:
        terminate(node.process)
