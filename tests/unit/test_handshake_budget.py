"""The handshake CPU budget: a token bucket that lets a burst through, then paces arriving
connections' handshake steps to a share of a core, and the start-up check of that share against
the handshake deadline (interchange.broker.handshake_queue, interchange.app.config)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from interchange.app.config import BrokerConfig, LimitsConfig, NodeConfig
from interchange.broker.handshake_queue import (
    BURST_S,
    IN_FLIGHT,
    HandshakeBudget,
    HandshakeQueue,
    HandshakeThread,
    burst_capacity,
)
from ii_api.settings.config import IIConfig, RequestLimits

#: broker limits paced to a quarter of a core
PACED = LimitsConfig(handshake_cpu_share=0.25)

STEP_CPU_S = 0.0009  #: what one fake step costs


class Clocks:
    """Wall time and CPU time; a fake step advances the CPU time only (no refill meanwhile)."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def step(self, cost: float = STEP_CPU_S) -> None:
        self.cpu += cost


class Step:
    def __init__(self, name: str, clocks: Clocks, log: list[str], cost: float = STEP_CPU_S) -> None:
        self.name, self.clocks, self.log, self.cost = name, clocks, log, cost

    def handshake_work(self) -> Callable[[], None]:
        return self.handshake_step

    def handshake_step(self) -> None:
        self.clocks.step(self.cost)
        self.log.append(self.name)

    def handshake_done(self, outcome: object) -> None:
        pass


def test_a_burst_goes_through_then_steps_wait_for_the_share() -> None:
    bucket = HandshakeBudget(cpu_share=0.25, burst_s=0.02, now=0.0)
    assert bucket.wait_s(0.0) == 0.0
    bucket.spend(0.019, 0.0)
    assert bucket.wait_s(0.0) == 0.0  # 1 ms left
    bucket.spend(0.009, 0.0)  # a step's cost is known after it ran: the bucket goes below zero
    assert bucket.wait_s(0.0) == pytest.approx(0.008 / 0.25)
    assert bucket.wait_s(0.016) == pytest.approx(0.016)  # half refilled
    assert bucket.wait_s(0.0321) == 0.0


def test_an_idle_bucket_holds_no_more_than_its_burst() -> None:
    bucket = HandshakeBudget(cpu_share=0.25, burst_s=0.02, now=0.0)
    bucket.spend(0.02 + 0.001, 100.0)  # after 100 s idle: still only the burst
    assert bucket.wait_s(100.0) == pytest.approx(0.004)


def test_over_time_the_steps_get_the_share_and_no_more() -> None:
    bucket, now = HandshakeBudget(cpu_share=0.25, burst_s=BURST_S, now=0.0), 0.0
    for _ in range(5000):  # 4.5 s of handshake CPU
        now += bucket.wait_s(now)
        bucket.spend(STEP_CPU_S, now)
    paced = (5000 * STEP_CPU_S - BURST_S) / 0.25  # the burst free, the rest at 25 %
    assert paced - STEP_CPU_S / 0.25 - 1e-6 <= now <= paced + 1e-6  # the last step's debt unpaid


def test_a_turn_stops_when_the_bucket_is_empty_and_the_next_waits_for_it() -> None:
    clocks, log = Clocks(), []
    queue = HandshakeQueue(budget_s=1.0, clock=lambda: clocks.wall, cpu_share=0.25, cpu_clock=lambda: clocks.cpu,
                           thread="loop")
    queue._waiting.extend(Step(f"c{i}", clocks, log) for i in range(40))  # the turn alone, without a loop
    assert queue.delay_s() == 0.0
    assert queue.run_turn()
    assert len(log) == 23  # 20 ms of burst: the 23rd step (20.7 ms) empties it, within the 1 s turn budget
    assert queue.delay_s() == pytest.approx((23 * STEP_CPU_S - BURST_S) / 0.25)
    clocks.wall += queue.delay_s() + 1e-9
    assert queue.delay_s() == 0.0 and queue.run_turn() and len(log) == 24  # the debt paid: one more step


def test_steps_are_charged_their_cpu_not_their_wall_time() -> None:
    """A step preempted on a busy machine costs the bucket only what it ran."""
    clocks, log = Clocks(), []
    queue = HandshakeQueue(budget_s=10.0, clock=lambda: clocks.wall, cpu_share=0.25, cpu_clock=lambda: clocks.cpu,
                           thread="loop")

    class Preempted(Step):
        def handshake_step(self) -> None:
            super().handshake_step()
            clocks.wall += 0.05  # waited for a core: the bucket refills meanwhile

    queue._waiting.extend(Preempted(f"c{i}", clocks, log) for i in range(30))
    assert not queue.run_turn() and len(log) == 30 and queue.delay_s() == 0.0


@pytest.mark.parametrize("thread", ["loop", "idle"])
def test_paced_steps_run_later_and_in_order(thread: HandshakeThread) -> None:
    """Real loop, real wall time; each step is charged 10 ms of (fake) CPU at a share of 0.25: after the
    20 ms burst, the steps are spread over at least the CPU they were charged, four times over,
    whether they run in the loop's turns or on the worker (charged there). (At that share a busy host
    may keep the worker from a core for up to 80 ms a step and the bucket still has to pace it.)"""
    cpu, log = [0.0], []
    share = 0.25

    class Costly:
        def __init__(self, name: str) -> None:
            self.name = name

        def handshake_work(self) -> Callable[[], None]:
            return self.handshake_step

        def handshake_step(self) -> None:
            cpu[0] += 0.01
            log.append(self.name)

        def handshake_done(self, outcome: object) -> None:
            pass

    async def main() -> float:
        # the pacing alone: no rescue by the loop (on a busy host the idle worker may wait longer than
        # STARVED_S for a core, and the loop would then step the waiting ones itself, as it should)
        queue = HandshakeQueue(budget_s=1.0, cpu_share=share, cpu_clock=lambda: cpu[0], thread=thread, starved_s=60.0)
        started = time.perf_counter()
        for i in range(8):
            queue.submit(Costly(f"c{i}"))
        while len(queue) or queue.out:
            await asyncio.sleep(0.001)
        assert queue.paced_turns >= 1 and queue.most_waiting >= 6 and queue.stepped == 8 and queue.rescued_turns == 0
        queue.close()
        return time.perf_counter() - started

    took = asyncio.run(main())
    assert log == [f"c{i}" for i in range(8)]
    unpaid = 0.01 * (1 if thread == "loop" else IN_FLIGHT)  # the last steps' debt: charged once they are back
    assert took >= (0.08 - BURST_S - unpaid) / share - 0.005  # 80 ms charged: the burst's 20 free


def test_the_default_share_lets_a_burst_of_connections_through_within_the_deadline() -> None:
    assert burst_capacity(0.25, 10.0) >= 2700  # ~0.9 ms each: 2.5 s of handshake CPU in 10 s
    assert LimitsConfig().handshake_cpu_share == 1.0  # not paced unless the operator asks
    LimitsConfig(handshake_timeout_s=3.0, handshake_cpu_share=0.25)  # the deadline tests' time-outs: ~850 fit


def test_a_share_too_small_for_the_deadline_is_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError, match="handshake_cpu_share 0.05 with broker.limits.handshake_timeout_s"):
        LimitsConfig(handshake_cpu_share=0.05, handshake_timeout_s=5.0)
    with pytest.raises(ValidationError, match="ii.limits.handshake_timeout_s 1.0 s lets only ~"):
        NodeConfig(name="n", broker=BrokerConfig(limits=PACED),
                   ii=IIConfig(limits=RequestLimits(handshake_timeout_s=1.0)))
    NodeConfig(name="n", broker=BrokerConfig(limits=PACED), ii=IIConfig(limits=RequestLimits(handshake_timeout_s=3.0)))
    NodeConfig(name="n", ii=IIConfig(limits=RequestLimits(handshake_timeout_s=1.0)))  # not paced: any deadline
