"""Benchmark: the Spark audit (validate) against a plain single-process Python pass of the same rules.

On one generated log (spark/loggen.py: ~1 % of each fault) of --lines lines (default 2 million):
1. plain Python (benchmarks/plain_audit.py: json.loads + interchange/broker/validation.py), in a process
   of its own: lines/s and that process's peak RSS;
2. Spark validate over the JSON lines (parse + every rule + write violations/metrics): lines/s;
3. Spark ingest (JSON -> Parquet), then Spark validate over the Parquet: lines/s; the ingest's JVM CPU per
   thread kind (tasks, JIT, collector) and the CPU the rest of the host took meanwhile (on a shared 2-core host
   another job's CPU comes out of the ingest's wall time: compare runs by the JVM's CPU). The first validate
   is the first in the JVM, run in the session ingest used, into ingest's output directory (no
   violations or rule metrics there yet); then once more: the steady state without most of the
   code generation and HotSpot's JIT warm-up;
4. streaming latency: a rotated file with one late delivery written into a running stream's
   directory until its violation is committed (the file sink's batch log), median of --probes;
5. driver memory: the peak resident size of the driver JVM (local mode runs the tasks there too)
   and of the Python driver once the log is written (the plain pass runs in a process of its own);
6. the single-machine reference a data engineer would reach for: DuckDB reading the same JSON lines
   into Parquet (``read_json_auto`` -> ``COPY ... (FORMAT parquet)``), in the same run, as the peer of
   Spark's ingest (a benchmark-only dependency: ``pip install duckdb``): twice with its default codec
   (snappy, bracketing Spark's ingest), once with zstd (the codec of Spark's tables).
Goals (same run): Spark ingest within 3x of DuckDB's time; a first validate over Parquet at least 5x
the plain Python pass.
The rule metrics of Spark and plain Python are compared first (same checked/violation counts).
The plain Python pass runs twice, before Spark and after its validates: on a shared host the speed
moves during a run, and the two bracket it. Each ratio is against their mean, and against each one.

    .venv/bin/python benchmarks/bench_spark.py [--lines N | --log FILE] [--master local[2]] [--work DIR] [--probes 5]
"""
from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from dataclasses import dataclass
from typing import TypeVar

import jvm_cpu
import plain_audit
from pyspark.sql import SparkSession

from spark import loggen, stream
from spark.ingest import ingest
from spark.loggen import Message, properties, received, sent
from spark.session import open_session
from spark.validate import ValidationRun, load_messages, validate

T = TypeVar("T")


def timed(label: str, action: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = action()
    seconds = time.perf_counter() - start
    print(f"  {label}: {seconds:.1f} s (load average after: {os.getloadavg()[0]:.1f})", flush=True)
    return result, seconds


def timed_jvm(spark: SparkSession, label: str, action: Callable[[], T]) -> tuple[T, float, float, float]:
    """:func:`timed`, and where the driver JVM's CPU went meanwhile (:mod:`jvm_cpu`: tasks, JIT, collector), and
    the CPU the rest of the host took (other jobs on a shared host: the wall time moves with it): the result, the
    seconds, the JVM's CPU seconds and the rest of the host's."""
    jvm = spark.sparkContext._jvm
    pid = jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    codegen = jvm.org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator  # type: ignore[union-attr]
    before, janino, host = jvm_cpu.threads(pid), codegen.compileTime(), jvm_cpu.host_busy()
    result, seconds = timed(label, action)
    spent = jvm_cpu.spent(before, jvm_cpu.threads(pid))
    split = jvm_cpu.cpu_split({**spent, "janino": (codegen.compileTime() - janino) / 1e9})
    total = sum(cpu for part, cpu in split.items() if part != "janino")
    others = jvm_cpu.host_busy() - host - total
    print(f"    JVM CPU {total:.1f} s: {jvm_cpu.describe_split(split)}; the rest of the host {others:.1f} s of CPU "
          "meanwhile", flush=True)
    return result, seconds, total, others


def generate(path: Path, lines: int) -> int:
    written = 0
    with path.open("w", encoding="utf-8") as out:
        for line in loggen.traffic(lines):
            out.write(line + "\n")
            written += 1
    return written


def duckdb_pass(log: Path, out: Path, codec: str = "snappy") -> int:
    """DuckDB reads the JSON lines into one Parquet file (its defaults: every core, schema inferred; Parquet
    compressed with ``codec``: snappy is DuckDB's default, zstd that of the pipeline's tables); returns the
    rows written."""
    import duckdb  # benchmark-only

    connection = duckdb.connect()
    try:
        connection.execute(f"COPY (SELECT * FROM read_json_auto('{log}', format='newline_delimited')) "
                           f"TO '{out}' (FORMAT parquet, COMPRESSION {codec})")
        row = connection.execute(f"SELECT count(*) FROM read_parquet('{out}')").fetchone()
        return int(row[0]) if row else 0
    finally:
        connection.close()


def plain_pass(log: Path) -> tuple[plain_audit.Metrics, int, float, float]:
    """The plain Python audit of ``log`` in a new process (spawned: no copy of this one's JVM gateway):
    its rule metrics, the lines read, the seconds the pass took there and that process's peak RSS in MB."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(plain_audit.audit_file, log).result()


def compare(plain: plain_audit.Metrics, run: ValidationRun) -> list[str]:
    """Differences between the plain-Python and Spark metrics (empty when they agree)."""
    spark_metrics = {(m.rule, m.check): [m.checked, m.violations] for m in run.metrics}
    differences = []
    properties_checked = plain.pop(("properties", "checked"), [0, 0])[0]
    for key, (checked, violations) in sorted(plain.items()):
        expected = [properties_checked if key[1] == "properties" else checked, violations]
        if spark_metrics.get(key) != expected:
            differences.append(f"{key}: plain {expected}, spark {spark_metrics.get(key)}")
    for key, value in spark_metrics.items():
        if key not in plain and value[1]:
            differences.append(f"{key}: plain none, spark {value}")
    return differences


def peak_mb(pid: int | str = "self") -> float:
    """A process's peak resident size in MB (Linux), NaN elsewhere."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return float("nan")
    return next((int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:")), float("nan"))


def reset_peak() -> None:
    """Start this process's peak resident size afresh (Linux: "5" to clear_refs), so that the peak
    read later is the Spark driver's, not the log generator's."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def jvm_peak_mb(spark: SparkSession) -> float:
    return peak_mb(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]


def late_delivery_file(directory: Path, n: int) -> str:
    now = int(time.time() * 1000)
    message = Message("ixc-probe", 10_000_000 + n, now, properties("DENM", local_id=f"probe{n}"), body=b"p%d" % n)
    partial = directory / f"probe.part{n}"
    partial.write_text(loggen.lines([received(message), sent(message, now + 45)]))
    partial.rename(directory / f"probe-{n:08d}-0001.jsonl")
    return message.id


def stream_latency(spark: SparkSession, work: Path, probes: int) -> list[float]:
    """Seconds from a file's rename into the directory to the commit of the batch holding its violation."""
    log_dir, out = work / "stream-logs", work / "stream-out"
    for kept in (log_dir, out):  # a --work directory used before: a fresh stream and checkpoint
        shutil.rmtree(kept, ignore_errors=True)
    log_dir.mkdir()
    queries = stream.start(spark, str(log_dir), str(out), trigger_seconds=0.5)
    committed = out / "stream" / "violations" / "_spark_metadata"
    try:
        latencies = []
        for n in range(probes + 1):  # the first probe warms the queries up and is not counted
            before = set(committed.iterdir()) if committed.exists() else set()
            start = time.perf_counter()
            late_delivery_file(log_dir, n)
            while not committed.exists() or set(committed.iterdir()) == before:
                if time.perf_counter() - start > 120:
                    raise RuntimeError("no violation committed within 120 s")
                time.sleep(0.02)
            if n:
                latencies.append(time.perf_counter() - start)
        return latencies
    finally:
        stream.stop(queries)


@dataclass
class Run:
    """What one run measured: seconds per step, peak memory in MB, the lines read, the rule metrics'
    differences between plain Python and Spark (none: they agree)."""
    read: int
    summary: str
    plain_s: tuple[float, float]  #: the plain Python audit before Spark's validates, and after
    spark_s: dict[str, float]  #: validate over JSON (NaN: skipped), over Parquet, again in the same JVM
    duck_s: tuple[float, float]  #: DuckDB JSON -> Parquet before Spark's ingest, and after
    duck_zstd_s: float
    duck_rows: int
    ingest_s: float
    ingest_cpu: tuple[float, float]  #: the JVM's CPU seconds during the ingest, and the rest of the host's
    latencies: list[float]
    memory_mb: dict[str, float]  #: generator, JVM, python, plain before, plain after
    differences: list[str]


def measure(args: argparse.Namespace, log: Path, work: Path, generator_mb: float) -> Run:
    """Every step in order, the peers around Spark's (the host's speed moves between them)."""
    (plain, read, plain_before_s, plain_before_mb), _ = timed("plain Python audit", lambda: plain_pass(log))
    # the session running already, if any (the test suite's): then it is left running
    spark, created = open_session(args.master, "bench-spark")
    try:
        return _spark_steps(spark, args, log, work, (plain, read, plain_before_s, plain_before_mb), generator_mb)
    finally:
        if created:
            spark.stop()


def _spark_steps(spark: SparkSession, args: argparse.Namespace, log: Path, work: Path,
                 before: tuple[plain_audit.Metrics, int, float, float], generator_mb: float) -> Run:
    plain, read, plain_before_s, plain_before_mb = before
    system = spark.sparkContext._jvm.java.lang.System  # type: ignore[union-attr]
    print(f"  driver JVM: Java {system.getProperty('java.version')} ({system.getProperty('java.vm.info')}), "
          f"{system.getProperty('java.home')}")
    json_run, json_s = None, float("nan")
    if not args.skip_json:
        json_run, json_s = timed("Spark validate over JSON", lambda: validate(
            spark, load_messages(spark, [str(log)]), str(work / "out-json"), "bench", "json", cache_input=True))
    duck_rows, duck_before_s = timed("DuckDB JSON -> Parquet", lambda: duckdb_pass(log, work / "duck.parquet"))
    summary, ingest_s, ingest_jvm_s, ingest_others_s = timed_jvm(
        spark, "Spark ingest JSON -> Parquet", lambda: ingest(spark, [str(log)], str(work / "tables")))
    _, duck_after_s = timed("DuckDB JSON -> Parquet, again", lambda: duckdb_pass(log, work / "duck.parquet"))
    _, duck_zstd_s = timed("DuckDB JSON -> Parquet (zstd)", lambda: duckdb_pass(log, work / "duck.parquet", "zstd"))
    parquet_run, parquet_s = timed("Spark validate over Parquet", lambda: validate(
        spark, load_messages(spark, [str(work / "tables")]), str(work / "tables"), "bench", "parquet"))
    # the same again in the same JVM: the steady state, without the first run's JIT warm-up
    again_run, again_s = timed("Spark validate over Parquet, again", lambda: validate(
        spark, load_messages(spark, [str(work / "tables")]), str(work / "tables"), "bench", "parquet-again"))
    # the peer once more, after Spark's validates: how much the host's speed moved meanwhile
    (plain_after, _, plain_after_s, plain_after_mb), _ = timed("plain Python audit, again", lambda: plain_pass(log))
    differences = compare(dict(plain), parquet_run) + compare(dict(plain), again_run)
    if plain_after != plain:
        differences.append("the two plain Python passes differ")
    if json_run is not None:
        differences += compare(dict(plain), json_run)
    print("  rule metrics: " + ("plain Python and Spark agree" if not differences else "DIFFER: " + "; ".join(differences)))
    latencies = [] if args.skip_stream else stream_latency(spark, work, args.probes)
    memory = {"generator": generator_mb, "jvm": jvm_peak_mb(spark), "python": peak_mb(),
              "plain before": plain_before_mb, "plain after": plain_after_mb}
    return Run(read, str(summary), (plain_before_s, plain_after_s),
               {"Spark over JSON": json_s, "Spark over Parquet": parquet_s, "  again (same JVM)": again_s},
               (duck_before_s, duck_after_s), duck_zstd_s, duck_rows, ingest_s, (ingest_jvm_s, ingest_others_s),
               latencies, memory, differences)


def print_summary(run: Run) -> None:
    """Lines per second of each step, and each Spark step as a ratio to its peer of the same run."""
    read, (plain_before_s, plain_after_s) = run.read, run.plain_s
    plain_s = statistics.mean(run.plain_s)
    print(f"\nlines: {read} ({run.summary})")
    print(f"{'plain Python':20} {read / plain_s:12,.0f} lines/s  ({plain_s:.1f} s: {plain_before_s:.1f} s before Spark, "
          f"{plain_after_s:.1f} s after its validates)")
    for label, seconds in run.spark_s.items():
        if seconds != seconds:  # NaN: step skipped
            continue
        print(f"{label:20} {read / seconds:12,.0f} lines/s  ({seconds:.1f} s, {plain_s / seconds:.2f}x plain Python; "
              f"{plain_before_s / seconds:.2f}x before, {plain_after_s / seconds:.2f}x after)")
    duck_s = statistics.mean(run.duck_s)
    print(f"{'DuckDB JSON->Parquet':20} {read / duck_s:12,.0f} lines/s  ({duck_s:.1f} s: {run.duck_s[0]:.1f} s before "
          f"Spark's ingest, {run.duck_s[1]:.1f} s after; {run.duck_rows} rows)")
    print(f"{'  zstd (as Spark)':20} {read / run.duck_zstd_s:12,.0f} lines/s  ({run.duck_zstd_s:.1f} s)")
    print(f"{'Spark ingest':20} {read / run.ingest_s:12,.0f} lines/s  ({run.ingest_s:.1f} s, "
          f"{run.ingest_s / duck_s:.2f}x DuckDB's time, {run.ingest_s / run.duck_zstd_s:.2f}x with zstd; goal: within 3x; "
          f"JVM CPU {run.ingest_cpu[0]:.1f} s, the rest of the host {run.ingest_cpu[1]:.1f} s meanwhile)")
    if run.latencies:
        print(f"stream latency line -> violation row: median {statistics.median(run.latencies):.2f} s, "
              f"max {max(run.latencies):.2f} s ({len(run.latencies)} probes)")
    mb = run.memory_mb
    generated = "" if math.isnan(mb["generator"]) else f" ({mb['generator']:.0f} MB while generating it)"
    print(f"driver memory: JVM peak RSS {mb['jvm']:.0f} MB, Python driver peak RSS {mb['python']:.0f} MB once the log "
          f"was there{generated}; the plain Python audit's process {mb['plain before']:.0f} / {mb['plain after']:.0f} MB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--work", default=None, help="working directory (default: a temporary one, removed)")
    parser.add_argument("--log", default=None, type=Path,
                        help="an existing log to audit instead of generating one (--lines is then ignored; "
                             "the file is only read)")
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--skip-stream", action="store_true", help="skip the streaming latency probes")
    parser.add_argument("--skip-json", action="store_true",
                        help="skip Spark validate over the JSON lines (rule metrics compared on the Parquet run)")
    args = parser.parse_args(argv)
    if args.log is not None and not args.log.is_file():
        parser.error(f"--log {args.log}: no such file")
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-spark-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"master {args.master}, load average {os.getloadavg()[0]:.1f}")
    if args.log:
        log = args.log
    else:
        log = work / "logs" / "node-20261118T000000000000-0001.jsonl"
        log.parent.mkdir(exist_ok=True)
        timed(f"generate {args.lines} lines ({log})", lambda: generate(log, args.lines))
    generator_mb = float("nan") if args.log else peak_mb()
    reset_peak()
    print(f"  log size: {log.stat().st_size / 1e6:.0f} MB")
    run = measure(args, log, work, generator_mb)
    print_summary(run)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if run.differences else 0


if __name__ == "__main__":
    sys.exit(main())
