"""Benchmark: Spark ingest (JSON lines -> the three Parquet tables) of one or more source trees against DuckDB.

On an existing log (e.g. the one ``bench_spark.py --work DIR`` leaves in ``DIR/logs``), two fair pairs:
- cold: DuckDB's first pass in a new Python process (``import duckdb`` and the pass, timed from the start of
  the process) against Spark's first ingest in a new JVM (cold JIT and code generation, as in
  bench_spark.py; the session's start is printed but not counted: an audit runs in a session already
  started, e.g. the one validate then uses);
- warm: DuckDB again in this process (``bench_spark.duckdb_pass``, snappy, before and after the trees: the
  mean) against Spark's later ingests in that same JVM (``--runs``, the fastest).
``spark.ingest.ingest`` of each ``--tree`` runs in a Python process and JVM of its own (``local[*]``); each
tree's code is imported from that tree (``PYTHONPATH``) with this interpreter; ``--tree`` may repeat
(before / after in one run, alternate their order between runs). DuckDB also once with zstd (the codec of
Spark's tables). The log is read once first, so that every pass finds it in the page cache. Prints the
seconds, the ratios, the driver JVM's peak resident size and the load average before and after each step.

``--floor JOB`` (repeatable) also runs, each in a new JVM of this tree's session (``spark.session.build_session``:
the same settings, HotSpot options, class data archive and jar as its ingest), Spark's own work on the same log
with none of the ingest's checks: the floor of a Spark ingest on this machine (:data:`FLOORS`: the lines copied
as text into Parquet; Spark's JSON reader with an explicit schema of the log's top-level fields into Parquet; the
same plus the ingest's partitioning and clustering sort). ``--floor-only`` skips the trees' ingests (one JVM per
run of the script: a short hold of the bench lock). DuckDB's warm passes run only with ``--runs`` over 1.

``--variant 'TREE|JAVA OPTIONS|KEY=VALUE ...|NAME=VALUE ...'`` runs a tree with extra HotSpot options, Spark settings
and environment variables (a same-run pair of settings; e.g. ``CROADS_AUDIT_JAVA=system``: another Java,
spark/runtime.py). Each tree's JVM tells its Java version. Each ingest's JVM CPU seconds (all its threads: tasks, JIT,
collector) and the Parquet bytes written are printed too, and where that CPU went (:func:`cpu_split`: the tasks, HotSpot's C2 and
C1 compilers, the collector, the rest; and the seconds Janino compiled Spark's generated classes): a first
ingest's extra cost is mostly the compilers'; and the CPU the rest of the host took meanwhile (another job's CPU
comes out of the wall time on 2 cores).

    .venv/bin/python benchmarks/bench_ingest.py LOG [--tree DIR ...] [--variant 'DIR|-XX:...|k=v|ENV=v' ...] [--runs 3]
        [--master local[*]] [--jfr FILE] [--floor text|json|json-sorted ...] [--floor-only]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_spark import duckdb_pass
from jvm_cpu import cpu_split, describe_split
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, MapType, StringType, StructField, StructType

from spark import parse, tables
from spark.ingest import CLUSTERED_BY, LINE_SEPARATOR, WRITE_OPTIONS, balanced_splits

#: Run in the tree's process: the job (``ingest``, or a floor of :data:`FLOORS`) timed, then the JVM's peak RSS;
#: one JSON line on stdout.
_CHILD = """
import json, os, sys, tempfile, time
from pathlib import Path
from spark.ingest import ingest
from spark.session import build_session
job = sys.argv[6]
if job != "ingest":  # a floor: this benchmark's own module (its directory is on the path)
    from bench_ingest import run_floor
try:  # the tree's own HotSpot options (with its class data archive, when it has one), then the extra ones
    from spark.session import java_options
    options = java_options()
except ImportError:
    from spark.session import JAVA_OPTIONS as options
conf = {"spark.driver.extraJavaOptions": f"{options} {sys.argv[3]}"} if sys.argv[3] else {}
conf.update(json.loads(sys.argv[5]))
start = time.perf_counter()
spark = build_session(sys.argv[2], "bench-ingest", conf)
session = time.perf_counter() - start
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
tick = os.sysconf("SC_CLK_TCK")
def cpu():  # the JVM's user + system CPU seconds (its compiler and collector threads included)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick
from jvm_cpu import host_busy, threads as thread_cpu  # this benchmark's module: its directory is on the path
def threads():  # CPU seconds per JVM thread name
    return thread_cpu(pid)
jvm = spark.sparkContext._jvm
codegen = jvm.org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator  # Janino's compile time (ns)
runs, cpus, splits, others = [], [], [], []
for _ in range(int(sys.argv[4])):
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as out:
        start, used, before, janino, host = time.perf_counter(), cpu(), threads(), codegen.compileTime(), host_busy()
        if job == "ingest":
            summary = ingest(spark, [sys.argv[1]], out)
        else:
            run_floor(spark, job, sys.argv[1], f"{out}/floor")
        runs.append(time.perf_counter() - start)
        cpus.append(cpu() - used)
        others.append(host_busy() - host - cpus[-1])  # the rest of the host meanwhile
        after = threads()
        split = {name: after[name] - before.get(name, 0.0) for name in after}
        split["janino"] = (codegen.compileTime() - janino) / 1e9
        splits.append(split)
        size = sum(f.stat().st_size for f in Path(out).rglob("*.parquet"))
        if job != "ingest":  # the rows written, from the files' footers (not timed)
            summary = f"{spark.read.parquet(f'{out}/floor').count()} rows"
system = jvm.java.lang.System
java = f"{system.getProperty('java.version')} ({system.getProperty('java.vm.info')})"
status = Path(f"/proc/{pid}/status").read_text().splitlines()
peak = next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))
spark.stop()
print(json.dumps({"session": session, "runs": runs, "cpu": cpus, "summary": str(summary), "jvm_mb": peak,
                  "parquet_mb": size / 1e6, "threads": splits, "others": others, "java": java}))
"""

#: DuckDB's first pass in a new process, timed from before ``import duckdb`` (``duckdb_pass`` imports it; bench_spark's
#: own imports, PySpark's among them, before the clock: 0.3-0.5 s that are not DuckDB's); its seconds on stdout.
_DUCK_COLD = """
import sys, time
from pathlib import Path
from bench_spark import duckdb_pass
start = time.perf_counter()
duckdb_pass(Path(sys.argv[1]), Path(sys.argv[2]))
print(time.perf_counter() - start)
"""


#: The floors (``--floor``): Spark's own work on the log with none of the ingest's checks, each written to Parquet
#: by the session's writer (zstd) with the ingest's input splits (``balanced_splits``).
FLOORS = {
    "text": "the lines copied as text (spark.read.text -> Parquet)",
    "json": "Spark's JSON reader, the log's top-level fields as an explicit schema (no inference) -> Parquet",
    "json-sorted": "the same, partitioned by node and date and sorted as the ingest clusters its messages",
}


def floor_schema() -> StructType:
    """The log's top-level fields (:func:`spark.parse.line_fields`) typed as the messages table types them (the ISO
    times as text), and its two objects (application properties, details) as maps of text."""
    types: dict[str, DataType] = {field.name: field.dataType for field in tables.MESSAGES.fields}
    fields = [StructField(name, types.get(name, StringType()), True) for name in parse.line_fields()]
    return StructType(fields + [StructField(name, MapType(StringType(), StringType()), True)
                                for name in parse.NESTED_FIELDS])


def json_lines(spark: SparkSession, log: str) -> DataFrame:
    return spark.read.schema(floor_schema()).option("lineSep", LINE_SEPARATOR).json(log)


def run_floor(spark: SparkSession, job: str, log: str, out: str) -> None:
    """Writes the floor ``job`` (:data:`FLOORS`) of ``log`` into ``out``."""
    with balanced_splits(spark, [log]):
        match job:
            case "text":
                spark.read.option("lineSep", LINE_SEPARATOR).text(log).write.parquet(out)
            case "json":
                json_lines(spark, log).write.options(**WRITE_OPTIONS).parquet(out)
            case "json-sorted":
                frame = json_lines(spark, log).withColumns({
                    "node": F.coalesce(F.col("node"), F.lit("unknown")),
                    "date": F.date_format(F.timestamp_millis(F.col("timestampMs")), "yyyy-MM-dd")})
                (frame.sortWithinPartitions("node", "date", *CLUSTERED_BY).write.options(**WRITE_OPTIONS)
                 .partitionBy("node", "date").parquet(out))
            case _:
                raise ValueError(f"no floor {job!r}: one of {', '.join(FLOORS)}")


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def run_tree(tree: Path, log: str, master: str, java_options: str, runs: int,
             conf: dict[str, str] | None = None, job: str = "ingest",
             environ: dict[str, str] | None = None) -> dict[str, object]:
    """``job`` (``ingest``, or a floor of :data:`FLOORS`) ``runs`` times in a new process and JVM of ``tree``'s code
    (with the extra environment variables ``environ``)."""
    env = {**os.environ, **(environ or {}),
           "PYTHONPATH": os.pathsep.join((str(tree), str(Path(__file__).resolve().parent)))}
    done = subprocess.run([sys.executable, "-c", _CHILD, log, master, java_options, str(runs), json.dumps(conf or {}),
                           job], env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{job} in {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def duckdb_cold(log: Path, target: Path) -> float:
    """Seconds of DuckDB's first pass in a new Python process (its import included)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)}
    done = subprocess.run([sys.executable, "-c", _DUCK_COLD, str(log), str(target)], env=env,
                          capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def read_once(log: Path) -> None:
    """Reads the log so that the page cache holds it for every pass (as far as memory allows)."""
    with log.open("rb") as source:
        while source.read(1 << 24):
            pass


@dataclass(frozen=True)
class Variant:
    """A tree to run, with extra HotSpot options, Spark settings and environment variables for its process and JVM
    (``--variant``)."""

    tree: Path
    java_options: str = ""
    conf: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        extra = " ".join(filter(None, (self.java_options, *(f"{k}={v}" for k, v in (*self.conf, *self.env)))))
        return f"{self.tree}" + (f" [{extra}]" if extra else "")


def tree_variant(text: str) -> Variant:
    return Variant(Path(text).resolve())


def parse_variant(text: str) -> Variant:
    """``TREE|JAVA OPTIONS|KEY=VALUE KEY=VALUE|NAME=VALUE ...`` (the last three may be empty or left out)."""
    tree, java, conf, env = (text.split("|") + ["", "", ""])[:4]
    pairs = tuple(tuple(item.split("=", 1)) for item in conf.split())
    names = tuple(tuple(item.split("=", 1)) for item in env.split())
    return Variant(Path(tree).resolve(), java.strip(), pairs, names)  # type: ignore[arg-type]


def utc() -> str:
    return time.strftime("%H:%M:%S", time.gmtime())


def run_job(variant: Variant, job: str, args: argparse.Namespace, n: int) -> dict[str, object]:
    """Runs ``job`` (``ingest`` or a floor) of ``variant`` in a new JVM and prints its figures."""
    options = variant.java_options
    if args.jfr:
        options += f" -XX:StartFlightRecording=filename={args.jfr}.{n}.jfr,settings=profile"
    started = utc()
    result = run_tree(variant.tree, args.log, args.master, options.strip(), args.runs, dict(variant.conf), job,
                      dict(variant.env))
    runs = " / ".join(f"{s:.1f}" for s in result["runs"])  # type: ignore[attr-defined]
    cpus = " / ".join(f"{s:.1f}" for s in result.get("cpu", []))  # type: ignore[attr-defined]
    print(f"{job_label(variant, job)}: {runs} s, JVM CPU {cpus} s (session start {result['session']:.1f} s, "
          f"not counted), JVM peak {result['jvm_mb']:.0f} MB, Parquet {result.get('parquet_mb', 0):.0f} MB "
          f"({result['summary']}); Java {result.get('java', '?')}; {started}-{utc()} UTC, load {load()}", flush=True)
    splits: list[dict[str, float]] = result.get("threads", [])  # type: ignore[assignment]
    others: list[float] = result.get("others", [])  # type: ignore[assignment]
    for n_run, threads in enumerate(splits):
        rest = f"; the rest of the host {others[n_run]:.1f} s of CPU meanwhile" if n_run < len(others) else ""
        print(f"  {job} {n_run + 1} ({'cold' if n_run == 0 else 'warm'}): {describe_split(cpu_split(threads))}{rest}",
              flush=True)
    return result


def job_label(variant: Variant, job: str) -> str:
    return f"ingest {variant.label}" if job == "ingest" else f"floor {job} ({variant.tree})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log")
    parser.add_argument("--tree", dest="variants", action="append", type=tree_variant, default=None,
                        help="a source tree (default: this one)")
    parser.add_argument("--variant", dest="variants", action="append", type=parse_variant,
                        help="'TREE|JAVA OPTIONS|KEY=VALUE ...|NAME=VALUE ...': a tree with extra HotSpot options, "
                             "Spark settings and environment variables")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--jfr", default=None, help="record a JFR profile of each tree's JVM into FILE.<n>.jfr")
    parser.add_argument("--runs", type=int, default=3, help="ingests per JVM: the first cold, the others warm")
    parser.add_argument("--floor", action="append", default=[], choices=sorted(FLOORS),
                        help="also Spark's own work in a new JVM of this tree's session (repeat: in this order)")
    parser.add_argument("--floor-only", action="store_true", help="the floors alone, no tree's ingest")
    args = parser.parse_args(argv)
    here = Variant(Path(__file__).resolve().parent.parent)
    jobs = [] if args.floor_only else [(variant, "ingest") for variant in args.variants or [here]]
    jobs += [(here, floor) for floor in args.floor]
    log = Path(args.log)
    warm = args.runs > 1  # DuckDB's warm passes: the peers of the later ingests in a JVM
    with tempfile.TemporaryDirectory(prefix="bench-ingest-duck-") as duck:
        target = Path(duck) / "duck.parquet"
        read_once(log)
        print(f"log {log}: {log.stat().st_size / 1e6:.0f} MB; {utc()} UTC, load {load()}", flush=True)
        cold = duckdb_cold(log, target)
        before = timed_pass(log, target) if warm else math.nan
        print(f"DuckDB JSON -> Parquet: cold {cold:.1f} s (new process)" + (f", warm {before:.1f} s" if warm else "")
              + f"; {utc()} UTC, load {load()}", flush=True)
        results = [run_job(variant, job, args, n) for n, (variant, job) in enumerate(jobs)]
        after = timed_pass(log, target) if warm else math.nan
        zstd = timed_pass(log, target, "zstd") if warm else math.nan
    duck_s = statistics.mean((before, after))
    if warm:
        print(f"DuckDB again: warm {after:.1f} s; zstd {zstd:.1f} s; {utc()} UTC, load {load()}")
    for (variant, job), result in zip(jobs, results):
        seconds: list[float] = result["runs"]  # type: ignore[assignment]
        line = (f"{job_label(variant, job):40} cold {seconds[0]:6.1f} s = {seconds[0] / cold:.1f}x DuckDB cold "
                f"({cold:.1f} s)")
        if len(seconds) > 1:
            fastest = min(seconds[1:])
            line += (f"; warm {fastest:6.1f} s = {fastest / duck_s:.1f}x DuckDB warm ({duck_s:.1f} s), "
                     f"{fastest / zstd:.1f}x with zstd")
        print(line)
    return 0


def timed_pass(log: Path, target: Path, codec: str = "snappy") -> float:
    """Seconds of a DuckDB pass in this process."""
    start = time.perf_counter()
    duckdb_pass(log, target, codec)
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
