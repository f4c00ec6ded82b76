"""The handshake threads' CPUs (``[broker.limits] handshake_cpus``): the worker and the rescue thread
confined to them, the loop's thread to the others while the worker runs, and the config refused when the
CPUs do not exist here, are all of them, or there is no worker (interchange.broker.handshake_queue,
interchange.app.config's [broker] check). No sockets: a thread's CPUs are read back by its native id."""
from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from interchange.app.config import BrokerConfig, LimitsConfig
from interchange.broker.handshake_queue import HandshakeQueue, cpus_problem
from tests.unit.test_handshake_worker import until

USABLE = frozenset(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(USABLE) < 2, reason="placement needs at least two CPUs")


class Probe:
    """A connection whose step reports the native id of the thread it runs on, and that thread's CPUs."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.outcome: Any = None
        self.gate = gate

    def handshake_work(self) -> Callable[[], tuple[int, frozenset[int]]]:
        def step() -> tuple[int, frozenset[int]]:
            if self.gate is not None:
                assert self.gate.wait(5), "the gate was never opened"
            native_id = threading.get_native_id()
            return native_id, frozenset(os.sched_getaffinity(native_id))
        return step

    def handshake_done(self, outcome: Any) -> None:
        self.outcome = outcome


@needs_two
def test_the_worker_runs_on_the_cpus_asked_for_and_the_loop_on_the_others_until_close() -> None:
    asked = frozenset({max(USABLE)})
    loop_id = threading.get_native_id()

    async def main() -> None:
        queue, probe = HandshakeQueue(thread="idle", cpus=asked), Probe()
        try:
            queue.submit(probe)
            await until(lambda: probe.outcome is not None)
            worker_id, seen = probe.outcome
            assert worker_id != loop_id and seen == asked
            assert frozenset(os.sched_getaffinity(worker_id)) == asked  # read back from outside, by its native id
            assert frozenset(os.sched_getaffinity(loop_id)) == USABLE - asked
        finally:
            queue.close()
        assert frozenset(os.sched_getaffinity(loop_id)) == USABLE  # given back

    asyncio.run(main())


@needs_two
def test_a_starved_worker_s_rescue_thread_runs_on_the_same_cpus() -> None:
    asked = frozenset({min(USABLE)})

    async def main() -> None:
        gate = threading.Event()
        queue = HandshakeQueue(thread="idle", in_flight=1, starved_s=0.02, cpus=asked)
        held, rescued = Probe(gate), Probe()
        try:
            queue.submit(held)
            queue.submit(rescued)
            await until(lambda: rescued.outcome is not None)
            assert queue.rescued_turns == 1 and rescued.outcome[1] == asked
            assert frozenset(os.sched_getaffinity(threading.get_native_id())) == USABLE - asked
            gate.set()
            await until(lambda: held.outcome is not None)
            assert held.outcome[1] == asked and held.outcome[0] != rescued.outcome[0]
        finally:
            gate.set()
            queue.close()

    asyncio.run(main())


def test_without_cpus_no_thread_is_placed() -> None:
    async def main() -> None:
        queue, probe = HandshakeQueue(thread="normal"), Probe()
        queue.submit(probe)
        await until(lambda: probe.outcome is not None)
        assert probe.outcome[1] == USABLE and frozenset(os.sched_getaffinity(0)) == USABLE
        queue.close()

    asyncio.run(main())


def test_cpus_that_are_not_usable_all_of_them_none_or_without_a_worker_are_problems() -> None:
    two = frozenset({0, 1})
    assert cpus_problem(frozenset({1}), two, "idle") is None
    assert "CPU 2, 5 is not one this process may use (0, 1)" in (cpus_problem(frozenset({1, 2, 5}), two, "idle") or "")
    assert "every CPU" in (cpus_problem(two, two, "nice") or "")
    assert "no CPU" in (cpus_problem(frozenset(), two, "idle") or "")
    assert "no worker" in (cpus_problem(frozenset({1}), two, "loop") or "")
    assert "cannot confine" in (cpus_problem(frozenset({1}), None, "idle") or "")


def test_the_config_is_checked_against_this_machine_s_cpus() -> None:
    """Checked by [broker] (which knows process_cpus: tests/unit/test_process_cpus.py)."""
    assert LimitsConfig().handshake_cpus is None and LimitsConfig().engine_limits().handshake_cpus is None
    with pytest.raises(ValidationError, match=r"broker.limits.handshake_cpus \[4096\]: CPU 4096 is not one"):
        BrokerConfig(limits=LimitsConfig(handshake_cpus=[4096]))
    with pytest.raises(ValidationError, match="every CPU this process may use"):
        BrokerConfig(limits=LimitsConfig(handshake_cpus=sorted(USABLE)))
    if len(USABLE) >= 2:
        limits = BrokerConfig(limits=LimitsConfig(handshake_cpus=[max(USABLE)])).limits
        assert limits.engine_limits().handshake_cpus == frozenset({max(USABLE)})
        with pytest.raises(ValidationError, match="there is no worker to place"):
            BrokerConfig(limits=LimitsConfig(handshake_cpus=[max(USABLE)], handshake_thread="loop"))
