"""Arriving connections' TLS handshakes: off the event loop's thread at a low scheduling priority,
and a bounded share of a core per second.

A server handshake step costs a fraction of a millisecond of CPU in one call that cannot be split
(its key share and signature; then the client's certificate chain and its CRL check, about 0.9 ms a
connection in all). When many connections arrive at once, asyncio would run every readable one's
step back to back, ahead of the established connections' I/O. Here a connection whose handshake has
input waiting is queued (FIFO, once) and its step (:meth:`Handshaking.handshake_work`: that input fed
to the sans-I/O session, and the session's OpenSSL call alone,
:meth:`~interchange.broker.tls_stream.TlsSession.handshake`; the outcome made a step back on the
loop's thread) runs where :data:`THREAD` (``[broker.limits] handshake_thread``) says:

- ``native`` (the default): on a worker thread that never takes the GIL, scheduled ``SCHED_IDLE``
  (:mod:`interchange.broker._handshake`, a C thread: the session's ``SSL_do_handshake`` alone, its outcome
  back through an eventfd the loop reads, made the same outcome as ``SSLObject.do_handshake``'s by
  :meth:`~interchange.broker.tls_stream.TlsSession.native_outcome`). A low-priority Python worker may be
  stopped by the kernel while it holds the GIL around its call, and the loop's thread then waits for it;
  this one holds nothing the loop needs. Otherwise as ``idle`` below; its rescue thread is a second C thread
  (at the loop's priority, so a rescued step does not take the GIL either: a Python one, preempted on a busy
  CPU while it held the GIL, kept the loop's thread waiting).
  A session whose context has a Python callback OpenSSL would call in the handshake
  (:func:`~interchange.broker.tls_stream.python_callbacks`), and every session when the extension's self-test
  fails (:func:`~interchange.broker.tls_stream.native_problem`, logged), steps on the Python worker instead;
- ``idle`` / ``nice`` / ``normal``: on one worker thread of its own, scheduled ``SCHED_IDLE``, at
  nice 19, or as the loop. ``SSLObject.do_handshake`` releases the GIL for the crypto, so the loop
  serves established connections meanwhile; at a low priority the kernel also runs the loop's thread
  at once when a steady client's bytes arrive, instead of after the step that holds a core, and the
  worker still uses whatever CPU is left. When that is none for :data:`STARVED_S` (a busy machine),
  the waiting steps go to a second thread, the rescue thread, which runs at the loop's own priority
  (a thread lowered to ``SCHED_IDLE`` or nice 19 cannot be raised again without privileges), until
  the worker is back, so arriving connections are not starved past their deadlines. The rescue is
  not done in the loop's turns: there each step (0.3-1 ms of OpenSSL) would hold up the established
  connections' input behind it, where on its own thread the kernel shares the cores between it and
  the loop, and the loop's thread, woken by input, runs first. At most :data:`IN_FLIGHT` steps are
  out at once (one running, one ready: a flood waits here, in order); each outcome comes back to the loop
  (``call_soon_threadsafe``) and :meth:`Handshaking.handshake_done` applies it there. The worker holds
  the GIL only around that call (no futures, no session bookkeeping): at its low priority the kernel
  may stop it while it holds the GIL, and the loop's thread then waits for it. While a
  connection's step is out its session is the worker's: the connection touches neither it nor its
  BIOs, keeps further input, and drops the outcome if it was closed meanwhile. The session's context
  is chosen when it is made, on the loop (``ReloadingTls.current``: file checks), not in the step on the
  worker;
- ``loop``: in the loop, until :data:`BUDGET_S` of work is done in a turn (at least one step); the
  rest waits for the next turn, a due timer (``call_later``), which asyncio runs after the turn's I/O
  callbacks and after what the previous turn scheduled (the broker's output flush), so input that
  arrived during a handshake turn is read, and answered, with one handshake turn in between.

``[broker.limits] handshake_cpus`` (:data:`CPUS`, default none) confines the worker and the rescue thread
to those CPUs and the loop's thread to the others (``os.sched_setaffinity`` on each thread, when the worker
is first needed; the loop's own set is given back by :meth:`HandshakeQueue.close`), so that OpenSSL's
handshake crypto never runs on the loop's cores; threads that the loop's thread starts afterwards inherit
its set. The CPUs must be ones the process may use, and not all of them (:func:`cpus_problem`, checked
when the config is loaded). When the broker process was placed on CPUs of its own (``[broker] process_cpus``,
:mod:`interchange.broker.cpu_placement`; ``loop_placed``), the loop's thread stays where it was placed: the
handshake CPUs need only be ones the node may use, and may overlap the process's own.

Either way the steps are paced by a token bucket (:class:`HandshakeBudget`) of handshake CPU seconds,
refilled at ``cpu_share`` seconds per second (:data:`CPU_SHARE`, ``[broker.limits]
handshake_cpu_share``) up to :data:`BURST_S`; each step is charged the CPU time of the thread it ran
on, and when the bucket is empty the next step waits until it is not. A client waiting for its
ServerHello, or for the answer to its certificate, uses no CPU either, so this paces the handshake
work of the whole machine (clients and server), not only the node's.

The handshake deadline still runs from the accepted socket (:mod:`interchange.broker.deadlines`):
waiting here counts against it. ``N`` connections arriving at once are through in about
``N x 0.9 ms / cpu_share`` (1,000 in ~3.6 s at 0.25), so the share and the handshake deadline are
checked together at start (:func:`burst_capacity`, :data:`MIN_BURST_HANDSHAKES`).
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, Literal, Protocol, cast

from interchange.broker.cpu_placement import cpu_listing
from interchange.broker.tls_stream import TlsSession, native_problem, native_stepper

log = logging.getLogger(__name__)

#: Where handshake steps run: a worker thread that never takes the GIL, scheduled SCHED_IDLE (``native``); a
#: Python worker thread scheduled SCHED_IDLE, at nice 19, or as the loop's thread; or in the loop's own turns.
HandshakeThread = Literal["native", "idle", "nice", "normal", "loop"]
THREAD: HandshakeThread = "native"
#: The CPUs the worker and the rescue thread are confined to (the loop's thread then to the others); None:
#: no placement, every thread may run on every CPU the process may use.
CPUS: frozenset[int] | None = None
#: Steps out on the worker at once: one running, one ready so the worker never waits for the loop.
IN_FLIGHT = 2
#: No step back from the worker for this long while steps wait (seconds; a step takes ~1 ms of CPU):
#: the worker gets no CPU (a busy machine, whose other work comes first at its low priority), and the
#: loop steps the waiting connections itself, a turn at a time as in the ``loop`` mode, until it is back.
STARVED_S = 0.05
#: Handshake work per loop turn in the ``loop`` mode (seconds of wall time; at least one step per turn).
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


def lower_priority(thread: HandshakeThread, native_id: int = 0) -> str:
    """Schedule the thread ``native_id`` (0: the calling thread) as ``thread`` says (Linux: per thread;
    ``native``: SCHED_IDLE); returns what applies, or why not (a system without it: the thread stays as it is)."""
    try:
        if thread in ("idle", "native"):
            os.sched_setscheduler(native_id, os.SCHED_IDLE, os.sched_param(0))
            return "idle"
        if thread == "nice":
            os.setpriority(os.PRIO_PROCESS, native_id or threading.get_native_id(), 19)
    except (AttributeError, OSError) as exc:
        log.warning("the TLS handshake worker cannot be scheduled %s (%s): it runs as the loop", thread, exc)
        return f"normal ({exc})"
    return thread


def cpus_problem(cpus: frozenset[int], usable: frozenset[int] | None, thread: HandshakeThread,
                 loop_placed: bool = False) -> str | None:
    """Why the handshake threads cannot be confined to ``cpus`` (None: they can): ``usable`` is the CPUs
    the process may use (``os.sched_getaffinity(0)``; with ``loop_placed``, the node's CPUs, as the loop
    keeps its own set; None: the system cannot confine threads)."""
    if thread == "loop":
        return "the handshake steps run in the event loop's turns (handshake_thread = \"loop\"): there is no worker to place"
    if usable is None:
        return "this system cannot confine a thread to CPUs (no os.sched_setaffinity)"
    if not cpus:
        return "no CPU is named"
    unknown = sorted(cpus - usable)
    if unknown:
        return f"CPU {', '.join(map(str, unknown))} is not one this process may use ({cpu_listing(usable)})"
    if cpus >= usable and not loop_placed:
        return f"that is every CPU this process may use ({cpu_listing(usable)}): leave at least one to the event loop"
    return None


def confine(cpus: frozenset[int], what: str, native_id: int = 0) -> frozenset[int] | None:
    """Confine the thread ``native_id`` (0: the calling thread) to ``cpus`` (Linux: per thread); returns
    the set it had, or None if it cannot be confined (logged: it stays as it is)."""
    native_id = native_id or threading.get_native_id()
    try:
        before = frozenset(os.sched_getaffinity(native_id))
        os.sched_setaffinity(native_id, cpus)
    except (AttributeError, OSError) as exc:
        log.warning("the %s thread cannot be confined to CPU %s (%s): it runs on any", what, cpu_listing(cpus), exc)
        return None
    return before


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
    """A connection with handshake input waiting (:class:`~interchange.broker.server.AmqpConnection`,
    :class:`~ii_api.http.tls_site.TlsServerProtocol`)."""

    def handshake_work(self) -> Callable[[], Any] | None:
        """Take the waiting input: the step to run (it touches only the TLS session: the session's bound
        :meth:`~interchange.broker.tls_stream.TlsSession.handshake`, which ``native`` runs on the C thread
        when the session allows), or None (closing)."""

    def handshake_done(self, outcome: Any) -> None:
        """The step's result, or the exception it raised, on the loop's thread."""


def _run(work: Callable[[], Any]) -> Any:
    try:
        return work()
    except Exception as exc:  # noqa: BLE001 - handed to the connection, which logs it and drops itself
        return exc


def _apply(connection: Handshaking, outcome: Any) -> None:
    try:
        connection.handshake_done(outcome)
    except Exception:  # as asyncio does for data_received: logged, the queue goes on
        log.exception("a handshake outcome failed to apply")


class _Worker:
    """The worker thread: steps in through a queue, each outcome and the thread CPU it cost back to the
    loop with ``call_soon_threadsafe``. It holds the GIL only around the step's call (for a TLS session,
    the OpenSSL call alone): at its low priority the kernel may stop it while it holds the GIL, and the
    loop's thread then waits for it, so it does as little Python as there can be (no futures)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, done: Callable[[Handshaking, Any, float], None],
                 cpu_clock: Callable[[], float], started: Callable[[], None], name: str = "tls-handshake") -> None:
        self._inbox: SimpleQueue[tuple[Handshaking, Callable[[], Any]] | None] = SimpleQueue()
        self._loop, self._done, self._cpu_clock, self._started = loop, done, cpu_clock, started
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, connection: Handshaking, work: Callable[[], Any]) -> None:
        self._inbox.put((connection, work))

    def close(self) -> None:
        """The thread ends after the step it runs, if any (that outcome is handed back, or dropped with
        the loop)."""
        self._inbox.put(None)

    def _run(self) -> None:
        self._started()
        get, cpu_clock, back = self._inbox.get, self._cpu_clock, self._loop.call_soon_threadsafe
        while (item := get()) is not None:
            connection, work = item
            cpu = cpu_clock()
            try:
                outcome = work()
            except Exception as exc:  # noqa: BLE001 - handed to the connection, which logs it and drops itself
                outcome = exc
            try:
                back(self._done, connection, outcome, cpu_clock() - cpu)
            except RuntimeError:  # the loop is closed (shutdown): the outcome is dropped
                return


class _NativeWorker:
    """The worker of ``native``: each step a session's OpenSSL call alone on a C thread that never takes the
    GIL (:mod:`interchange.broker._handshake`), its outcome back through an eventfd the loop reads; a step
    whose session must run in Python (:attr:`~interchange.broker.tls_stream.TlsSession.native` None: a
    context with a Python callback) goes to a Python worker thread at the same priority, made when first
    needed."""

    def __init__(self, loop: asyncio.AbstractEventLoop, done: Callable[[Handshaking, Any, float], None],
                 python_worker: Callable[[], _Worker]) -> None:
        self._stepper = native_stepper()
        self.native_id: int = self._stepper.native_id
        self._loop, self._done, self._python_worker = loop, done, python_worker
        self._python: _Worker | None = None
        self._fd = self._stepper.fileno()
        loop.add_reader(self._fd, self._back)

    def submit(self, connection: Handshaking, work: Callable[[], Any]) -> None:
        session = getattr(work, "__self__", None)  # a TlsSession's bound handshake(), or another step
        native = session.native if isinstance(session, TlsSession) else None
        if native is None:
            if self._python is None:
                self._python = self._python_worker()
            self._python.submit(connection, work)
            return
        self._stepper.submit((connection, session), native)

    def _back(self) -> None:
        """On the loop: the outcomes that are back, each made :meth:`TlsSession.handshake`'s."""
        for token, status, cost, errors in self._stepper.results():
            connection, session = cast(tuple[Handshaking, Any], token)
            try:
                outcome = session.native_outcome(status, errors)
            except Exception as exc:  # noqa: BLE001 - handed to the connection, which logs it and drops itself
                outcome = exc
            self._done(connection, outcome, cost)

    def close(self) -> None:
        try:
            self._loop.remove_reader(self._fd)
        except RuntimeError:  # the loop is closed
            pass
        self._stepper.close()
        if self._python is not None:
            self._python.close()


class HandshakeQueue:
    """The connections waiting for their next handshake step, the steps out on the worker, and the
    :class:`HandshakeBudget` that paces them.

    ``clock`` is wall time (the turn's budget, the bucket's refill); ``cpu_clock`` is the CPU time of
    the thread that calls it (what a step is charged: read on the worker for its steps)."""

    def __init__(self, budget_s: float = BUDGET_S, clock: Callable[[], float] = time.perf_counter,
                 cpu_share: float = CPU_SHARE, cpu_clock: Callable[[], float] = time.thread_time,
                 thread: HandshakeThread = THREAD, in_flight: int = IN_FLIGHT, starved_s: float = STARVED_S,
                 cpus: frozenset[int] | None = CPUS, loop_placed: bool = False) -> None:
        self._waiting: deque[Handshaking] = deque()
        self._scheduled = False
        self._budget_s = budget_s
        self._clock, self._cpu_clock = clock, cpu_clock
        self.budget = HandshakeBudget(cpu_share, now=clock())
        self.thread: HandshakeThread = thread
        self._in_flight, self._starved_s = in_flight, starved_s
        self._guarded = False  #: the starvation check is scheduled
        self._last_back = 0.0  #: when the worker last handed a step back (or got one while it had none)
        self._executor: _Worker | _NativeWorker | None = None
        #: the rescue thread, at the loop's priority (made when first needed): in ``native``, a second C thread
        self._rescuer: _Worker | _NativeWorker | None = None
        self.priority: str | None = None  #: the worker's scheduling as applied (None: not started)
        self.cpus = cpus
        self.loop_placed = loop_placed  #: the process has CPUs of its own (process_cpus): the loop is not moved
        self._loop_cpus: tuple[int, frozenset[int]] | None = None  #: the loop thread's id and its set before
        self.out = 0  #: steps on the worker now
        self.rescuing = 0  #: steps on the rescue thread now
        self.stepped = 0  #: handshake steps run since start
        self.deferred_turns = 0  #: ``loop`` mode: turns that left steps for the next one
        self.paced_turns = 0  #: turns (or dispatches) that waited for the bucket
        self.rescued_turns = 0  #: steps handed to the rescue thread while the worker got no CPU
        self.most_waiting = 0  #: the longest the queue has been

    def __len__(self) -> int:
        return len(self._waiting)

    def submit(self, connection: Handshaking) -> None:
        """Queue ``connection`` (once: it keeps its own input until stepped)."""
        self._waiting.append(connection)
        self.most_waiting = max(self.most_waiting, len(self._waiting))
        if self.thread != "loop":
            self._dispatch()
        elif not self._scheduled:
            self._schedule()

    def delay_s(self) -> float:
        """Seconds until the next step may run (the bucket's wait)."""
        return self.budget.wait_s(self._clock())

    def close(self) -> None:
        """Stop the worker and the rescue thread (a step out finishes; its outcome is dropped with the loop),
        and give the loop's thread back the CPUs it had."""
        for worker in (self._executor, self._rescuer):
            if worker is not None:
                worker.close()
        self._executor = self._rescuer = None
        if self._loop_cpus is not None:
            native_id, before = self._loop_cpus
            self._loop_cpus = None
            try:
                os.sched_setaffinity(native_id, before)
            except OSError:  # the thread is gone
                pass

    # on the worker (threads idle, nice, normal) --------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Waiting steps to the worker, or to the rescue thread while the worker is starved."""
        waiting = self._waiting
        while waiting and (self.out < self._in_flight or (self.rescuing < self._in_flight and self._starved())):
            if self._scheduled:
                return  # waiting for the bucket: the timer dispatches
            delay = self.delay_s()
            if delay > 0:
                self._scheduled = True
                self.paced_turns += 1
                asyncio.get_running_loop().call_later(delay, self._paced)
                return
            connection = waiting.popleft()
            work = connection.handshake_work()
            if work is None:
                continue
            if self.out < self._in_flight:
                if not self.out:
                    self._last_back = self._clock()
                self.out += 1
                self._worker().submit(connection, work)
            else:
                self.rescuing += 1
                self.rescued_turns += 1
                self._rescue_thread().submit(connection, work)
        if waiting and self.out and not self._guarded:
            self._guard_in(self._starved_s)

    def _guard_in(self, delay: float) -> None:
        self._guarded = True
        asyncio.get_running_loop().call_later(delay, self._guard)

    def _starved(self) -> bool:
        """The worker has all it may take and has handed nothing back for :data:`STARVED_S`."""
        return self.out >= self._in_flight and self._clock() - self._last_back >= self._starved_s

    def _guard(self) -> None:
        """Steps wait and the worker has handed none back for :data:`STARVED_S`: the rescue thread takes
        them (:meth:`_dispatch`), and each of its outcomes hands it the next while the worker is starved."""
        self._guarded = False
        if not self._waiting or not self.out:
            return
        quiet = self._clock() - self._last_back
        if quiet < self._starved_s:
            self._guard_in(self._starved_s - quiet)
            return
        self._dispatch()

    def _paced(self) -> None:
        self._scheduled = False
        self._dispatch()

    def _worker(self) -> _Worker | _NativeWorker:
        if self._executor is None:
            self._confine_loop()
            self._executor = self._native_worker() if self.thread == "native" else None
            if self._executor is None:
                self._executor = self._python_worker()
        return self._executor

    def _python_worker(self) -> _Worker:
        return _Worker(asyncio.get_running_loop(), self._done, self._cpu_clock, self._started)

    def _native_worker(self) -> _NativeWorker | None:
        """The C worker, scheduled and placed from here (it runs no Python); None if the self-test fails
        (logged: the Python worker, SCHED_IDLE, runs the steps)."""
        problem = native_problem()
        if problem is not None:
            log.warning("TLS handshake steps run on a Python thread (SCHED_IDLE), not the C thread: %s", problem)
            return None
        worker = _NativeWorker(asyncio.get_running_loop(), self._done, self._python_worker)
        self.priority = lower_priority(self.thread, worker.native_id)
        if self.cpus is not None:
            confine(self.cpus, "tls-handshake", worker.native_id)
        return worker

    def _rescue_thread(self) -> _Worker | _NativeWorker:
        if self._rescuer is None:  # made by the loop's thread: it runs at the loop's priority
            if isinstance(self._executor, _NativeWorker):
                # a C thread as the worker, so a rescued step never takes the GIL either: a Python rescue thread
                # preempted on a busy CPU while it holds the GIL would hold up the loop's thread behind it
                rescuer = _NativeWorker(asyncio.get_running_loop(), self._rescued, self._python_rescue_thread)
                if self.cpus is not None:
                    confine(self.cpus, "tls-handshake-rescue", rescuer.native_id)
                self._rescuer = rescuer
            else:
                self._rescuer = self._python_rescue_thread()
        return self._rescuer

    def _python_rescue_thread(self) -> _Worker:
        return _Worker(asyncio.get_running_loop(), self._rescued, self._cpu_clock, self._confine,
                       name="tls-handshake-rescue")

    def _confine_loop(self) -> None:
        """On the loop's thread, before the worker starts: the loop to the CPUs the worker is not given."""
        if self.cpus is None or self._loop_cpus is not None or self.loop_placed:
            return
        others = frozenset(os.sched_getaffinity(0)) - self.cpus
        if not others:  # the process was confined to the worker's CPUs since the config was checked
            log.warning("no CPU is left to the event loop beside the handshake worker's (%s)", cpu_listing(self.cpus))
            return
        before = confine(others, "event loop")
        if before is not None:
            self._loop_cpus = (threading.get_native_id(), before)

    def _confine(self) -> None:
        if self.cpus is not None:
            confine(self.cpus, threading.current_thread().name)

    def _started(self) -> None:
        """The worker thread's first acts: its scheduling, its CPUs."""
        self.priority = lower_priority(self.thread)
        self._confine()

    def _done(self, connection: Handshaking, outcome: Any, cost: float) -> None:
        self.out -= 1
        self._last_back = self._clock()
        self.stepped += 1
        self.budget.spend(cost, self._last_back)
        _apply(connection, outcome)
        self._dispatch()

    def _rescued(self, connection: Handshaking, outcome: Any, cost: float) -> None:
        self.rescuing -= 1
        self.stepped += 1
        self.budget.spend(cost, self._clock())
        _apply(connection, outcome)
        self._dispatch()

    # in the loop's turns ----------------------------------------------------------------
    def run_turn(self) -> bool:
        """Step connections until the turn's budget or the bucket is spent; True if some are left."""
        waiting, clock, cpu_clock, budget = self._waiting, self._clock, self._cpu_clock, self.budget
        started = clock()
        while waiting:
            cpu = cpu_clock()
            connection = waiting.popleft()
            work = connection.handshake_work()
            if work is not None:
                _apply(connection, _run(work))
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
        asyncio.get_running_loop().call_later(delay, self._turn)

    def _turn(self) -> None:
        self._scheduled = False
        if self.run_turn():
            self.deferred_turns += 1
            self._schedule()
