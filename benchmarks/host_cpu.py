"""What the rest of the host did over a benchmark phase (Linux ``/proc``): the CPU of every process that is not
this process or one of its descendants (the benchmark's own node, RabbitMQ and clients are), by process, and the
steal of this virtual machine's CPUs (``/proc/stat``: runnable, but the hypervisor ran something else); and,
from ``/proc/stat`` too, the machine's idle time (a phase that left a core idle was not bound by the host's CPUs)
and its interrupt time (irq and softirq: loopback TCP's receive work, charged to no process).

A phase's window (from its first reading to its result) holds its clients' start-up and the consumers' wait for
stragglers too; :class:`Sampler` reads ``/proc/stat`` every 20 ms in a thread, so that the machine's idle and steal
over the traffic alone (first send to last receive) are known: a phase that left a core idle while its messages
flowed was not bound by the host's CPUs.

:func:`snapshot` reads the host at one instant; :func:`delta` tells, between two snapshots, the wall time, the
other processes' CPU (in all and the largest by process, each named by its ``comm`` and pid) and the steal, in
cores (CPU seconds over wall seconds), with the 1-minute load average at the end. A process that started meanwhile
counts in full, one that ended meanwhile is lost (its CPU is not in ``/proc`` any more). Used by bench_if2.py, so
that a phase whose host was disturbed shows as such beside its rate."""
from __future__ import annotations

import functools
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

#: other processes and steal together from this many cores on: the phase is marked disturbed (on 2 cores,
#: a flat-out phase that lost 5 % of the machine)
DISTURBED_CORES = 0.1


@dataclass(frozen=True)
class Snapshot:
    at: float  #: time.monotonic()
    steal_s: float  #: the machine's steal since boot, CPU seconds
    idle_s: float  #: idle and iowait since boot, CPU seconds
    irq_s: float  #: irq and softirq since boot, CPU seconds
    #: pid -> (comm, ppid, CPU s, start time in clock ticks after boot: a pid used again is another process)
    processes: dict[int, tuple[str, int, float, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class HostDelta:
    wall_s: float
    others_cores: float  #: other processes' CPU seconds per wall second
    steal_cores: float  #: steal seconds per wall second
    idle_cores: float  #: the machine's idle (and iowait) seconds per wall second
    irq_cores: float  #: the machine's irq and softirq seconds per wall second
    top: tuple[tuple[str, int, float], ...]  #: the largest other processes: (comm, pid, cores), largest first
    load1: float

    @property
    def disturbed(self) -> bool:
        return self.others_cores + self.steal_cores >= DISTURBED_CORES

    def describe(self) -> str:
        top = ", ".join(f"{comm} {pid} {cores:.2f}" for comm, pid, cores in self.top) or "none"
        return (f"{self.wall_s:.1f} s: other processes {self.others_cores:.2f} cores (largest: {top}), steal "
                f"{self.steal_cores:.2f} cores, idle {self.idle_cores:.2f}, irq {self.irq_cores:.2f}, load "
                f"{self.load1:.2f}"
                + (f" -- DISTURBED (others + steal >= {DISTURBED_CORES} cores)" if self.disturbed else ""))


def _stat(pid: str) -> tuple[str, int, float, int] | None:
    """(comm, ppid, utime + stime in seconds, start time) of one process, or None if it ended."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, tail = text.rsplit(")", 1)
    fields = tail.split()
    return (head.split("(", 1)[1], int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
            int(fields[19]))


def _machine_seconds() -> list[float]:
    """The machine's user, nice, system, idle, iowait, irq, softirq and steal since boot, CPU seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    return [int(v) / tick for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def snapshot() -> Snapshot:
    _user, _nice, _system, idle, iowait, irq, softirq, steal = _machine_seconds()
    processes = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(entry)) is not None:
            processes[int(entry)] = stat
    return Snapshot(time.monotonic(), steal, idle + iowait, irq + softirq, processes)


def ours(processes: dict[int, tuple[str, int, float, int]], root: int) -> set[int]:
    """``root`` and its descendants among ``processes`` (by their parent pids)."""
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in processes.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo += children.get(pid, [])
    return found


def delta(before: Snapshot, after: Snapshot, root: int | None = None, top: int = 3) -> HostDelta:
    """The host between two snapshots; the processes of ``root`` (default: this process) left out."""
    wall = max(1e-9, after.at - before.at)
    root = os.getpid() if root is None else root
    mine = ours(after.processes, root) | ours(before.processes, root)
    spent = []
    for pid, (comm, _, cpu, started) in after.processes.items():
        if pid in mine:
            continue
        earlier = before.processes.get(pid)
        used = cpu - earlier[2] if earlier is not None and earlier[3] == started else cpu
        if used > 0:
            spent.append((comm, pid, used / wall))
    spent.sort(key=lambda item: -item[2])
    return HostDelta(wall, sum(cores for _, _, cores in spent), max(0.0, after.steal_s - before.steal_s) / wall,
                     (after.idle_s - before.idle_s) / wall, (after.irq_s - before.irq_s) / wall, tuple(spent[:top]),
                     os.getloadavg()[0])


def _machine() -> tuple[int, float, float]:
    """(time.time_ns(), idle + iowait seconds, steal seconds) of the machine since boot."""
    seconds = _machine_seconds()
    return time.time_ns(), seconds[3] + seconds[4], seconds[7]


class Sampler:
    """``/proc/stat`` every ``period`` seconds in a daemon thread (the last ``keep`` readings): the machine's idle
    and steal between two wall-clock instants (``time.time_ns``, as the benchmarks' message stamps)."""

    def __init__(self, period: float = 0.02, keep: int = 60_000) -> None:
        self.period, self.readings = period, deque[tuple[int, float, float]](maxlen=keep)
        threading.Thread(target=self._run, name="host-sampler", daemon=True).start()

    def _run(self) -> None:
        while True:
            self.readings.append(_machine())
            time.sleep(self.period)

    def over(self, start_ns: int, end_ns: int) -> tuple[float, float] | None:
        """(idle cores, steal cores) from the first reading at or after ``start_ns`` to the last at or before
        ``end_ns``; None when fewer than two readings fall between (a span under two periods)."""
        inside = [reading for reading in list(self.readings) if start_ns <= reading[0] <= end_ns]
        if len(inside) < 2:
            return None
        (t0, idle0, steal0), (t1, idle1, steal1) = inside[0], inside[-1]
        wall = (t1 - t0) / 1e9
        return (idle1 - idle0) / wall, max(0.0, steal1 - steal0) / wall


@functools.cache
def sampler() -> Sampler:
    """This process's one Sampler (one thread reading ``/proc/stat``, whoever asks), started on the first call."""
    return Sampler()
