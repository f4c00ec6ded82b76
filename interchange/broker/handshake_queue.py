"""Arriving connections' TLS handshakes, a bounded amount of them per event-loop turn.

A server handshake step costs the loop a fraction of a millisecond of CPU (its key share and
signature; then the client's certificate chain, about 0.6 ms with the test PKI's P-256 keys). When
many connections arrive at once, asyncio would run every readable one's step back to back in one
turn, ahead of the established connections' I/O: a steady client's round trip then waits for all of
them (p99 29-35 ms while 500 BI connections arrive, 50 at a time; 8-9 ms with this queue). Here a connection whose handshake
has input waiting is queued (FIFO, once) and the queue steps connections until :data:`BUDGET_S` of
work is done in a turn; the rest wait for the next turn, after the loop has polled its sockets and
served what came meanwhile. A turn is a due timer (``call_later(0)``), not a ``call_soon``
callback: asyncio runs due timers after the turn's I/O callbacks and after what the previous turn
scheduled (the broker's output flush), so input that arrived during a handshake turn is read, and
its answer flushed, with one handshake turn in between instead of two. The handshake deadline still
runs from the accepted socket (:mod:`interchange.broker.deadlines`): waiting here counts against it.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

#: Handshake work per loop turn (seconds of wall time; at least one step runs per turn).
BUDGET_S = 0.001


class Handshaking(Protocol):
    """A connection with handshake input waiting (implemented by :class:`~interchange.broker.server.AmqpConnection`)."""

    def handshake_step(self) -> None:
        """Feed the waiting input to the TLS session (and what follows from it)."""


class HandshakeQueue:
    """The connections waiting for their next handshake step, stepped :data:`BUDGET_S` per turn."""

    def __init__(self, budget_s: float = BUDGET_S, clock: Callable[[], float] = time.perf_counter) -> None:
        self._waiting: deque[Handshaking] = deque()
        self._scheduled = False
        self._budget_s = budget_s
        self._clock = clock
        self.stepped = 0  #: handshake steps run since start
        self.deferred_turns = 0  #: turns that left steps for the next one

    def __len__(self) -> int:
        return len(self._waiting)

    def submit(self, connection: Handshaking) -> None:
        """Queue ``connection`` (once: it keeps its own input until stepped)."""
        self._waiting.append(connection)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_later(0, self._run)

    def run_turn(self) -> bool:
        """Step connections until the budget is spent; True if some are left for another turn."""
        waiting, clock = self._waiting, self._clock
        started = clock()
        while waiting:
            waiting.popleft().handshake_step()
            self.stepped += 1
            if clock() - started >= self._budget_s:
                break
        return bool(waiting)

    def _run(self) -> None:
        self._scheduled = False
        if self.run_turn():
            self.deferred_turns += 1
            self._scheduled = True
            asyncio.get_running_loop().call_later(0, self._run)
