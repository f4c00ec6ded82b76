"""Arriving connections' TLS handshakes: a bounded amount per event-loop turn, and a bounded share
of a core per second.

A server handshake step costs the loop a fraction of a millisecond of CPU (its key share and
signature; then the client's certificate chain, about 0.9 ms a connection in all with the test
PKI's keys). When many connections arrive at once, asyncio would run every readable one's step back
to back in one turn, ahead of the established connections' I/O. Here a connection whose handshake
has input waiting is queued (FIFO, once) and two bounds apply:

- per turn: the queue steps connections until :data:`BUDGET_S` of work is done (at least one
  step); the rest wait for the next turn, after the loop has polled its sockets and served what
  came meanwhile. A turn is a due timer (``call_later``), not a ``call_soon`` callback: asyncio runs
  due timers after the turn's I/O callbacks and after what the previous turn scheduled (the
  broker's output flush), so input that arrived during a handshake turn is read, and its answer
  flushed, with one handshake turn in between instead of two;
- per second: a token bucket (:class:`HandshakeBudget`) of handshake CPU seconds, refilled at
  ``cpu_share`` seconds per second (:data:`CPU_SHARE`, ``[broker.limits] handshake_cpu_share``) up
  to :data:`BURST_S`; each step is charged what it cost the thread, and when the bucket is empty
  the next turn waits until it is not. A client waiting for its ServerHello, or for the answer to
  its certificate, uses no CPU either, so this paces the handshake work of the whole machine
  (clients and server) that established connections share the cores with, not only the node's.

The handshake deadline still runs from the accepted socket (:mod:`interchange.broker.deadlines`):
waiting here counts against it. ``N`` connections arriving at once are through in about
``N x 0.9 ms / cpu_share`` (1,000 in ~3.6 s at 0.25), so the share and the handshake deadline are
checked together at start (:func:`burst_capacity`, :data:`MIN_BURST_HANDSHAKES`).
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

#: Handshake work per loop turn (seconds of wall time; at least one step runs per turn).
BUDGET_S = 0.001
#: Handshake CPU seconds per second of time (of one core), by default: a whole core, so by default
#: only the per-turn bound applies. A smaller share (e.g. 0.25) halves an established client's p99
#: while 1,000 connections arrive, but they take ~4x longer to open and each costs more CPU (one
#: wake-up per paced turn): docs/performance.md, "Handshake CPU budget". The operator chooses.
CPU_SHARE = 1.0
#: What the bucket holds when full: handshake CPU seconds that may run back to back (one turn at a
#: time) before the pace applies, so a few connections arriving together do not wait at all.
BURST_S = 0.02
#: A handshake's CPU on the server, as measured (``benchmarks/bench_handshake_cpu.py``), for the
#: start-up check of the share against the deadline.
HANDSHAKE_CPU_S = 0.0009
#: The fewest handshakes arriving at once that must all finish within the handshake deadline.
MIN_BURST_HANDSHAKES = 500


def burst_capacity(cpu_share: float, handshake_timeout_s: float) -> int:
    """How many handshakes arriving at once finish within ``handshake_timeout_s`` at ``cpu_share``
    (the bucket's burst, then the pace)."""
    return int((BURST_S + cpu_share * handshake_timeout_s) / HANDSHAKE_CPU_S)


class HandshakeBudget:
    """A token bucket of handshake CPU seconds (sans-I/O: the caller passes the time).

    Tokens refill at ``cpu_share`` per second up to ``burst_s``; a step's cost is known only once it
    has run, so :meth:`spend` may take the bucket below zero and the next step waits for it."""

    def __init__(self, cpu_share: float = CPU_SHARE, burst_s: float = BURST_S, now: float = 0.0) -> None:
        if not cpu_share > 0:
            raise ValueError(f"the handshake CPU share must be above 0, not {cpu_share}")
        self.cpu_share, self.burst_s = cpu_share, burst_s
        self._tokens, self._at = burst_s, now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(self.burst_s, self._tokens + (now - self._at) * self.cpu_share)
            self._at = now

    def wait_s(self, now: float) -> float:
        """Seconds from ``now`` until a step may run (0: now)."""
        self._refill(now)
        return 0.0 if self._tokens > 0 else -self._tokens / self.cpu_share

    def spend(self, cost_s: float, now: float) -> None:
        """Charge a step that cost ``cost_s`` of CPU, ending at ``now``."""
        self._refill(now)
        self._tokens -= cost_s


class Handshaking(Protocol):
    """A connection with handshake input waiting (implemented by :class:`~interchange.broker.server.AmqpConnection`)."""

    def handshake_step(self) -> None:
        """Feed the waiting input to the TLS session (and what follows from it)."""


class HandshakeQueue:
    """The connections waiting for their next handshake step, stepped :data:`BUDGET_S` per turn
    and paced by a :class:`HandshakeBudget`.

    ``clock`` is wall time (the turn's budget, the bucket's refill); ``cpu_clock`` is this thread's
    CPU time (what a step is charged)."""

    def __init__(self, budget_s: float = BUDGET_S, clock: Callable[[], float] = time.perf_counter,
                 cpu_share: float = CPU_SHARE, cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self._waiting: deque[Handshaking] = deque()
        self._scheduled = False
        self._budget_s = budget_s
        self._clock, self._cpu_clock = clock, cpu_clock
        self.budget = HandshakeBudget(cpu_share, now=clock())
        self.stepped = 0  #: handshake steps run since start
        self.deferred_turns = 0  #: turns that left steps for the next one
        self.paced_turns = 0  #: turns that waited for the bucket
        self.most_waiting = 0  #: the longest the queue has been

    def __len__(self) -> int:
        return len(self._waiting)

    def submit(self, connection: Handshaking) -> None:
        """Queue ``connection`` (once: it keeps its own input until stepped)."""
        self._waiting.append(connection)
        self.most_waiting = max(self.most_waiting, len(self._waiting))
        if not self._scheduled:
            self._schedule()

    def delay_s(self) -> float:
        """Seconds until the next turn may run (the bucket's wait)."""
        return self.budget.wait_s(self._clock())

    def run_turn(self) -> bool:
        """Step connections until the turn's budget or the bucket is spent; True if some are left."""
        waiting, clock, cpu_clock, budget = self._waiting, self._clock, self._cpu_clock, self.budget
        started = clock()
        while waiting:
            cpu = cpu_clock()
            waiting.popleft().handshake_step()
            now = clock()
            budget.spend(cpu_clock() - cpu, now)
            self.stepped += 1
            if now - started >= self._budget_s or budget.wait_s(now) > 0:
                break
        return bool(waiting)

    def _schedule(self) -> None:
        self._scheduled = True
        delay = self.delay_s()
        if delay > 0:
            self.paced_turns += 1
        asyncio.get_running_loop().call_later(delay, self._run)

    def _run(self) -> None:
        self._scheduled = False
        if self.run_turn():
            self.deferred_turns += 1
            self._schedule()
