"""Benchmark: Spark ingest (JSON lines -> the three Parquet tables) of one or more source trees against DuckDB.

On an existing log (e.g. the one ``bench_spark.py --work DIR`` leaves in ``DIR/logs``): DuckDB reads the lines
into Parquet (``bench_spark.duckdb_pass``, snappy), then ``spark.ingest.ingest`` of each ``--tree`` runs in a
Python process and JVM of its own (``local[*]``, a new session, cold JIT, as in bench_spark.py; the session's
start is not timed), then DuckDB again, and once with zstd (the codec of Spark's tables). Each tree's code is
imported from that tree (``PYTHONPATH``) with this interpreter; ``--tree`` may repeat (before / after in one
run, alternate their order between runs). Prints the seconds, the ratio to DuckDB's mean, the driver JVM's
peak resident size and the load average before and after each step.

    .venv/bin/python benchmarks/bench_ingest.py LOG [--tree DIR ...] [--master local[*]] [--jfr FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_spark import duckdb_pass

#: Run in the tree's process: ingest timed, then the JVM's peak RSS; one JSON line on stdout.
_CHILD = """
import json, sys, tempfile, time
from pathlib import Path
from spark.ingest import ingest
from spark.session import build_session
conf = {"spark.driver.extraJavaOptions": sys.argv[3]} if sys.argv[3] else {}
spark = build_session(sys.argv[2], "bench-ingest", conf)
with tempfile.TemporaryDirectory(prefix="bench-ingest-") as out:
    start = time.perf_counter()
    summary = ingest(spark, [sys.argv[1]], out)
    seconds = time.perf_counter() - start
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
status = Path(f"/proc/{pid}/status").read_text().splitlines()
peak = next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))
spark.stop()
print(json.dumps({"seconds": seconds, "summary": str(summary), "jvm_mb": peak}))
"""


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def run_tree(tree: Path, log: str, master: str, java_options: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _CHILD, log, master, java_options], env=env, cwd=tree,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ingest in {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log")
    parser.add_argument("--tree", action="append", default=None, help="a source tree (default: this one)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--jfr", default=None, help="record a JFR profile of each ingest into FILE.<n>.jfr")
    args = parser.parse_args(argv)
    trees = [Path(t).resolve() for t in (args.tree or [Path(__file__).resolve().parent.parent])]
    with tempfile.TemporaryDirectory(prefix="bench-ingest-duck-") as duck:
        target = Path(duck) / "duck.parquet"
        print(f"log {args.log}: {Path(args.log).stat().st_size / 1e6:.0f} MB; load {load()}", flush=True)
        start = time.perf_counter()
        rows = duckdb_pass(Path(args.log), target)
        before = time.perf_counter() - start
        print(f"DuckDB JSON -> Parquet: {before:.1f} s ({rows} rows); load {load()}", flush=True)
        results = []
        for n, tree in enumerate(trees):
            options = ""
            if args.jfr:
                options = (f"-XX:-DontCompileHugeMethods -XX:+UseParallelGC "
                           f"-XX:StartFlightRecording=filename={args.jfr}.{n}.jfr,settings=profile")
            result = run_tree(tree, args.log, args.master, options)
            results.append(result)
            print(f"ingest {tree}: {result['seconds']:.1f} s, JVM peak {result['jvm_mb']:.0f} MB ({result['summary']}); "
                  f"load {load()}", flush=True)
        start = time.perf_counter()
        duckdb_pass(Path(args.log), target)
        after = time.perf_counter() - start
        start = time.perf_counter()
        duckdb_pass(Path(args.log), target, "zstd")
        zstd = time.perf_counter() - start
    duck_s = statistics.mean((before, after))
    print(f"DuckDB again: {after:.1f} s; zstd {zstd:.1f} s; load {load()}")
    for tree, result in zip(trees, results):
        seconds = float(result["seconds"])  # type: ignore[arg-type]
        print(f"{str(tree):40} {seconds:7.1f} s = {seconds / duck_s:.1f}x DuckDB ({duck_s:.1f} s), "
              f"{seconds / zstd:.1f}x with zstd")
    return 0


if __name__ == "__main__":
    sys.exit(main())
