"""Where validate's time goes: each rule alone over an ingest output's messages table.

Times (each with Spark's ``noop`` sink, so every column is computed and nothing is written):
the scan of the rule columns from Parquet, the cache validate builds of them, then each rule of
:data:`spark.rules.ALL_RULES` alone over that cache. Run it on the Parquet that bench_spark.py
left with ``--work``:

    .venv/bin/python benchmarks/bench_spark_profile.py WORK/tables [--master local[*]]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402

from spark import rules, tables  # noqa: E402
from spark.ingest import read_table  # noqa: E402
from spark.session import build_session  # noqa: E402
from spark.tables import Layout  # noqa: E402


def timed_noop(label: str, frame: DataFrame) -> float:
    start = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - start
    print(f"{label:28} {seconds:8.1f} s  (load average {os.getloadavg()[0]:.1f})", flush=True)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tables", help="an ingest output directory")
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    spark = build_session(args.master, "bench-spark-profile")
    messages = read_table(spark, Layout(args.tables).messages, tables.MESSAGES).select(*rules.INPUT_COLUMNS)
    print(f"rows: {messages.count()}")
    timed_noop("scan of the rule columns", messages)
    cached = messages.persist(StorageLevel.MEMORY_AND_DISK)
    start = time.perf_counter()
    cached.count()
    print(f"{'cache built (count)':28} {time.perf_counter() - start:8.1f} s", flush=True)
    total = sum(timed_noop(f"rule {rule.__name__}", rules.all_candidates(cached, [rule])) for rule in rules.ALL_RULES)
    print(f"{'sum of the rules alone':28} {total:8.1f} s")
    timed_noop("all rules in one union", rules.all_candidates(cached))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
