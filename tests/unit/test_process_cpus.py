"""``[broker] process_cpus`` (interchange.broker.cpu_placement, interchange.app.config): the config refused
with a clear message for each bad setting, the CPUs checked against the node's (not the calling thread's
narrowed affinity), handshake_cpus allowed to overlap an entry, the loop's thread left where it was placed,
and the ``start`` control message carrying a worker's CPUs. Real processes
(every thread moved) and their restart: tests/integration/test_broker_process_cpus.py.

The tests that narrow a thread need two CPUs (CI has two): with fewer they fail, never skip."""
from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

from interchange.app.config import BrokerConfig, LimitsConfig
from interchange.app.processes import BrokerProcesses
from interchange.broker.control import ControlCodec, ControlError, Start
from interchange.broker.cpu_placement import _cpuset_files, node_cpus, parse_cpu_list, process_cpus_problem
from interchange.broker.handshake_queue import HandshakeQueue
from tests.unit.test_handshake_cpus import Probe
from tests.unit.test_handshake_worker import until

NODE = node_cpus()
assert NODE, "this system cannot place threads"
LOW, HIGH = min(NODE), max(NODE)


def _two_cpus() -> None:
    assert len(NODE) >= 2, f"this test needs two CPUs (this machine: {sorted(NODE)})"


def _refused(match: str, **broker: object) -> None:
    with pytest.raises(ValidationError, match=match):
        BrokerConfig(**broker)


def test_a_kernel_cpu_list_is_read() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert parse_cpu_list("1") == frozenset({1})
    with pytest.raises(ValueError):
        parse_cpu_list("a-b")


def test_each_bad_setting_is_refused_with_a_clear_message() -> None:
    _refused(rf"broker.process_cpus \[\[{LOW}\]\]: 1 entries for broker.processes 2: give one CPU list per broker "
             r"process", processes=2, process_cpus=[[LOW]])
    _refused(r"entry 1 \(broker process 1\) names no CPU", processes=2, process_cpus=[[LOW], []])
    _refused(rf"entry 0 \(broker process 0\) names CPU {LOW} more than once", processes=1,
             process_cpus=[[LOW, LOW]])
    _refused(r"entry 1 \(broker process 1\): CPU 4096 is not one this node may use", processes=2,
             process_cpus=[[LOW], [4096]])
    _refused(r"broker.limits.handshake_cpus \[4096\]: CPU 4096 is not one", processes=2,
             process_cpus=[[LOW], [LOW]], limits=LimitsConfig(handshake_cpus=[4096]))
    assert "cannot confine" in (process_cpus_problem([[0]], 1, None) or "")


def test_handshake_cpus_are_still_checked_without_process_cpus() -> None:
    _refused(r"broker.limits.handshake_cpus \[4096\]: CPU 4096 is not one", limits=LimitsConfig(handshake_cpus=[4096]))
    _refused("every CPU this process may use", limits=LimitsConfig(handshake_cpus=sorted(os.sched_getaffinity(0))))
    _refused("there is no worker to place", limits=LimitsConfig(handshake_cpus=[LOW], handshake_thread="loop"))


def test_handshake_cpus_may_overlap_an_entry_and_the_loop_then_stays() -> None:
    every = sorted(NODE)  # all of them: refused without process_cpus (no CPU left to the loop)
    config = BrokerConfig(processes=2, process_cpus=[[HIGH], [LOW]], limits=LimitsConfig(handshake_cpus=every))
    assert config.engine_limits().handshake_loop_placed and config.engine_limits().handshake_cpus == NODE
    assert not BrokerConfig().engine_limits().handshake_loop_placed


def test_the_cpus_are_the_node_s_not_a_narrowed_thread_s() -> None:
    """A worker started from a thread confined to one CPU inherits that one: the config is still checked
    against the node's CPUs."""
    _two_cpus()
    seen: dict[str, object] = {}

    def narrowed() -> None:
        os.sched_setaffinity(0, {LOW})
        seen["node"] = node_cpus()
        try:
            BrokerConfig(processes=2, process_cpus=[[HIGH], [LOW]], limits=LimitsConfig(handshake_cpus=[HIGH]))
        except ValidationError as exc:
            seen["error"] = exc

    thread = threading.Thread(target=narrowed)
    thread.start()
    thread.join()
    assert seen == {"node": NODE}


def test_the_cgroup_cpuset_files_are_found(tmp_path: Path) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("4:memory:/m\n3:cpuset,cpu:/a/b\n0::/c\n")
    root = tmp_path / "fs"
    assert _cpuset_files(cgroup, root) == [
        root / "cpuset" / "a/b" / "cpuset.effective_cpus", root / "cpuset" / "a/b" / "cpuset.cpus",
        root / "c" / "cpuset.cpus.effective", root / "unified" / "c" / "cpuset.cpus.effective"]
    assert _cpuset_files(tmp_path / "missing", root) == []


def test_a_placed_loop_is_not_moved_to_the_other_cpus() -> None:
    async def main() -> None:
        before = frozenset(os.sched_getaffinity(0))
        queue, probe = HandshakeQueue(thread="idle", cpus=frozenset({HIGH}), loop_placed=True), Probe()
        try:
            queue.submit(probe)
            await until(lambda: probe.outcome is not None)
            assert probe.outcome[1] == {HIGH}  # the worker still goes to handshake_cpus
            assert frozenset(os.sched_getaffinity(0)) == before  # the loop stays
        finally:
            queue.close()

    asyncio.run(main())


def test_start_carries_the_worker_s_cpus() -> None:
    codec = ControlCodec()
    start = Start(index=1, processes=2, config={"name": "n"}, cpus=[0, 1])
    assert codec.feed(codec.encode(start)) == [start]
    assert codec.feed(b'{"op": "start", "index": 1, "processes": 2, "config": {}}\n')[0].cpus is None
    with pytest.raises(ControlError, match="cpus"):
        codec.feed(b'{"op": "start", "index": 1, "processes": 2, "config": {}, "cpus": []}\n')


def test_a_worker_is_started_on_its_entry_else_on_the_node_s_cpus_at_start() -> None:
    placed = BrokerProcesses({"broker": {"process_cpus": [[1], [0, 2]]}}, 2, None, None,  # type: ignore[arg-type]
                             cpus=frozenset({0, 1, 2}))
    assert placed._start_message(1, None).cpus == [0, 2]
    free = BrokerProcesses({"broker": {}}, 2, None, None, cpus=frozenset({1, 0}))  # type: ignore[arg-type]
    assert free._start_message(1, None).cpus == [0, 1]
    unknown = BrokerProcesses({"broker": {}}, 2, None, None)  # type: ignore[arg-type]
    assert unknown._start_message(1, None).cpus is None
