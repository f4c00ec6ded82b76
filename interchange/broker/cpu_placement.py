"""Where a broker process's threads run: ``[broker] process_cpus`` (one CPU list per broker process).

- :func:`node_cpus` is the set a node may place its processes on: the CPUs of its cgroup's cpuset (else
  the machine's online CPUs). It is *not* the calling thread's affinity: a thread confined by
  ``handshake_cpus`` (or a process started from it) inherits a narrowed set, and checking a config against
  that set would refuse CPUs the node may well use.
- :func:`process_cpus_problem` checks a ``process_cpus`` setting against it (None: it holds).
- :func:`place_process` moves every thread of this process (``/proc/self/task``) to a set; threads started
  afterwards inherit it from the thread that starts them. A broker process places itself before it
  checks its config and before it starts threads: process 0 at node start, a worker first thing, from
  the set its ``start`` control message carries (:attr:`interchange.broker.control.Start.cpus`).
- :func:`usable_cpus` is the set process 0 records at node start, before anything confines a thread:
  what a worker (re)started without ``process_cpus`` runs on.

Linux only; elsewhere (no ``os.sched_setaffinity``) nothing is placed and a ``process_cpus`` setting is
refused.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["cpu_listing", "node_cpus", "parse_cpu_list", "place_process", "process_cpus_problem", "thread_cpus", "usable_cpus"]

_CGROUP = Path("/sys/fs/cgroup")
_ONLINE = Path("/sys/devices/system/cpu/online")


def parse_cpu_list(text: str) -> frozenset[int]:
    """A kernel CPU list (``0-3,8,10-11``) as a set; ValueError if it is not one."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def _cpuset_files(cgroup_file: Path = Path("/proc/self/cgroup"), root: Path = _CGROUP) -> list[Path]:
    """This process's cpuset files, cgroup v2 then v1 (each may be absent)."""
    files: list[Path] = []
    try:
        lines = cgroup_file.read_text().splitlines()
    except OSError:
        return files
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            files += [root / relative / "cpuset.cpus.effective", root / "unified" / relative / "cpuset.cpus.effective"]
        elif "cpuset" in controllers.split(","):
            files += [root / "cpuset" / relative / "cpuset.effective_cpus", root / "cpuset" / relative / "cpuset.cpus"]
    return files


def node_cpus() -> frozenset[int] | None:
    """The CPUs this node may place its processes on (None: the system cannot confine threads)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    for path in [*_cpuset_files(), _ONLINE]:
        try:
            cpus = parse_cpu_list(path.read_text())
        except (OSError, ValueError):
            continue
        if cpus:
            return cpus
    return frozenset(os.sched_getaffinity(0))


def usable_cpus() -> frozenset[int] | None:
    """The CPUs the calling thread may use now (None: the system cannot confine threads); process 0 records
    them at node start, before anything confines a thread."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return frozenset(os.sched_getaffinity(0))


def process_cpus_problem(process_cpus: list[list[int]], processes: int, usable: frozenset[int] | None) -> str | None:
    """Why ``process_cpus`` cannot place ``processes`` broker processes on ``usable`` (None: it can)."""
    if usable is None:
        return "this system cannot confine a thread to CPUs (no os.sched_setaffinity)"
    if len(process_cpus) != processes:
        return f"{len(process_cpus)} entries for broker.processes {processes}: give one CPU list per broker process"
    for index, entry in enumerate(process_cpus):
        if not entry:
            return f"entry {index} (broker process {index}) names no CPU"
        twice = sorted({cpu for cpu in entry if entry.count(cpu) > 1})
        if twice:
            return f"entry {index} (broker process {index}) names CPU {cpu_listing(twice)} more than once"
        unknown = sorted(set(entry) - usable)
        if unknown:
            return (f"entry {index} (broker process {index}): CPU {cpu_listing(unknown)} is not one this node may use "
                    f"({cpu_listing(usable)})")
    return None


def place_process(cpus: frozenset[int]) -> bool:
    """Every thread of this process to ``cpus`` (False, logged, if that cannot be done: it runs as it was)."""
    try:
        tasks = [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        tasks = [0]
    try:
        for task in tasks:
            try:
                os.sched_setaffinity(task, cpus)
            except ProcessLookupError:  # the thread ended meanwhile
                pass
    except (AttributeError, OSError) as exc:
        log.warning("this process cannot be placed on CPU %s (%s): it runs on any", cpu_listing(cpus), exc)
        return False
    return True


def thread_cpus() -> dict[str, list[int]]:
    """Each thread of this process (``name:tid``) and its CPUs, for the placement's log record."""
    threads: dict[str, list[int]] = {}
    try:
        tasks = sorted(int(name) for name in os.listdir("/proc/self/task"))
    except OSError:
        return threads
    for task in tasks:
        try:
            name = Path(f"/proc/self/task/{task}/comm").read_text().strip()
            threads[f"{name}:{task}"] = sorted(os.sched_getaffinity(task))
        except (OSError, AttributeError):
            continue
    return threads


def cpu_listing(cpus: frozenset[int] | list[int]) -> str:
    """CPUs as a message lists them: ``0, 2, 3``."""
    return ", ".join(map(str, sorted(cpus)))
