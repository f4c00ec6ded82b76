"""In the ``loop`` mode, arriving connections' handshake steps run a bounded amount per loop turn, in
order, and the loop serves other callbacks between turns (interchange.broker.handshake_queue)."""
from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from interchange.broker.handshake_queue import HandshakeQueue

STEP_S = 0.0004  #: what one step costs on the fake clock


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Arriving:
    """A connection whose handshake step takes STEP_S of the fake clock and is recorded."""

    def __init__(self, name: str, clock: Clock, log: list[str]) -> None:
        self.name, self.clock, self.log = name, clock, log

    def handshake_work(self) -> Callable[[], None]:
        return self.handshake_step

    def handshake_step(self) -> None:
        self.clock.now += STEP_S
        self.log.append(self.name)

    def handshake_done(self, outcome: object) -> None:
        pass


def test_a_turn_steps_until_its_budget_is_spent_in_arrival_order() -> None:
    clock, log = Clock(), []
    queue = HandshakeQueue(budget_s=0.001, clock=clock, thread="loop")
    waiting = [Arriving(f"c{i}", clock, log) for i in range(7)]
    queue._waiting.extend(waiting)  # the turn alone, without a loop
    assert queue.run_turn() and log == ["c0", "c1", "c2"]  # 1.2 ms >= 1 ms: the rest waits
    assert queue.run_turn() and log[3:] == ["c3", "c4", "c5"]
    assert not queue.run_turn() and log[6:] == ["c6"] and len(queue) == 0
    slow = HandshakeQueue(budget_s=0.0001, clock=clock, thread="loop")
    slow._waiting.extend(waiting[:2])
    assert slow.run_turn() and log[7:] == ["c0"]  # at least one step per turn, however slow


def test_the_loop_serves_others_between_turns() -> None:
    clock, log = Clock(), []

    async def main() -> None:
        queue = HandshakeQueue(budget_s=0.001, clock=clock, thread="loop")
        for i in range(9):
            queue.submit(Arriving(f"c{i}", clock, log))
        loop = asyncio.get_running_loop()

        def steady(turns: int) -> None:  # an established connection's work, once per turn
            log.append("steady")
            if turns:
                loop.call_soon(steady, turns - 1)

        loop.call_soon(steady, 4)
        while len(queue):
            await asyncio.sleep(0)
        assert queue.stepped == 9 and queue.deferred_turns == 2

    asyncio.run(main())
    # a turn runs after the loop turn's other callbacks: the steady work first in each
    assert log[:12] == ["steady", "c0", "c1", "c2", "steady", "c3", "c4", "c5", "steady", "c6", "c7", "c8"]


def test_input_that_arrives_during_a_turn_is_answered_after_one_more_turn_not_two() -> None:
    """An established connection's input that arrives while a turn runs is read after that turn,
    and what it scheduled (the broker's flush, ``call_soon``) runs before the next handshake turn.
    A Unix socketpair stands for the connection (asyncio wakes itself through one too)."""
    clock, log = Clock(), []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        queue = HandshakeQueue(budget_s=0.0, clock=clock, thread="loop")  # one step per turn

        class Sending(Arriving):
            def handshake_step(self) -> None:
                super().handshake_step()
                theirs.send(b"x")  # the steady client's request, during this turn

        def read() -> None:
            ours.recv(16)
            log.append("read")
            loop.call_soon(log.append, "flush")  # as BrokerServer.mark_dirty schedules its flush

        loop.add_reader(ours, read)
        try:
            queue.submit(Arriving("c0", clock, log))
            queue.submit(Sending("c1", clock, log))
            for i in range(2, 5):
                queue.submit(Arriving(f"c{i}", clock, log))
            while len(queue):
                await asyncio.sleep(0)
            await asyncio.sleep(0.01)
        finally:
            loop.remove_reader(ours)
            ours.close()
            theirs.close()

    asyncio.run(main())
    assert log == ["c0", "c1", "read", "c2", "flush", "c3", "c4"]
