"""A JVM's CPU seconds per thread, and their split into the parts of a Spark job (Linux ``/proc``).

:func:`threads` reads every thread of a process (the task threads, HotSpot's compilers and collector, the
driver's); :func:`cpu_split` groups a difference of two readings into the tasks, C2, C1, the collector and the
rest; :func:`host_busy` tells what the rest of the host took meanwhile. Used by bench_ingest.py (each tree's
JVM) and bench_spark.py (its ingest)."""
from __future__ import annotations

import os
from pathlib import Path

#: JVM thread names (as Linux keeps them: the first 15 characters) -> the part of a job's CPU they spend.
THREAD_GROUPS = (("Executor task", "tasks"), ("C2 CompilerThre", "C2"), ("C1 CompilerThre", "C1"), ("GC Thread", "GC"))


def threads(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) per thread name of process ``pid`` (its 15 first characters, as Linux keeps
    them; threads of one name added up)."""
    tick = os.sysconf("SC_CLK_TCK")
    seconds: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        seconds[name] = seconds.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return seconds


def host_busy() -> float:
    """CPU seconds the whole host has spent busy since it started (``/proc/stat``: every state but idle and
    iowait): minus a job's own CPU, what the rest of the host took meanwhile (on 2 cores, a job's wall time moves
    with it)."""
    ticks = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(ticks[:8]) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per thread name between two readings of :func:`threads` (threads started meanwhile in full;
    those that ended meanwhile are lost)."""
    return {name: after[name] - before.get(name, 0.0) for name in after}


def cpu_split(threads: dict[str, float]) -> dict[str, float]:
    """A job's CPU seconds per JVM thread name -> per part: the tasks, HotSpot's two compilers (JIT), the
    collector, and the rest (the driver's planning and scheduling, Spark's code generation, HotSpot's VM thread);
    ``janino`` (Spark's generated classes compiled, seconds inside the driver's and the tasks' threads) is kept."""
    split = {"tasks": 0.0, "C2": 0.0, "C1": 0.0, "GC": 0.0, "rest": 0.0}
    for name, seconds in threads.items():
        if name == "janino":
            continue
        group = next((part for prefix, part in THREAD_GROUPS if name.startswith(prefix)), "rest")
        split[group] += seconds
    return {**split, "janino": threads.get("janino", 0.0)}


def describe_split(split: dict[str, float]) -> str:
    return (f"tasks {split['tasks']:.1f}, JIT C2 {split['C2']:.1f} + C1 {split['C1']:.1f}, GC {split['GC']:.1f}, "
            f"rest {split['rest']:.1f} s of CPU; Janino {split['janino']:.1f} s")
