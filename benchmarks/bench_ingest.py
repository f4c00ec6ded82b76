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

``--variant 'TREE|JAVA OPTIONS|KEY=VALUE ...'`` runs a tree with extra HotSpot options and Spark settings (a
same-run pair of settings). Each ingest's JVM CPU seconds (all its threads: tasks, JIT, collector) and the
Parquet bytes written are printed too, and where that CPU went (:func:`cpu_split`: the tasks, HotSpot's C2 and
C1 compilers, the collector, the rest; and the seconds Janino compiled Spark's generated classes): a first
ingest's extra cost is mostly the compilers'.

    .venv/bin/python benchmarks/bench_ingest.py LOG [--tree DIR ...] [--variant 'DIR|-XX:...|k=v' ...] [--runs 3]
        [--master local[*]] [--jfr FILE]
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
from dataclasses import dataclass
from pathlib import Path

from bench_spark import duckdb_pass

#: Run in the tree's process: ingest timed, then the JVM's peak RSS; one JSON line on stdout.
_CHILD = """
import json, os, sys, tempfile, time
from pathlib import Path
from spark.ingest import ingest
from spark.session import build_session
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
def threads():  # CPU seconds per JVM thread name (its 15 first characters, as Linux keeps them)
    seconds = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        seconds[name] = seconds.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return seconds
jvm = spark.sparkContext._jvm
codegen = jvm.org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator  # Janino's compile time (ns)
runs, cpus, splits = [], [], []
for _ in range(int(sys.argv[4])):
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as out:
        start, used, before, janino = time.perf_counter(), cpu(), threads(), codegen.compileTime()
        summary = ingest(spark, [sys.argv[1]], out)
        runs.append(time.perf_counter() - start)
        cpus.append(cpu() - used)
        after = threads()
        split = {name: after[name] - before.get(name, 0.0) for name in after}
        split["janino"] = (codegen.compileTime() - janino) / 1e9
        splits.append(split)
        size = sum(f.stat().st_size for f in Path(out).rglob("*.parquet"))
status = Path(f"/proc/{pid}/status").read_text().splitlines()
peak = next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))
spark.stop()
print(json.dumps({"session": session, "runs": runs, "cpu": cpus, "summary": str(summary), "jvm_mb": peak,
                  "parquet_mb": size / 1e6, "threads": splits}))
"""

#: DuckDB's first pass in a new process, timed from before ``import duckdb``; its seconds on stdout.
_DUCK_COLD = """
import sys, time
from pathlib import Path
start = time.perf_counter()
from bench_spark import duckdb_pass
duckdb_pass(Path(sys.argv[1]), Path(sys.argv[2]))
print(time.perf_counter() - start)
"""


#: JVM thread names (as Linux keeps them: the first 15 characters) -> the part of an ingest's CPU they spend.
THREAD_GROUPS = (("Executor task", "tasks"), ("C2 CompilerThre", "C2"), ("C1 CompilerThre", "C1"), ("GC Thread", "GC"))


def cpu_split(threads: dict[str, float]) -> dict[str, float]:
    """An ingest's CPU seconds per JVM thread name -> per part: the tasks, HotSpot's two compilers (JIT), the
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


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def run_tree(tree: Path, log: str, master: str, java_options: str, runs: int,
             conf: dict[str, str] | None = None) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _CHILD, log, master, java_options, str(runs), json.dumps(conf or {})],
                          env=env, cwd=tree,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ingest in {tree} failed:\n{done.stderr[-3000:]}")
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
    """A tree to run, with extra HotSpot options and Spark settings for its JVM (``--variant``)."""

    tree: Path
    java_options: str = ""
    conf: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        extra = " ".join(filter(None, (self.java_options, *(f"{k}={v}" for k, v in self.conf))))
        return f"{self.tree}" + (f" [{extra}]" if extra else "")


def tree_variant(text: str) -> Variant:
    return Variant(Path(text).resolve())


def parse_variant(text: str) -> Variant:
    """``TREE|JAVA OPTIONS|KEY=VALUE KEY=VALUE`` (the last two may be empty or left out)."""
    tree, java, conf = (text.split("|") + ["", ""])[:3]
    pairs = tuple(tuple(item.split("=", 1)) for item in conf.split())
    return Variant(Path(tree).resolve(), java.strip(), pairs)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log")
    parser.add_argument("--tree", dest="variants", action="append", type=tree_variant, default=None,
                        help="a source tree (default: this one)")
    parser.add_argument("--variant", dest="variants", action="append", type=parse_variant,
                        help="'TREE|JAVA OPTIONS|KEY=VALUE ...': a tree with extra HotSpot options and Spark settings")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--jfr", default=None, help="record a JFR profile of each tree's JVM into FILE.<n>.jfr")
    parser.add_argument("--runs", type=int, default=3, help="ingests per JVM: the first cold, the others warm")
    args = parser.parse_args(argv)
    variants: list[Variant] = args.variants or [Variant(Path(__file__).resolve().parent.parent)]
    log = Path(args.log)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-duck-") as duck:
        target = Path(duck) / "duck.parquet"
        read_once(log)
        print(f"log {log}: {log.stat().st_size / 1e6:.0f} MB; load {load()}", flush=True)
        cold = duckdb_cold(log, target)
        start = time.perf_counter()
        rows = duckdb_pass(log, target)
        before = time.perf_counter() - start
        print(f"DuckDB JSON -> Parquet: cold {cold:.1f} s (new process), warm {before:.1f} s ({rows} rows); "
              f"load {load()}", flush=True)
        results = []
        for n, variant in enumerate(variants):
            options = variant.java_options
            if args.jfr:
                options += f" -XX:StartFlightRecording=filename={args.jfr}.{n}.jfr,settings=profile"
            result = run_tree(variant.tree, args.log, args.master, options.strip(), args.runs, dict(variant.conf))
            results.append(result)
            runs = " / ".join(f"{s:.1f}" for s in result["runs"])  # type: ignore[attr-defined]
            cpus = " / ".join(f"{s:.1f}" for s in result.get("cpu", []))  # type: ignore[attr-defined]
            print(f"ingest {variant.label}: {runs} s, JVM CPU {cpus} s (session start {result['session']:.1f} s, "
                  f"not counted), JVM peak {result['jvm_mb']:.0f} MB, Parquet {result.get('parquet_mb', 0):.0f} MB "
                  f"({result['summary']}); load {load()}", flush=True)
            splits: list[dict[str, float]] = result.get("threads", [])  # type: ignore[assignment]
            for n_run, threads in enumerate(splits):
                print(f"  ingest {n_run + 1} ({'cold' if n_run == 0 else 'warm'}): {describe_split(cpu_split(threads))}",
                      flush=True)
        start = time.perf_counter()
        duckdb_pass(log, target)
        after = time.perf_counter() - start
        start = time.perf_counter()
        duckdb_pass(log, target, "zstd")
        zstd = time.perf_counter() - start
    duck_s = statistics.mean((before, after))
    print(f"DuckDB again: warm {after:.1f} s; zstd {zstd:.1f} s; load {load()}")
    for variant, result in zip(variants, results):
        seconds: list[float] = result["runs"]  # type: ignore[assignment]
        line = f"{variant.label:40} cold {seconds[0]:6.1f} s = {seconds[0] / cold:.1f}x DuckDB cold ({cold:.1f} s)"
        if len(seconds) > 1:
            warm = min(seconds[1:])
            line += (f"; warm {warm:6.1f} s = {warm / duck_s:.1f}x DuckDB warm ({duck_s:.1f} s), "
                     f"{warm / zstd:.1f}x with zstd")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
