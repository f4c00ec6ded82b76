"""Heavy II computations in slices on the event loop (the control plane shares the loop
with the broker).

Matching thousands of capabilities against hundreds of selectors is pure CPU work; done in one go
it stalled the data plane and SIGTERM for tens of seconds. The pure computations are written as
generators that ``yield`` between items; :func:`in_slices` runs one for at most ``slice_s`` at a
time and gives the loop a turn in between. Chosen over a worker thread (measured): with the GIL,
a CPU-bound thread makes each of the loop's I/O calls wait up to a switch interval for the
interpreter, and a broker callback took hundreds of milliseconds; slices keep every pause of
the loop to about ``slice_s``. Cancellation (shutdown) takes effect at the next slice.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import TypeVar

__all__ = ["SLICE_S", "Steps", "in_slices", "run_to_end"]

T = TypeVar("T")
SLICE_S = 0.005  #: longest run of a computation before the loop gets a turn
Steps = Generator[None, None, T]  #: a computation that yields between items and returns its result


async def in_slices(steps: Steps[T], slice_s: float = SLICE_S) -> T:
    """Run ``steps`` to its end, ``slice_s`` at a time; its return value."""
    deadline = time.monotonic() + slice_s
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        if time.monotonic() >= deadline:
            await asyncio.sleep(0)
            deadline = time.monotonic() + slice_s


def run_to_end(steps: Steps[T]) -> T:
    """Run ``steps`` at once (callers off the loop, or small inputs)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
