"""A steady BI client's round trips beside 500 + 500 stalled connections, per phase, with what the
scheduler did meanwhile: where the loaded p99 of ``tests/integration/test_preamble_deadlines.py``
comes from.

A node process (the test's stage deadlines: 3-4.5 s) serves one steady client (publish, accepted,
delivered back on its own receiver: one round trip at a time). ``--steady c`` (the default):
``benchmarks/loadgen/steady.c`` (proton-C, its own process, built into build/ when missing or older than
its source; about a tenth of the Python client's CPU per round trip), which reads the watched threads'
schedstat around each round trip and prints its times; ``--steady python``: python-qpid-proton in this
process's main thread (0.65 ms CPU per round trip: on two cores the measuring client is then a third of
the load). Each run makes 50 round trips of warm-up and ``--quiet`` (3,000) alone, then starts the stalled
clients (500 per interface, every preamble stage, trickling every 0.5 s; ``--clients c``:
``benchmarks/loadgen/stalled.c``; ``--clients python``: :mod:`interchange.testing.stalled_clients`, asyncio
+ ssl, about twice the CPU per connection) and keeps making round trips until every stalled connection is
closed, then ``--after`` more. After each run: the quiet p99 of each half of the quiet round trips (how much
the baseline itself moves), the steady client's CPU per round trip, the stalled clients' CPU per connection,
and how many connections the node's deadlines closed as they should
(:func:`interchange.testing.stalled_clients.check_closed`); after all runs, per mode, each phase's p99
over every run's round trips against the pooled quiet p99. Every ratio comes with its 5-95 % bootstrap
interval (both phases resampled): the noise of a p99 from a few thousand round trips.
Modes, alternated run by run:

- ``node``: the stalled clients connect to the node the steady client uses;
- ``peer``: they connect to a second node process (same config): the same clients' and server's
  CPU on the same two cores, but not in the steady client's node: what the machine alone adds;
- ``nice``: as ``node``, with the stalled clients at ``nice 19``;
- ``idle``: as ``node``, with the stalled clients scheduled ``SCHED_IDLE`` (``chrt --idle 0``): they run
  only on CPU that the node, the steady client and everything else leave, nearly as clients on other
  hosts would (their CPU is not the node's); a figure beside ``node``'s, never instead of it: on a
  loaded machine the clients may be starved and note their own times late;
- ``placed``: as ``node``, with the stalled clients confined to ``--client-cpus`` (``taskset``; by default
  the last CPU): their TLS handshakes and stages then leave the other CPUs to the node and the steady
  client, as clients on other hosts would leave all of them (the nearest emulation of remote clients on one
  machine; beside ``node``'s figure, never instead of it). Neither the node nor the steady client is placed;
- ``pinned``: as ``placed``, against this tree's node with ``[broker.limits] handshake_cpus`` =
  ``--handshake-cpus`` (by default the clients' CPUs): the node's handshake worker and rescue thread on
  those CPUs, its event loop's thread on the others; ``pinfree``: that node, the clients not placed;
- ``pinidle``: as ``pinned``, the clients also scheduled ``SCHED_IDLE`` (as the node's handshake worker
  is), so that on their CPU they do not preempt the worker, as clients on other hosts would not;
- ``peerpin``: the floor beside ``pinned``: the steady client uses ``pinned``'s node (its loop's thread
  on the CPUs not in ``--handshake-cpus``, the steady client free), and the stalled clients confined to
  ``--client-cpus`` connect to a second node process confined there too (``taskset``, all its threads): all
  the arrivals' work, both sides', on those CPUs, none of it in the steady client's node; what ``pinned``
  would reach if its loop did nothing per arriving connection;
- ``procs2``: this tree's node with two broker processes (``broker.processes = 2``), the steady client's
  target placed in process 1 and the steady client on process 1's port; the stalled BI clients spread
  evenly over both processes' ports (connection i to port i % 2, as clients connect to every advertised
  port), the II's to process 0 (which hosts the II); nothing placed. Its closes are checked in both
  processes' logs;
- ``procs2pin``: as ``procs2``, placed as ``pinned``: ``handshake_cpus`` = ``--handshake-cpus`` (process 1's
  handshake worker on those CPUs, its event loop's thread on the others, the steady client free), process 0
  wholly on ``--client-cpus`` (``taskset``, all its threads) and the stalled clients confined there too;
  ``procs2cfg``: as ``procs2pin``, placed by the node's settings instead of ``taskset``: ``[broker]
  process_cpus`` = [``--client-cpus``, the CPUs not in ``--handshake-cpus``] (process 0 wholly on the
  clients' CPUs, process 1's loop on the others) with ``handshake_cpus`` = ``--handshake-cpus``, and the
  steady client's target in process 1 by ``[broker] target_processes = [1]`` (it names no process);
  ``procs2cfg0``: as ``procs2cfg``, the steady client's target placed in process 0 and the steady client on
  its port (process 0 hosts the II and shares the clients' CPUs: what a client there gets);
- ``errlog``: as ``node``, against a node logging errors only (``[log] level = "error"``: the
  stalled connections' connect, time-out and disconnect records are not written, so its closes are checked
  by the clients' times alone);
- ``base``: as ``node``, against a node process run from ``--base`` (another tree, e.g. before a
  change; the steady client and the stalled clients both use it); ``base2``, ``base3``...: the
  second, third... ``--base``;
- ``share2``, ``share3``...: as ``node``, this tree with the second, third... ``--handshake-cpu-share``
  (the first is ``node``'s);
- ``thread2``, ``thread3``...: as ``node``, this tree with the second, third... ``--handshake-thread``
  (``[broker.limits] handshake_thread``: native, idle, nice, normal, loop; the first is ``node``'s);
  ``pinthread2``, ``pinthread3``...: as ``pinned``, its node with the second, third... ``--handshake-thread``;
- ``switch2``, ``switch3``...: as ``node``, this tree's node with the second, third... ``--switch-interval``
  (the interpreter's GIL switch interval, ``sys.setswitchinterval``; the first is this tree's other nodes').

Phases (from the stalled clients' own times, monotonic like ours): ``quiet``; ``arrive`` (their
TLS handshakes and stages, until all stalled); ``stall`` (idle and trickling, until the first
close); ``closes`` (the deadlines' closes, until the last); ``after``. Per phase: round trips,
p50/p99 and p99 / quiet p99; the CPU share (of one core) of the steady node's main thread and of
all its threads (the handshake worker's too), of the steady client's thread, of the stalled clients and
of the peer node; the steady node's run-queue wait (ms per second: ready to run, not running, /proc
schedstat) and the steady client's; and for the slowest 1 % of round trips, what the node's main thread
did during them (CPU, waiting for a core) and the steady client's wait. For the ``procs2`` modes,
"node" is the steady client's broker process and "peer" the node's other one. After each run, each
watched loop's (main thread's) CPU from the stalled clients' start until all stalled, above its rate over
the quiet round trips, per connection its process took.

``--gil-trace`` (Linux, root, ``perf`` and an interpreter with symbols): Linux perf uprobes on CPython's
``take_gil`` and ``drop_gil`` (entry, return) in the steady node, recorded through each run with
``CLOCK_MONOTONIC`` times; per phase the node's main thread's waits for the GIL (ms per second, how many
over 1 ms, who held it when the wait began: the handshake worker, found by its scheduling, or another
thread), the same over the slowest 1 % of round trips, and how long the worker held the GIL each time it
took it. The probes cost the traced node a few µs per GIL hand-off: compare modes within a traced run.

    flock /work/bench.lock .venv/bin/python benchmarks/bench_deadline_phases.py --runs 3 --clients c \\
        --modes node,nice,base --base /tmp/peer-tree [--steady c]
"""
from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certs import TestPki
from interchange.app.config import NodeConfig
from interchange.testing import stalled_clients
from interchange.testing.broker_harness import BROKER_CN, client_connection, complete_records, denm
from interchange.testing.harness import make_pki
from interchange.testing.stalled_clients import BI_DEADLINES, II_DEADLINES, JsonLines, SteadyProcess, deadline_node_config

HERE = Path(__file__).resolve().parents[1]
BI, II = BI_DEADLINES, II_DEADLINES
PHASES = ("quiet", "arrive", "stall", "closes", "after")


def schedstat(path: str) -> tuple[int, int]:
    """(ns on a CPU, ns waiting on a run queue) of a thread or process (0, 0 once it is gone); a
    process's ``task`` directory: summed over its threads."""
    if path.endswith("/task"):
        try:
            tasks = os.listdir(path)
        except OSError:
            return 0, 0
        parts = [schedstat(f"{path}/{task}/schedstat") for task in tasks]
        return sum(cpu for cpu, _ in parts), sum(wait for _, wait in parts)
    try:
        with open(path) as handle:
            on_cpu, waiting, _ = handle.read().split()
    except (OSError, ValueError):
        return 0, 0
    return int(on_cpu), int(waiting)


class Node:
    """A node process run from the tree at ``root`` (its directory first on the module path): with
    ``broker.processes`` > 1, its broker processes' AMQPS ports, pids and logs, process 0 first."""

    def __init__(self, config: NodeConfig, root: Path, switch_interval: float | None = None,
                 cpus: frozenset[int] | None = None) -> None:
        path = config.data_dir / "node.json"
        self.log = config.log.path
        path.write_text(config.model_dump_json(exclude_defaults=True))  # a --base tree may not know newer fields
        env = {**os.environ, "PYTHONPATH": str(root)}
        start = ["-m", "interchange"] if switch_interval is None else [
            "-c", f"import runpy, sys; sys.setswitchinterval({switch_interval!r}); "
                  "runpy.run_module('interchange', run_name='__main__', alter_sys=True)"]
        placed = ["taskset", "-c", cpu_list(cpus)] if cpus else []  # taskset execs: the pid is the node's
        self.process = subprocess.Popen([*placed, sys.executable, "-P", *start, "broker", "--config", str(path)],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=root, env=env)
        assert self.process.stdout is not None
        words = self.process.stdout.readline().replace(",", "").split()
        at = words.index("AMQPS") + 2  # "AMQPS port 5671 5672 plain ...": one port per broker process
        self.bi_ports = [int(word) for word in words[at:words.index("plain")]]
        self.bi_port = self.bi_ports[0]
        self.ii_port = int(words[words.index("(HTTPS)") + 2])
        self.pids = broker_pids(self.process.pid, self.bi_ports)
        log = self.log
        self.logs = [log] + [log.with_name(f"{log.stem}.p{k}{log.suffix}")  # interchange.app.worker's log files
                             for k in range(1, len(self.bi_ports))] if log else []

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports a process listens on: its sockets' inodes among /proc/net/tcp's listeners."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def broker_pids(pid: int, ports: list[int]) -> list[int]:
    """The pids of a node's broker processes, in the order of their ``ports``: the node process, then its
    children (``interchange.app.worker``) each found by the port it listens on."""
    if len(ports) == 1:
        return [pid]
    children = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:  # its parent
                children.append(int(entry))
    listening = {child: listening_ports(child) for child in children}
    return [pid] + [next(child for child, got in listening.items() if port in got) for port in ports[1:]]


def confine_process(pid: int, cpus: frozenset[int]) -> None:
    """Every thread of a running process on ``cpus`` (``taskset -a``; threads it starts later inherit it)."""
    subprocess.run(["taskset", "-a", "-p", "-c", cpu_list(cpus), str(pid)], check=True, stdout=subprocess.DEVNULL)


@dataclass
class Sample:
    """One round trip: when it started, how long it took, and the deltas of the watched threads over it."""

    at: float
    rtt: float
    deltas: dict[str, tuple[int, int]] = field(default_factory=dict)


class Watch:
    """The threads whose schedstat is read around every round trip."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths

    def read(self) -> dict[str, tuple[int, int]]:
        return {name: schedstat(path) for name, path in self.paths.items()}


class Steady:
    def __init__(self, pki: TestPki, port: int) -> None:
        self.publisher = client_connection(pki, "actor-1", port)
        self.consumer = client_connection(pki, "actor-2", port)
        self.sender = self.publisher.create_sender("in")
        self.receiver = self.consumer.create_receiver("all", credit=10)

    def round_trip(self, watch: Watch) -> Sample:
        before = watch.read()
        started = time.monotonic()
        self.sender.send(denm())
        self.receiver.receive(timeout=10)
        self.receiver.accept()
        ended = time.monotonic()
        after = watch.read()
        deltas = {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after}
        return Sample(started, ended - started, deltas)

    def close(self) -> None:
        self.publisher.close()
        self.consumer.close()


#: The uprobes' group, and their events: take_gil entered and returned (the GIL is held), drop_gil entered
#: and returned (after a forced switch, drop_gil waits until the other thread has taken the GIL).
GIL_GROUP = "hsgil"
GIL_PROBES = (("take", "take_gil"), ("took", "take_gil%return"), ("drop", "drop_gil"), ("dropped", "drop_gil%return"))


def interpreter_file(pid: int) -> str:
    """The file holding the process's interpreter: its libpython, or the executable (a static build)."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and "libpython" in fields[-1]:
            return fields[-1]
    return os.readlink(f"/proc/{pid}/exe")


def worker_threads(pid: int) -> set[int]:
    """The node's threads scheduled below the loop (SCHED_IDLE or nice 19): the handshake worker."""
    found = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # from the state on: field 3 is fields[0]
        if fields[38] == "5" or fields[16] == "19":  # policy SCHED_IDLE, or nice 19
            found.add(int(task))
    return found


@dataclass
class GilTimes:
    """One traced run: the main thread's waits for the GIL (start, seconds, who held it as the wait
    began: ``worker``, ``other``, ``free``; or ``handoff``: in drop_gil, a forced switch waiting for the
    other thread to take it) and the worker's holds (start, seconds)."""

    waits: list[tuple[float, float, str]] = field(default_factory=list)
    holds: list[tuple[float, float]] = field(default_factory=list)

    def waited(self, start: float, end: float) -> tuple[dict[str, float], int]:
        """Within [start, end): the main thread's GIL wait (s) by holder, and its waits over 1 ms."""
        by: dict[str, float] = {}
        over = 0
        for at, span, holder in self.waits[bisect.bisect_left(self.waits, (start - 1.0,)):]:
            if at >= end:
                break
            part = min(end, at + span) - max(start, at)
            if part > 0:
                by[holder] = by.get(holder, 0.0) + part
                over += span > 1e-3
        return by, over


def gil_times(lines: list[str], main: int, workers: set[int]) -> GilTimes:
    """Parse ``perf script -F tid,time,event`` lines of the four probes."""
    times = GilTimes()
    holder: int | None = None
    entered: dict[int, tuple[float, str]] = {}
    took: dict[int, float] = {}
    dropping: dict[int, float] = {}
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        tid, at, event = int(fields[0]), float(fields[1].rstrip(":")), fields[2]
        if event.endswith(":take:"):
            entered[tid] = (at, "free" if holder is None else "worker" if holder in workers else "other")
        elif event.endswith(":took__return:") and tid in entered:
            began, held_by = entered.pop(tid)
            if tid == main:
                times.waits.append((began, at - began, held_by))
            holder, took[tid] = tid, at
        elif event.endswith(":drop:"):
            if tid in workers and tid in took:
                times.holds.append((took[tid], at - took.pop(tid)))
            holder = None if holder == tid else holder
            dropping[tid] = at
        elif event.endswith(":dropped__return:") and tid == main and tid in dropping:
            began = dropping.pop(tid)
            if at - began > 20e-6:  # a forced switch: waited for the other thread to take the GIL
                times.waits.append((began, at - began, "handoff"))
    times.waits.sort()
    return times


class GilTrace:
    """``perf record`` of the GIL probes on one node process, from start to :meth:`stop`."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        lib = interpreter_file(pid)
        listed = subprocess.run(["perf", "probe", "-l", f"{GIL_GROUP}:*"], capture_output=True, text=True).stdout
        events = []
        for name, spec in GIL_PROBES:
            event = f"{GIL_GROUP}:{name}" + ("__return" if spec.endswith("%return") else "")
            if f"{event} " not in listed:
                subprocess.run(["perf", "probe", "-q", "-x", lib, "--add", f"{GIL_GROUP}:{name}={spec}"], check=True)
            events += ["-e", event]
        self.workers = worker_threads(pid)
        self.process = subprocess.Popen(["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", *events, "-p", str(pid),
                                         "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # perf attaches

    def stop(self) -> GilTimes:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(60)
        script = subprocess.run(["perf", "script", "-i", str(self.out), "-F", "tid,time,event"],
                                capture_output=True, text=True).stdout
        self.out.unlink(missing_ok=True)
        return gil_times(script.splitlines(), self.pid, self.workers)


class Pacer:
    """One round trip per ``every_s`` (0: back to back), so that the steady client's own CPU is a fraction of
    a core instead of most of one: :meth:`after` takes the next slot (a late round trip lets the next start
    at once, without catching up), :meth:`wait_s` is the time until it, :meth:`paced` also sleeps it."""

    def __init__(self, every_s: float) -> None:
        self.every_s, self._next = every_s, 0.0

    def wait_s(self) -> float:
        return max(0.0, self._next - time.monotonic())

    def after(self, sample: Sample) -> Sample:
        if self.every_s:
            self._next = max(self._next + self.every_s, sample.at)
        return sample

    def paced(self, sample: Sample) -> Sample:
        self.after(sample)
        time.sleep(self.wait_s())
        return sample


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def bootstrap_ratio(phase: list[float], quiet: list[float], resamples: int = 300) -> tuple[float, float]:
    """The 5th and 95th percentiles of p99(phase) / p99(quiet) over resamples of both (with replacement):
    how far the ratio moves with which round trips happened to be drawn."""
    if not phase or not quiet:
        return float("nan"), float("nan")
    draw = random.Random(0)
    ratios = sorted(pct(draw.choices(phase, k=len(phase)), 0.99) / pct(draw.choices(quiet, k=len(quiet)), 0.99)
                    for _ in range(resamples))
    return ratios[int(resamples * 0.05)], ratios[int(resamples * 0.95)]


def scheduling(pid: int) -> str:
    """A process's scheduling policy and nice value, as ``SCHED_OTHER nice 0``, and its CPUs if it may not
    use all of ours (``SCHED_OTHER nice 0 on CPU 1``); empty once it is gone."""
    try:
        policy = os.sched_getscheduler(pid)
        nice = os.getpriority(os.PRIO_PROCESS, pid)
        cpus = os.sched_getaffinity(pid)
    except OSError:
        return ""
    names = {os.SCHED_OTHER: "SCHED_OTHER", os.SCHED_IDLE: "SCHED_IDLE", os.SCHED_BATCH: "SCHED_BATCH"}
    placed = f" on CPU {cpu_list(cpus)}" if cpus != os.sched_getaffinity(0) else ""
    return f"{names.get(policy, str(policy))} nice {nice}{placed}"


def cpu_list(cpus: set[int] | frozenset[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


def thread_cpus(pid: int) -> str:
    """Where a process's threads may run: the main thread's CPUs, then each other set with how many threads
    have it (``main 0; 1 thread on 1, 4 on 0,1``), read while they run."""
    sets: dict[str, int] = {}
    main = ""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return "?"
    for task in tasks:
        try:
            cpus = cpu_list(os.sched_getaffinity(int(task)))
        except OSError:
            continue
        if int(task) == pid:
            main = cpus
        else:
            sets[cpus] = sets.get(cpus, 0) + 1
    return f"main {main}; " + ", ".join(f"{n} on {cpus}" for cpus, n in sorted(sets.items()))


class StalledClients:
    """The stalled clients' process and what it reported so far; the ``loops`` threads' schedstat read as it
    started and as it reported every connection stalled (``at_ready``), with ``quiet``: a reading (monotonic
    time, schedstat) at the start of the quiet round trips."""

    def __init__(self, command: list[str], loops: Watch, quiet: tuple[float, dict[str, tuple[int, int]]]) -> None:
        self.loops, self.quiet = loops, quiet
        self.at_spawn = (time.monotonic(), loops.read())
        self.at_ready: tuple[float, dict[str, tuple[int, int]]] | None = None
        self.spawned = time.monotonic()
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=HERE)
        self.lines = JsonLines(self.process)
        self.ready_at: float | None = None
        self.closes: list[float] = []
        self.results: list[dict] = []
        self.done, self.cpu_s = False, float("nan")
        self.scheduling = ""  #: the clients' scheduling policy, read once they report (after chrt or nice ran)

    def read(self) -> None:
        if not self.scheduling:
            self.scheduling = scheduling(self.process.pid)
        for record in self.lines.read():
            if "ready" in record:
                self.ready_at, self.at_ready = record["at"], (time.monotonic(), self.loops.read())
            elif "done" in record:
                self.done, self.cpu_s = True, record.get("cpu_s", self.cpu_s)
            else:
                self.results.append(record)
                if record.get("closed") is not None:
                    self.closes.append(record["closed"])
        self.done = self.done or self.lines.eof


@dataclass
class Measured:
    """One run's round trips (warm-up left out) and the stalled clients' report."""

    samples: list[Sample]
    stalled: StalledClients
    ended: float  #: when the stalled clients were done
    steady_cpu_s: float  #: the steady client's CPU over the run (its process, or our main thread)


def run_python(port: int, paths: dict[str, str], pki: TestPki, command: list[str], args: argparse.Namespace,
               tracing: Callable[[], None], loops: Watch) -> Measured:
    """The steady client in this process's main thread (python-qpid-proton's BlockingConnection), on the BI
    ``port``."""
    steady = Steady(pki, port)
    cpu = time.thread_time()
    try:
        for _ in range(50):
            steady.round_trip(Watch(paths))
        tracing()
        pacer = Pacer(args.pace_ms / 1e3)
        quiet = (time.monotonic(), loops.read())
        samples = [pacer.paced(steady.round_trip(Watch(paths))) for _ in range(args.quiet)]
        stalled = StalledClients(command, loops, quiet)
        watch = Watch({**paths, "clients": f"/proc/{stalled.process.pid}/schedstat"})
        while not stalled.done:
            if select.select([stalled.lines.fd], [], [], pacer.wait_s())[0]:
                stalled.read()
            if pacer.wait_s() > 0:
                continue  # the next round trip's slot is not yet: the clients' lines meanwhile
            samples.append(pacer.after(steady.round_trip(watch)))
        ended = time.monotonic()
        samples += [pacer.paced(steady.round_trip(Watch(paths))) for _ in range(args.after)]
        stalled.process.wait(30)
    finally:
        steady.close()
    return Measured(samples, stalled, ended, time.thread_time() - cpu)


def run_c(port: int, paths: dict[str, str], pki: TestPki, command: list[str], args: argparse.Namespace,
          tracing: Callable[[], None], loops: Watch) -> Measured:
    """The steady client in its own process, in C, on the BI ``port``: the benchmark's process only reads its
    lines."""
    watched = {k: v for k, v in paths.items() if k != "me"}  # "me": the C client's own thread, always watched
    steady = SteadyProcess(stalled_clients.steady_command(port, pki.directory, BROKER_CN,
                                                          pace_ms=args.pace_ms, watch=watched,
                                                          binary=args.steady_binary))
    try:
        steady.until(50)  # warm-up
        tracing()
        quiet = (time.monotonic(), loops.read())
        trips = steady.until(args.quiet)
        stalled = StalledClients(command, loops, quiet)
        steady.tell(f"watch clients /proc/{stalled.process.pid}/schedstat")
        while not stalled.done:
            readable = select.select([stalled.lines.fd, steady.lines.fd], [], [], 30.0)[0]
            if stalled.lines.fd in readable:
                stalled.read()
            if steady.lines.fd in readable:
                trips += steady.trips()
        ended = time.monotonic()
        trips += steady.until(args.after, ended)
        trips += steady.stop()
        stalled.process.wait(30)
    finally:
        steady.kill()
    samples = [Sample(t["at"], t["rtt"], {k: (v[0], v[1]) for k, v in t["d"].items()}) for t in trips]
    return Measured(samples, stalled, ended, steady.cpu_s)


@dataclass(frozen=True)
class Mode:
    """What a mode runs: the node the steady client uses and its broker process there (its target placed in
    it, its port), the node the stalled clients connect to (None: the same; their BI connections spread over
    its broker processes' ports, the II's to process 0), whether the clients are confined to
    ``--client-cpus``, their scheduling (a command prefix), and whether the target's logs have the stages'
    records to check (not at ``level = "error"``)."""
    node: str
    target: str | None = None
    placed: bool = False
    scheduling: tuple[str, ...] = ()
    records_checked: bool = True
    process: int = 0
    processes: int = 1  #: the steady client's node's broker processes (2 for every procs2 mode)

    @property
    def other_process(self) -> int | None:
        """The steady client's node's other broker process, watched beside its own (None: it has one)."""
        return None if self.processes == 1 else 1 - self.process

    @property
    def other_label(self) -> str:
        return "peer" if self.other_process is None else f"process {self.other_process}"


SCHED_IDLE = ("chrt", "--idle", "0")


def mode_of(name: str) -> Mode:
    """The modes of the module docstring; the families (base2, share2, thread2, switch2, pinthread2, ...) each
    run their own node, ``pinthread`` ones with the clients placed."""
    match name:
        case "nice":
            return Mode("node", scheduling=("nice", "-n", "19"))
        case "idle":
            return Mode("node", scheduling=SCHED_IDLE)
        case "peer":
            return Mode("node", target="peer")
        case "placed":
            return Mode("node", placed=True)
        case "pinned":
            return Mode("pinned", placed=True)
        case "pinfree":
            return Mode("pinned")
        case "pinidle":
            return Mode("pinned", placed=True, scheduling=SCHED_IDLE)
        case "peerpin":
            return Mode("pinned", target="peerpin", placed=True)
        case "procs2" | "procs2pin" | "procs2cfg":
            return Mode(name, placed=name != "procs2", process=1, processes=2)
        case "procs2cfg0":
            return Mode(name, placed=True, process=0, processes=2)
        case _ if name.startswith("pinthread"):
            return Mode(name, placed=True)
        case "errlog":
            return Mode(name, records_checked=False)
        case _ if name.startswith(("base", "share", "thread", "switch")):
            return Mode(name)
        case _:
            return Mode("node")


def second_loop(spec: Mode, node: Node, target: Node, nodes: dict[str, Node]) -> int | None:
    """The other loop watched beside the steady client's: the mode's second node (its target, else the free
    peer), or the node's other broker process when it has two."""
    if target is not node:
        return target.process.pid
    if spec.other_process is not None:
        return node.pids[spec.other_process]
    return nodes["peer"].process.pid if "peer" in nodes else None


def arrivals(target: Node, loops: dict[str, int], interfaces: list[str], count: int) -> dict[str, int]:
    """How many stalled connections each watched loop's process takes: the BI's spread over the target's
    broker processes (connection i to port i % n), the II's to process 0; none for a loop not the target's."""
    taken = dict.fromkeys(target.pids, 0)
    if "bi" in interfaces:
        for i in range(count):
            taken[target.pids[i % len(target.pids)]] += 1
    if "ii" in interfaces:
        taken[target.pids[0]] += count
    return {name: taken.get(pid, 0) for name, pid in loops.items()}


def arrival_cpu(stalled: StalledClients, taken: dict[str, int]) -> dict[str, tuple[float, int]]:
    """Per watched loop: its main thread's CPU seconds from the clients' start until all stalled, above its
    rate over the quiet round trips (the steady client's own share), and the connections its process took."""
    if stalled.at_ready is None:
        return {}
    (quiet_at, quiet), (spawn_at, spawn), (ready_at, ready) = stalled.quiet, stalled.at_spawn, stalled.at_ready
    out = {}
    for name, n in taken.items():
        rate = (spawn[name][0] - quiet[name][0]) / 1e9 / max(spawn_at - quiet_at, 1e-9)
        out[name] = ((ready[name][0] - spawn[name][0]) / 1e9 - rate * (ready_at - spawn_at), n)
    return out


def run_once(mode: str, nodes: dict[str, Node], pki: TestPki, args: argparse.Namespace) -> dict:
    spec = mode_of(mode)
    node = nodes[spec.node]
    target = nodes[spec.target] if spec.target else node
    pid = node.pids[spec.process]  # the steady client's broker process
    paths = {"node": f"/proc/{pid}/task/{pid}/schedstat",
             "me": f"/proc/self/task/{os.getpid()}/schedstat", "node_all": f"/proc/{pid}/task"}
    second = second_loop(spec, node, target, nodes)
    loops = {"steady": pid} | ({spec.other_label: second} if second else {})
    if second is not None:
        paths["peer"] = f"/proc/{second}/task/{second}/schedstat"
    traces: list[GilTrace] = []

    def tracing() -> None:
        if args.gil_trace:
            traces.append(GilTrace(pid, Path(tempfile.gettempdir()) / f"gil-{os.getpid()}.data"))

    assert target.logs, "the node under test writes a JSON log"
    logged = [len(complete_records(log)) for log in target.logs]  # this run's records follow
    interfaces = args.interfaces.split(",")
    ports: dict[str, int | list[int]] = {"bi": target.bi_ports, "ii": target.ii_port}
    command = stalled_clients.command(args.clients, {i: ports[i] for i in interfaces}, args.count, pki.directory,
                                      BROKER_CN, binary=args.c_binary)
    if spec.placed:
        command = ["taskset", "-c", cpu_list(args.client_cpus), *command]
    command = [*spec.scheduling, *command]
    watch = Watch({name: f"/proc/{p}/task/{p}/schedstat" for name, p in loops.items()})
    try:
        got = (run_c if args.steady == "c" else run_python)(node.bi_ports[spec.process], paths, pki, command, args,
                                                           tracing, watch)
    finally:
        gil = traces[0].stop() if traces else None
    stalled = got.stalled
    bounds = {"arrive": stalled.spawned, "stall": stalled.ready_at or stalled.spawned,
              "closes": min(stalled.closes) if stalled.closes else got.ended, "after": got.ended}
    summary = summarize(got.samples, bounds, gil)
    placement = thread_cpus(pid)
    if spec.other_process is not None:
        placement += f"; broker process {spec.other_process}'s: {thread_cpus(node.pids[spec.other_process])}"
    if target is not node:
        placement += f"; the peer node's: {thread_cpus(target.process.pid)}"
    records = ([r for log, n in zip(target.logs, logged) for r in complete_records(log)[n:]]
               if spec.records_checked else None)
    summary["clients"] = {"connections": len(stalled.results), "cpu_s": stalled.cpu_s, "scheduling": stalled.scheduling,
                          "problems": stalled_clients.check_closed(stalled.results, records),
                          "steady_cpu_ms": got.steady_cpu_s / max(1, len(got.samples)) * 1e3,
                          "steady_n": len(got.samples), "node_cpus": placement,
                          "arrival_cpu": arrival_cpu(stalled, arrivals(target, loops, interfaces, args.count))}
    return summary


def cpu_set(text: str) -> frozenset[int]:
    """``1`` or ``0,2``: a set of CPUs."""
    return frozenset(int(part) for part in text.split(","))


def phase_of(sample: Sample, bounds: dict[str, float]) -> str:
    phase = "quiet"
    for name in ("arrive", "stall", "closes", "after"):
        if sample.at >= bounds[name]:
            phase = name
    return phase


def gil_summary(gil: GilTimes, got: list[Sample], slow: list[Sample]) -> dict:
    """The main thread's GIL waits over a phase's round trips and over its slowest 1 % (shares of their
    time, by holder), and the worker's holds that began during the phase."""
    start, end = got[0].at, got[-1].at + got[-1].rtt
    by, over = gil.waited(start, end)
    slow_by: dict[str, float] = {}
    slow_over = 0
    for sample in slow:
        part, n = gil.waited(sample.at, sample.at + sample.rtt)
        slow_over += n
        for holder, wait in part.items():
            slow_by[holder] = slow_by.get(holder, 0.0) + wait
    slow_span = sum(s.rtt for s in slow)
    holds = sorted(span for at, span in gil.holds if start <= at < end)
    return {"wait": {k: v / (end - start) for k, v in by.items()}, "over": over,
            "slow": {k: v / slow_span for k, v in slow_by.items()}, "slow_over": slow_over,
            "slow_longest": max((span for s in slow for at, span, _ in gil.waits if s.at <= at < s.at + s.rtt),
                                default=0.0),
            "holds_per_s": len(holds) / (end - start), "hold_p50": pct(holds, 0.5), "hold_p99": pct(holds, 0.99),
            "hold_max": holds[-1] if holds else float("nan")}


def summarize(samples: list[Sample], bounds: dict[str, float], gil: GilTimes | None = None) -> dict:
    by: dict[str, list[Sample]] = {p: [] for p in PHASES}
    for sample in samples:
        by[phase_of(sample, bounds)].append(sample)
    out: dict[str, dict[str, Any]] = {}
    for phase, got in by.items():
        if not got:
            continue
        wall = sum(s.rtt for s in got)
        rtts = [s.rtt for s in got]

        def share(name: str, part: int, among: list[Sample]) -> float:
            span = sum(s.rtt for s in among)
            return sum(s.deltas.get(name, (0, 0))[part] for s in among) / 1e9 / span if span else 0.0

        slow = sorted(got, key=lambda s: s.rtt)[-max(1, len(got) // 100):]
        span = got[-1].at + got[-1].rtt - got[0].at  # the phase's length (its round trips run back to back)
        out[phase] = {"n": len(got), "p50": pct(rtts, 0.5), "p99": pct(rtts, 0.99), "wall": wall, "span": span,
                      "rtts": rtts,
                      "node_cpu": share("node", 0, got), "node_wait": share("node", 1, got),
                      "node_all_cpu": share("node_all", 0, got),
                      "me_cpu": share("me", 0, got), "me_wait": share("me", 1, got),
                      "clients_cpu": share("clients", 0, got),
                      "peer_cpu": share("peer", 0, got),
                      "slow_rtt": sum(s.rtt for s in slow) / len(slow),
                      "slow_node_cpu": share("node", 0, slow), "slow_node_wait": share("node", 1, slow),
                      "slow_me_wait": share("me", 1, slow), "slow_clients_cpu": share("clients", 0, slow)}
        if gil is not None:
            out[phase]["gil"] = gil_summary(gil, got, slow)
    return out


def with_limits(config: NodeConfig, **limits: object) -> NodeConfig:
    """``config`` with these ``[broker.limits]`` set (None: as it is)."""
    update = {key: value for key, value in limits.items() if value is not None}
    if not update:
        return config
    new = config.broker.limits.model_copy(update=update)
    return config.model_copy(update={"broker": config.broker.model_copy(update={"limits": new})})


def print_gil(g: dict) -> None:
    def shares(by: dict[str, float]) -> str:  # "free": the GIL was free, the wait is the probes' own cost
        held = sum(v for k, v in by.items() if k != "free")
        return f"{held:.3f} (" + ", ".join(f"{k} {v:.3f}" for k, v in sorted(by.items())) + ")"

    print(f"{'':<9}{'GIL':<8}main thread waiting: {shares(g['wait'])} of the phase, {g['over']} waits over 1 ms | "
          f"slowest 1 %: {shares(g['slow'])} of their time, {g['slow_over']} over 1 ms, longest "
          f"{g['slow_longest'] * 1e3:.2f} ms | worker holds {g['holds_per_s']:.0f}/s, p50 {g['hold_p50'] * 1e6:.0f} µs, "
          f"p99 {g['hold_p99'] * 1e6:.0f} µs, max {g['hold_max'] * 1e3:.2f} ms", flush=True)


def print_clients(name: str, clients: dict) -> None:
    """The stalled clients' own CPU per connection, and how many the node's deadlines closed as they should."""
    n, problems = clients["connections"], clients["problems"]
    print(f"{name + ' ':<9}clients: {n} connections ({clients['scheduling'] or '?'}), {clients['cpu_s']:.2f} s CPU "
          f"({clients['cpu_s'] / max(n, 1) * 1e3:.2f} ms each); {n - len(problems)} of {n} closed by their deadline"
          + (f"; {problems[:3]}" if problems else "") + f"; the node's threads' CPUs: {clients['node_cpus']}",
          flush=True)
    loops = [f"{loop} {cpu_s * 1e3:.0f} ms ({n} connections" + (f", {cpu_s / n * 1e3:.2f} ms each)" if n else ")")
             for loop, (cpu_s, n) in clients["arrival_cpu"].items()]
    if loops:
        print(f"{name + ' ':<9}loop CPU while they arrived, above its quiet rate: " + "; ".join(loops), flush=True)


def print_run(name: str, result: dict) -> None:
    """One run: a line per phase, the quiet p99's halves, the clients' CPU and closes."""
    clients = result.pop("clients")
    quiet = result["quiet"]["rtts"]
    for phase, r in result.items():
        low, high = bootstrap_ratio(r["rtts"], quiet) if phase != "quiet" else (float("nan"), float("nan"))
        print(f"{name + ' ':<9}{phase:<8}{r['span']:>6.2f}{r['n']:>6}{r['p50'] * 1e3:>7.2f}{r['p99'] * 1e3:>7.2f}"
              f"{r['p99'] / pct(quiet, 0.99):>7.2f}{f'{low:.2f}-{high:.2f}' if phase != 'quiet' else '':>11}"
              f"{r['node_cpu']:>8.2f}{r['node_wait']:>9.2f}{r['node_all_cpu']:>7.2f}{r['me_cpu']:>6.2f}"
              f"{r['me_wait']:>7.2f}{r['clients_cpu']:>8.2f}{r['peer_cpu']:>6.2f} | {r['slow_rtt'] * 1e3:>7.2f}"
              f"{r['slow_node_cpu']:>6.2f}{r['slow_node_wait']:>6.2f}{r['slow_me_wait']:>6.2f}"
              f"{r['slow_clients_cpu']:>6.2f}", flush=True)
        if "gil" in r:
            print_gil(r["gil"])
    half = len(quiet) // 2
    print(f"{name + ' ':<9}quiet p99 of its first / second half {pct(quiet[:half], 0.99) * 1e3:.2f} / "
          f"{pct(quiet[half:], 0.99) * 1e3:.2f} ms; steady client {clients['steady_cpu_ms']:.3f} ms CPU per round "
          f"trip ({clients['steady_n']} round trips)", flush=True)
    print_clients(name, clients)


def print_pooled(pooled: dict[str, dict[str, list[float]]]) -> None:
    """Per mode, every run's round trips together: each phase's p99 against the pooled quiet p99."""
    print("pooled over the runs: mode, phase, round trips, p99 ms, ratio to the pooled quiet p99 (5-95 % bootstrap)")
    for mode, phases in pooled.items():
        quiet = phases.get("quiet", [])
        for phase, rtts in phases.items():
            low, high = bootstrap_ratio(rtts, quiet) if phase != "quiet" else (float("nan"), float("nan"))
            interval = f" ({low:.2f}-{high:.2f})" if phase != "quiet" else ""
            print(f"{mode + ' ':<9}{phase:<8}{len(rtts):>6}{pct(rtts, 0.99) * 1e3:>7.2f}"
                  f"{pct(rtts, 0.99) / pct(quiet, 0.99):>7.2f}{interval}", flush=True)


def procs_nodes(modes: list[str], pki: TestPki, root: Path, args: argparse.Namespace,
                limits: dict[str, object], switch: float | None) -> dict[str, Node]:
    """Modes procs2, procs2pin, procs2cfg and procs2cfg0: this tree's node with two broker processes, the steady
    client's target ``in`` placed in process 1 (procs2cfg0: in process 0; procs2cfg by ``target_processes`` = [1],
    the target naming no process); all but procs2 with ``handshake_cpus``
    = ``--handshake-cpus``; procs2pin's process 0, all its threads, then on ``--client-cpus`` (``taskset``), each
    loop on the other CPUs; procs2cfg's and procs2cfg0's placed by ``process_cpus`` = [``--client-cpus``, the CPUs
    not in ``--handshake-cpus``]."""
    nodes: dict[str, Node] = {}
    for name in ("procs2", "procs2pin", "procs2cfg", "procs2cfg0"):
        if name not in modes:
            continue
        (root / name).mkdir()
        config = deadline_node_config(pki, BROKER_CN, root / name)
        by_setting = name == "procs2cfg"  # the target names no process: target_processes = [1] places it
        targets = [target.model_copy(update={"process": None if by_setting else mode_of(name).process})
                   for target in config.broker.targets]
        placed = ([sorted(args.client_cpus), sorted(frozenset(os.sched_getaffinity(0)) - args.handshake_cpus)]
                  if name.startswith("procs2cfg") else None)
        config = config.model_copy(update={"broker": config.broker.model_copy(
            update={"processes": 2, "targets": targets, "process_cpus": placed,
                    "target_processes": [1] if by_setting else None})})
        pin = sorted(args.handshake_cpus) if name != "procs2" else None
        nodes[name] = Node(with_limits(config, **limits, handshake_cpus=pin), HERE, switch)
        if name == "procs2pin":
            confine_process(nodes[name].pids[0], args.client_cpus)
    return nodes


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per mode, alternated")
    parser.add_argument("--modes", default="node,peer,nice",
                        help="node, peer, nice, idle, placed, pinned, pinfree, pinidle, peerpin, procs2, procs2pin, "
                             "procs2cfg, procs2cfg0, errlog, base, share2, thread2, pinthread2, switch2")
    parser.add_argument("--base", type=Path, action="append",
                        help="mode base: the tree its node runs from; given again: modes base2, base3, ...")
    parser.add_argument("--count", type=int, default=500, help="stalled connections per interface")
    parser.add_argument("--clients", choices=["c", "python"], default="c",
                        help="the stalled clients: c (benchmarks/loadgen/stalled.c) or python (asyncio + ssl)")
    parser.add_argument("--interfaces", default="bi,ii", help="the interfaces the stalled clients connect to")
    parser.add_argument("--handshake-cpu-share", type=float, action="append",
                        help="this tree's node: [broker.limits] handshake_cpu_share (default: the config's); "
                             "given again: modes share2, share3, ... (this tree with the second, third... share)")
    parser.add_argument("--handshake-thread", action="append", choices=["native", "idle", "nice", "normal", "loop"],
                        help="this tree's node: [broker.limits] handshake_thread (default: the config's); "
                             "given again: modes thread2, thread3, ... (and pinthread2, ...: pinned's node)")
    parser.add_argument("--client-cpus", type=cpu_set, default=None,
                        help="modes placed, pinned, peerpin, procs2pin, procs2cfg and procs2cfg0: the CPUs the "
                             "stalled clients (and peerpin's second node, procs2pin's broker process 0) are confined "
                             "to, as 1 or 0,2 (default: the last CPU this process may use)")
    parser.add_argument("--handshake-cpus", type=cpu_set, default=None,
                        help="modes pinned, pinfree, peerpin, procs2pin, procs2cfg and procs2cfg0: [broker.limits] "
                             "handshake_cpus of their node (default: --client-cpus)")
    parser.add_argument("--switch-interval", type=float, action="append",
                        help="this tree's nodes: the interpreter's GIL switch interval in seconds (default: "
                             "Python's, 0.005); given again: modes switch2, switch3, ...")
    parser.add_argument("--gil-trace", action="store_true",
                        help="trace the steady node's GIL hand-offs (perf uprobes: Linux, root)")
    parser.add_argument("--steady", choices=["c", "python"], default="c",
                        help="the steady client: c (benchmarks/loadgen/steady.c, its own process) or python "
                             "(python-qpid-proton in this process's main thread, about 0.65 ms CPU per round trip)")
    parser.add_argument("--quiet", type=int, default=3000, help="quiet round trips per run (after 50 of warm-up)")
    parser.add_argument("--pace-ms", type=float, default=0.0,
                        help="one steady round trip every this many ms (default 0: back to back, the steady "
                             "client then takes most of a core)")
    parser.add_argument("--after", type=int, default=300)
    return parser


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    args.client_cpus = args.client_cpus or frozenset({max(os.sched_getaffinity(0))})
    args.handshake_cpus = args.handshake_cpus or args.client_cpus
    args.c_binary = stalled_clients.ensure_c_clients() if args.clients == "c" else None
    args.steady_binary = stalled_clients.ensure_c_steady() if args.steady == "c" else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pki = make_pki(root / "pki")
        (root / "a").mkdir()
        (root / "b").mkdir()
        modes = args.modes.split(",")
        shares, threads = args.handshake_cpu_share or [None], args.handshake_thread or [None]
        switch = (args.switch_interval or [None])[0]
        nodes = {"node": Node(with_limits(deadline_node_config(pki, BROKER_CN, root / "a"),
                                          handshake_cpu_share=shares[0], handshake_thread=threads[0]), HERE, switch)}
        variants = [(f"share{i}", {"handshake_cpu_share": v}) for i, v in enumerate(shares[1:], start=2)]
        variants += [(f"thread{i}", {"handshake_thread": v}) for i, v in enumerate(threads[1:], start=2)]
        pin = sorted(args.handshake_cpus)
        variants += [(f"pinthread{i}", {"handshake_thread": v, "handshake_cpus": pin})
                     for i, v in enumerate(threads[1:], start=2)]
        for name, limits in variants:  # modes share2, thread2, ...: this tree with other limits
            if name in modes:
                (root / name).mkdir()
                nodes[name] = Node(with_limits(deadline_node_config(pki, BROKER_CN, root / name), **limits), HERE,
                                   switch)
        for i, interval in enumerate((args.switch_interval or [])[1:], start=2):  # switch2, ...: other intervals
            if f"switch{i}" in modes:
                (root / f"switch{i}").mkdir()
                nodes[f"switch{i}"] = Node(with_limits(deadline_node_config(pki, BROKER_CN, root / f"switch{i}"),
                                                       handshake_cpu_share=shares[0], handshake_thread=threads[0]),
                                           HERE, interval)
        if any(mode_of(mode).node == "pinned" for mode in modes):  # this tree's node, its handshake threads placed
            (root / "pinned").mkdir()
            nodes["pinned"] = Node(with_limits(deadline_node_config(pki, BROKER_CN, root / "pinned"),
                                               handshake_cpu_share=shares[0], handshake_thread=threads[0],
                                               handshake_cpus=sorted(args.handshake_cpus)), HERE, switch)
        nodes |= procs_nodes(modes, pki, root, args, {"handshake_cpu_share": shares[0],
                                                      "handshake_thread": threads[0]}, switch)
        if "peer" in modes:
            nodes["peer"] = Node(deadline_node_config(pki, BROKER_CN, root / "b"), HERE, switch)
        if "peerpin" in modes:  # the second node confined to the clients' CPUs
            (root / "peerpin").mkdir()
            nodes["peerpin"] = Node(deadline_node_config(pki, BROKER_CN, root / "peerpin"), HERE, switch,
                                       args.client_cpus)
        if "errlog" in modes:
            (root / "d").mkdir()
            nodes["errlog"] = Node(deadline_node_config(pki, BROKER_CN, root / "d", "error"), HERE, switch)
        for index, tree in enumerate(args.base or []):  # modes base, base2, ...: one node per --base
            name = "base" if index == 0 else f"base{index + 1}"
            if name in modes:
                (root / name).mkdir()
                nodes[name] = Node(deadline_node_config(pki, BROKER_CN, root / name), tree.resolve())
        print(f"load before {load()}; {args.count} stalled per interface ({args.interfaces}), {args.clients} clients, "
              f"{args.steady} steady client; s: the phase's length; p99 ms (ratio to the run's quiet p99, and its "
              "5-95 % bootstrap interval); CPU and run-queue wait as a share of the round trips' wall time (1.0 = one "
              "core; allCPU: every thread of the node; me: the steady client's thread); slowest 1 %: mean round trip "
              "ms, the node's main thread CPU / wait, the steady client's wait and the stalled clients' CPU over them",
              flush=True)
        print(f"{'run':<9}{'phase':<8}{'s':>6}{'n':>6}{'p50':>7}{'p99':>7}{'ratio':>7}{'5-95 %':>11}{'nodeCPU':>8}"
              f"{'nodeWait':>9}{'allCPU':>7}{'meCPU':>6}{'meWait':>7}{'clients':>8}{'peer':>6} | {'slow ms':>7}{'nCPU':>6}"
              f"{'nWait':>6}{'meW':>6}{'cli':>6}", flush=True)
        pooled: dict[str, dict[str, list[float]]] = {mode: {} for mode in modes}
        try:
            for run in range(args.runs):
                for mode in modes:
                    result = run_once(mode, nodes, pki, args)
                    print_run(mode + str(run + 1), result)
                    for phase, r in result.items():
                        if phase != "clients":
                            pooled[mode].setdefault(phase, []).extend(r["rtts"])
        finally:
            for running in nodes.values():
                running.stop()
        print_pooled(pooled)
        print(f"load after {load()}")


if __name__ == "__main__":
    main()
