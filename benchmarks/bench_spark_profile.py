"""Where validate's time goes: each frame of rules alone over an ingest output's messages table.

Times (each with Spark's ``noop`` sink, so every column is computed and nothing is written): the
scan of the rule columns from Parquet, then each frame of :func:`spark.rules.frames` (the table
checks, the message records with every per-record rule, the records logged twice, the shard links
and sequences, a publication's sequence with repetition, CAM/CPM rates and duplicates, the SPATEMs,
the seconds) with all its checks, read from the Parquet as validate reads it (no cache); every
frame the first time in the JVM (its code generated, compiled and JIT-compiled) and then once more
(``--runs``); then the whole validate as many times (violations and metrics written). Each line has the JVM's CPU time
and the time HotSpot's JIT compilers spent (on 2 cores the JIT competes with the two task threads;
on a shared host CPU seconds move less than wall seconds). Run it on the Parquet that
bench_spark.py left with ``--work``:

    .venv/bin/python benchmarks/bench_spark_profile.py WORK/tables [--master local[*]]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from spark import rules
from spark.ingest import read_messages
from spark.session import open_session
from spark.tables import Layout
from spark.validate import validate


def timed_noop(label: str, frame: DataFrame) -> float:
    spark = frame.sparkSession
    (cpu, jit), start = jvm_seconds(spark), time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    seconds, (cpu_after, jit_after) = time.perf_counter() - start, jvm_seconds(spark)
    print(f"{label:40} {seconds:6.1f} s  (JVM CPU {cpu_after - cpu:5.1f} s, JIT {jit_after - jit:5.1f} s, "
          f"load average {os.getloadavg()[0]:.1f})", flush=True)
    return seconds


def jvm_seconds(spark: SparkSession) -> tuple[float, float]:
    """(CPU time of the driver JVM, total time of its JIT compilers) so far, in seconds (Linux)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a driver's context
    stat = Path(f"/proc/{jvm.java.lang.ProcessHandle.current().pid()}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return cpu, jvm.java.lang.management.ManagementFactory.getCompilationMXBean().getTotalCompilationTime() / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tables", help="an ingest output directory")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--runs", type=int, default=2, help="times each frame and the whole validate run (2: first, again)")
    args = parser.parse_args(argv)
    # the session running already, if any (the test suite's): then it is left running
    spark, created = open_session(args.master, "bench-spark-profile")
    messages = read_messages(spark, Layout(args.tables).messages).select(*rules.INPUT_COLUMNS)
    print(f"rows: {messages.count()}")
    names = ["first", "again", *[f"run {n}" for n in range(3, args.runs + 1)]][:args.runs]
    for run in names:
        timed_noop(f"{run}: scan of the rule columns", messages)
        total = sum(timed_noop(f"{run}: {frame.__name__} ({len(checks)} checks)",
                               rules.violations(frame(messages), checks))
                    for frame, checks in rules.frames(rules.ALL_RULES).items())
        print(f"{run + ': sum of the frames alone':40} {total:6.1f} s")
    for run in names:
        with tempfile.TemporaryDirectory(prefix="profile-") as out:
            (cpu, jit), start = jvm_seconds(spark), time.perf_counter()
            result = validate(spark, messages, out, "profile")
            seconds, (cpu_after, jit_after) = time.perf_counter() - start, jvm_seconds(spark)
            print(f"{'validate ' + run + ' (all rules, writes)':40} {seconds:6.1f} s  (JVM CPU {cpu_after - cpu:5.1f} s, "
                  f"JIT {jit_after - jit:5.1f} s, load average {os.getloadavg()[0]:.1f}; {result.violations} findings)")
    if created:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
