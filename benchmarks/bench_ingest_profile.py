"""Where ingest's time goes: each step of :func:`spark.ingest.ingest` alone over a JSON-lines log.

Each step is timed with Spark's ``noop`` sink (every column computed, nothing written), each one a
longer prefix of ingest's plan: the lines read; the Java line parser alone (one strict pass per
line: fields, maps, the JSON's reason); the whole parse with a reason per corrupt line; the message
rows with the columns of tables 1-7; then ingest itself (three tables written). Run on a log bench_spark.py left
with ``--work`` (or any), after one warm-up pass, same JVM:

    .venv/bin/python benchmarks/bench_ingest_profile.py WORK/logs/node-...jsonl [--master local[*]]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark import parse
from spark.ingest import ingest, read_lines
from spark.session import open_session


def timed(label: str, action) -> float:
    start = time.perf_counter()
    action()
    seconds = time.perf_counter() - start
    print(f"{label:44} {seconds:8.1f} s  (load average {os.getloadavg()[0]:.1f})", flush=True)
    return seconds


def noop(frame: DataFrame) -> None:
    frame.write.format("noop").mode("overwrite").save()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log")
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args(argv)
    # the session running already, if any (the test suite's): then it is left running
    spark, created = open_session(args.master, "bench-ingest-profile")
    lines = read_lines(spark, [args.log])
    parse.register_parser(spark)
    read = lines.select(F.call_function(parse.PARSE_FUNCTION, F.col("value")).alias("v"))
    steps = [("lines read (spark.read.text)", lambda: noop(lines)),
             ("+ the Java line parser", lambda: noop(read)),
             ("parse: every column and the reason", lambda: noop(parse.parse(lines))),
             ("message rows (tables 1-7 columns)", lambda: noop(parse.messages(parse.parse(lines))))]
    timed("warm-up: parse", lambda: noop(parse.parse(lines)))
    for label, action in steps:
        timed(label, action)
    with tempfile.TemporaryDirectory(prefix="ingest-profile-") as out:
        timed("ingest (three tables written)", lambda: ingest(spark, [args.log], out))
    if created:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
