"""Handshake outcomes back from the worker (interchange.broker.handshake_queue): applied after the I/O
callbacks of the loop turn that takes them (established connections' bytes first), and outcomes that
came back together take one wake-up of the loop. A pipe stands for an established connection's socket."""
from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from interchange.broker.handshake_queue import HandshakeQueue


class Gated:
    """A connection whose step waits for ``gate`` on the worker; its outcome is recorded in ``log``."""

    def __init__(self, name: str, gate: threading.Event, log: list[str]) -> None:
        self.name, self.gate, self.log = name, gate, log

    def handshake_work(self) -> Callable[[], str]:
        def step() -> str:
            assert self.gate.wait(5)
            return self.name

        return step

    def handshake_done(self, outcome: Any) -> None:
        self.log.append(f"done {outcome}")


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition not reached in 4 s")


def test_an_outcome_is_applied_after_the_io_callbacks_of_the_turn_that_takes_it() -> None:
    """The loop is busy while a step comes back and an established connection's bytes arrive: in the
    next turn the connection's read callback runs first, then the outcome."""
    log: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        loop.add_reader(read_fd, lambda: log.append(f"io {os.read(read_fd, 10)!r}"))
        queue, gate = HandshakeQueue(), threading.Event()
        queue.submit(Gated("c1", gate, log))

        def busy() -> None:  # one callback of the loop: the step comes back and bytes arrive meanwhile
            gate.set()
            time.sleep(0.2)
            os.write(write_fd, b"x")

        loop.call_soon(busy)
        await until(lambda: len(log) == 2)
        assert log == ["io b'x'", "done c1"]
        loop.remove_reader(read_fd)
        os.close(read_fd)
        os.close(write_fd)
        queue.close()

    asyncio.run(main())


def test_outcomes_back_together_take_one_wake_up_of_the_loop() -> None:
    log: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        wakes: list[int] = []
        threadsafe = loop.call_soon_threadsafe

        def counted(callback: Callable[..., Any], *args: Any) -> asyncio.Handle:
            wakes.append(threading.get_ident())
            return threadsafe(callback, *args)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        queue, gate = HandshakeQueue(in_flight=2), threading.Event()
        queue.submit(Gated("c1", gate, log))
        queue.submit(Gated("c2", gate, log))
        assert queue.out == 2

        def busy() -> None:  # both steps run and come back while the loop is busy
            gate.set()
            time.sleep(0.2)

        loop.call_soon(busy)
        await until(lambda: len(log) == 2)
        assert log == ["done c1", "done c2"] and len(wakes) == 1
        queue.submit(Gated("c3", gate, log))  # later, alone: woken again
        await until(lambda: len(log) == 3)
        assert len(wakes) == 2 and queue.stepped == 3
        queue.close()

    asyncio.run(main())
