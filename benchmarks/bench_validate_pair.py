"""Benchmark: a first and a later validate of source trees (and JDKs) over the same ingest output, same run.

Each (``--tree``, ``--java-home``) pair runs in a Python process and driver JVM of its own (the tree's code
from ``PYTHONPATH``, its own jar and class data archive, that JDK), which calls ``spark.validate.validate``
``--runs`` times over ``TABLES`` (an ingest output, e.g. the ``tables`` that ``bench_spark.py --work DIR``
leaves), each run into a fresh output directory. Per validate: wall seconds, the JVM's CPU seconds (from
``/proc``) and per thread kind (HotSpot's compiler threads "jit", Spark's task threads "tasks", the
collector "gc"), the findings; per JVM its peak resident size. Comparing CPU seconds of trees run one after
the other survives a shared host's load better than wall seconds; alternate the order between runs.

``--floor JOB`` (repeatable) also runs, each in a new JVM of this tree's session (the same settings, HotSpot
options and class data archive as its validate), Spark's own minimum of a validate over the same tables with none
of the rules (:data:`FLOORS`): one scan of the columns the rules read (``spark.rules.INPUT_COLUMNS``) and one
shuffle. ``--floor-only`` skips the trees' validates; ``--plain LOG`` runs the plain-Python audit of the log the
tables were ingested from (``benchmarks/plain_audit.py``, in a process of its own) and prints each first run as
a multiple of it (the goal: a first validate at least 5x).

    .venv/bin/python benchmarks/bench_validate_pair.py TABLES --tree DIR [--tree DIR ...] \
        [--java-home JDK ...] [--java-options="-XX:..."] [--conf KEY=VALUE ...] [--runs 2] [--master local[*]]
        [--floor scan|scan-sort ...] [--floor-only] [--plain LOG]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pyspark.sql import Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

from spark import rules
from spark.ingest import read_messages
from spark.tables import Layout

#: Run in the tree's process: validate() --runs times, one JSON line on stdout.
_CHILD = r"""
import json, os, shutil, sys, tempfile, time
from pathlib import Path
from spark import validate as v
from spark.session import build_session
from spark.session import JAVA_OPTIONS, java_options
tables, master, extra, runs, archive = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
conf, job = json.loads(sys.argv[6]), sys.argv[7]
if job != "validate":  # a floor: this benchmark's own module (its directory is on the path)
    from bench_validate_pair import run_floor
# the tree's own HotSpot options (with its class data archive, when it has one and it is wanted), then the extra ones
options = java_options() if archive else JAVA_OPTIONS
spark = build_session(master, "bench-validate-pair",
                      {**conf, "spark.driver.extraJavaOptions": f"{options} {extra}".strip()})
jvm = spark.sparkContext._jvm
pid = jvm.java.lang.ProcessHandle.current().pid()
tick = os.sysconf("SC_CLK_TCK")

def seconds(stat):
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick

def threads():
    out = {"jit": 0.0, "tasks": 0.0, "gc": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        kind = ("jit" if "CompilerThre" in name else "tasks" if name.startswith("Executor task")
                else "gc" if name.startswith("GC Thread") else None)
        if kind:
            out[kind] += seconds(stat)
    return out

out = {"java": jvm.java.lang.System.getProperty("java.version")}
work = tempfile.mkdtemp(prefix="bench-validate-pair-")
for i in range(runs):
    cpu, start, before = seconds(Path(f"/proc/{pid}/stat").read_text()), time.perf_counter(), threads()
    if job == "validate":
        findings = v.validate(spark, v.load_messages(spark, [tables]), f"{work}/{i}", "bench").violations
    else:
        findings = run_floor(spark, job, tables)
    after = threads()
    out[f"run{i + 1}"] = dict(wall=round(time.perf_counter() - start, 2),
                              cpu=round(seconds(Path(f"/proc/{pid}/stat").read_text()) - cpu, 2),
                              **{k: round(after[k] - before[k], 1) for k in after},
                              findings=findings, load=round(os.getloadavg()[0], 1))
status = Path(f"/proc/{pid}/status").read_text().splitlines()
out["jvm_peak_mb"] = next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM:"))
spark.stop()
shutil.rmtree(work)
print(json.dumps(out))
"""


def run_tree(tree: Path, java_home: str | None, args: argparse.Namespace,
             job: str = "validate") -> dict[str, object] | None:
    """The child's figures of ``job`` (``validate`` or a floor) for ``tree`` under ``java_home`` (None: this
    environment's JDK), or None if it failed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tree), str(Path(__file__).resolve().parent)))}
    if java_home:  # a tree of spark/runtime.py picks its Java by CROADS_AUDIT_JAVA (older ones run JAVA_HOME's)
        env["JAVA_HOME"] = env["CROADS_AUDIT_JAVA"] = java_home
    python = tree / ".venv" / "bin" / "python"
    done = subprocess.run([str(python) if python.exists() else sys.executable, "-c", _CHILD, args.tables,
                           args.master, args.java_options, str(args.runs),
                           "0" if args.no_class_archive else "1", json.dumps(dict(c.split("=", 1) for c in args.conf)),
                           job],
                          env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        print(f"  {tree} failed ({done.returncode}):\n{done.stderr[-3000:]}", flush=True)
        return None
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


#: The floors (``--floor``): Spark's own minimum of a validate over the tables, with none of the rules.
FLOORS = {
    "scan": "one scan of the columns the rules read, grouped by shard key (a count, and a hash or size of every "
            "column read, so that none is pruned)",
    "scan-sort": "one scan of the columns the rules read, the rows shuffled by shard key and sorted by sequence "
                 "(what the per-shard order check needs at least)",
}


def run_floor(spark: SparkSession, job: str, tables: str) -> int | None:
    """Runs the floor ``job`` (:data:`FLOORS`) over the tables at ``tables`` into Spark's ``noop`` sink (every
    column computed, nothing written); returns the groups of ``scan`` (None for ``scan-sort``: not counted)."""
    m = read_messages(spark, Layout(tables).messages).select(*rules.INPUT_COLUMNS)
    match job:
        case "scan":
            maps = [f.name for f in m.schema.fields if isinstance(f.dataType, MapType)]  # maps have no hash
            others = [name for name in m.columns if name not in maps]
            groups = Observation()
            frame = m.groupBy("shardKey").agg(F.count(F.lit(1)).alias("rows"), F.max(F.xxhash64(*others)).alias("hash"),
                                              *[F.max(F.size(name)).alias(name) for name in maps])
            frame.observe(groups, F.count(F.lit(1)).alias("groups")).write.format("noop").mode("overwrite").save()
            return int(groups.get["groups"])
        case "scan-sort":
            (m.repartition("shardKey").sortWithinPartitions("shardKey", "shardSeq")
             .write.format("noop").mode("overwrite").save())
            return None
        case _:
            raise ValueError(f"no floor {job!r}: one of {', '.join(FLOORS)}")


#: The plain-Python audit of a log in a new process (this tree's rules); its seconds on stdout.
_PLAIN = """
import sys
from pathlib import Path
from plain_audit import audit_file
print(audit_file(Path(sys.argv[1]))[2])
"""


def plain_seconds(log: str) -> float:
    """Seconds of the plain-Python audit pass over ``log`` (``plain_audit.audit_file``) in a new process."""
    here = Path(__file__).resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(here.parents[1]), str(here.parent)))}
    done = subprocess.run([sys.executable, "-c", _PLAIN, log], env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def print_figures(label: str, figures: dict[str, object], runs: int, job: str = "validate") -> None:
    print(f"{label} (Java {figures['java']}, JVM peak {figures['jvm_peak_mb']} MB)")
    for i in range(runs):
        r = figures[f"run{i + 1}"]
        assert isinstance(r, dict)
        found = f"{r['findings']} findings" if job == "validate" else (
            f"{r['findings']} shard keys" if r["findings"] is not None else "rows not counted")
        print(f"  {job_label(job)} {i + 1}: {r['wall']:6.1f} s, JVM CPU {r['cpu']:6.1f} s (jit {r['jit']:5.1f}, "
              f"tasks {r['tasks']:5.1f}, gc {r['gc']:4.1f}), {found}, load average {r['load']}",
              flush=True)


def job_label(job: str) -> str:
    return "validate" if job == "validate" else f"floor {job}"


def utc() -> str:
    return time.strftime("%H:%M:%S", time.gmtime())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tables", help="an ingest output directory")
    parser.add_argument("--tree", action="append", type=Path, help="a source tree (repeat: run in this order)")
    parser.add_argument("--java-home", action="append", default=[], help="a JDK (repeat: each tree under each)")
    parser.add_argument("--java-options", default="",
                        help="more HotSpot options for every driver JVM (--java-options=-XX:...)")
    parser.add_argument("--no-class-archive", action="store_true",
                        help="without the trees' class data archive (e.g. with another JDK's --java-options)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for every session (repeat)")
    parser.add_argument("--runs", type=int, default=2, help="validates per JVM (2: a first and a second)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--floor", action="append", default=[], choices=sorted(FLOORS),
                        help="also Spark's own minimum in a new JVM of this tree's session (repeat: in this order)")
    parser.add_argument("--floor-only", action="store_true", help="the floors alone, no tree's validate")
    parser.add_argument("--plain", metavar="LOG", help="first the plain-Python audit of LOG (the tables' log)")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parents[1]
    jobs = [] if args.floor_only else [(tree, java_home, "validate") for tree in args.tree or [here]
                                       for java_home in args.java_home or [None]]
    jobs += [(here, None, floor) for floor in args.floor]
    plain = None
    if args.plain:
        started = utc()
        plain = plain_seconds(args.plain)
        print(f"plain Python audit of {args.plain}: {plain:.1f} s; {started}-{utc()} UTC, load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
    failed, firsts = 0, []
    for tree, java_home, job in jobs:
        print(f"{tree} {java_home or ''}: start {utc()} UTC, load average {os.getloadavg()[0]:.1f}", flush=True)
        figures = run_tree(tree.resolve(), java_home, args, job)
        if figures is None:
            failed += 1
            continue
        print_figures(f"{job_label(job)} {tree} {java_home or ''}".rstrip(), figures, args.runs, job)
        firsts.append((f"{job_label(job)} {tree} {java_home or ''}".rstrip(), figures["run1"]))
    print(f"end {utc()} UTC, load average {os.getloadavg()[0]:.1f}")
    for label, first in firsts if plain else ():
        assert isinstance(first, dict) and plain is not None
        print(f"{label:50} first {first['wall']:6.1f} s: plain Python ({plain:.1f} s) / it = {plain / first['wall']:.2f}x")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
