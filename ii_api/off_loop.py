"""Heavy II computations off the event loop (issue 10: the control plane shares the loop with the broker).

Matching thousands of capabilities against hundreds of selectors is pure CPU work; run on the
loop it stalled the data plane and SIGTERM for tens of seconds. :func:`off_loop` runs such a pure
function in a worker thread (the worker hands the interpreter back at every ``check()``) and, when the
awaiting task is cancelled (shutdown), tells the function to stop at its next check so that the
thread ends at once instead of holding the interpreter's exit.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Cancelled", "off_loop"]

T = TypeVar("T")


class Cancelled(Exception):
    """Raised inside the worker by ``check()`` once the awaiting task was cancelled."""


async def off_loop(work: Callable[[Callable[[], None]], T]) -> T:
    """``work(check)`` in a worker thread; ``work`` calls ``check()`` between items (it raises
    :class:`Cancelled` after the caller was cancelled)."""
    stop = threading.Event()

    def check() -> None:
        if stop.is_set():
            raise Cancelled
        # Hand the interpreter to the loop now: otherwise each of the loop's I/O calls waits out a
        # full switch interval to get it back, and a callback can take hundreds of milliseconds.
        time.sleep(0)

    try:
        return await asyncio.to_thread(work, check)
    except asyncio.CancelledError:
        stop.set()
        raise
