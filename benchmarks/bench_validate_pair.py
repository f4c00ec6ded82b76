"""Benchmark: a first and a later validate of source trees (and JDKs) over the same ingest output, same run.

Each (``--tree``, ``--java-home``) pair runs in a Python process and driver JVM of its own (the tree's code
from ``PYTHONPATH``, its own jar and class data archive, that JDK), which calls ``spark.validate.validate``
``--runs`` times over ``TABLES`` (an ingest output, e.g. the ``tables`` that ``bench_spark.py --work DIR``
leaves), each run into a fresh output directory. Per validate: wall seconds, the JVM's CPU seconds (from
``/proc``) and per thread kind (HotSpot's compiler threads "jit", Spark's task threads "tasks", the
collector "gc"), the findings; per JVM its peak resident size. Comparing CPU seconds of trees run one after
the other survives a shared host's load better than wall seconds; alternate the order between runs.

    .venv/bin/python benchmarks/bench_validate_pair.py TABLES --tree DIR [--tree DIR ...] \
        [--java-home JDK ...] [--java-options="-XX:..."] [--conf KEY=VALUE ...] [--runs 2] [--master local[*]]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: Run in the tree's process: validate() --runs times, one JSON line on stdout.
_CHILD = r"""
import json, os, shutil, sys, tempfile, time
from pathlib import Path
from spark import validate as v
from spark.session import build_session
from spark.session import JAVA_OPTIONS, java_options
tables, master, extra, runs, archive = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
conf = json.loads(sys.argv[6])
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
    result = v.validate(spark, v.load_messages(spark, [tables]), f"{work}/{i}", "bench")
    after = threads()
    out[f"run{i + 1}"] = dict(wall=round(time.perf_counter() - start, 2),
                              cpu=round(seconds(Path(f"/proc/{pid}/stat").read_text()) - cpu, 2),
                              **{k: round(after[k] - before[k], 1) for k in after},
                              findings=result.violations, load=round(os.getloadavg()[0], 1))
status = Path(f"/proc/{pid}/status").read_text().splitlines()
out["jvm_peak_mb"] = next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM:"))
spark.stop()
shutil.rmtree(work)
print(json.dumps(out))
"""


def run_tree(tree: Path, java_home: str | None, args: argparse.Namespace) -> dict[str, object] | None:
    """The child's figures for ``tree`` under ``java_home`` (None: this environment's JDK), or None if it failed."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if java_home:
        env["JAVA_HOME"] = java_home
    python = tree / ".venv" / "bin" / "python"
    done = subprocess.run([str(python) if python.exists() else sys.executable, "-c", _CHILD, args.tables,
                           args.master, args.java_options, str(args.runs),
                           "0" if args.no_class_archive else "1", json.dumps(dict(c.split("=", 1) for c in args.conf))],
                          env=env, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        print(f"  {tree} failed ({done.returncode}):\n{done.stderr[-3000:]}", flush=True)
        return None
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def print_figures(label: str, figures: dict[str, object], runs: int) -> None:
    print(f"{label} (Java {figures['java']}, JVM peak {figures['jvm_peak_mb']} MB)")
    for i in range(runs):
        r = figures[f"run{i + 1}"]
        assert isinstance(r, dict)
        print(f"  validate {i + 1}: {r['wall']:6.1f} s, JVM CPU {r['cpu']:6.1f} s (jit {r['jit']:5.1f}, "
              f"tasks {r['tasks']:5.1f}, gc {r['gc']:4.1f}), {r['findings']} findings, load average {r['load']}",
              flush=True)


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
    args = parser.parse_args(argv)
    trees = args.tree or [Path(__file__).resolve().parents[1]]
    failed = 0
    for tree in trees:
        for java_home in args.java_home or [None]:
            print(f"{tree} {java_home or ''}: start {time.strftime('%H:%M:%S')}, load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            figures = run_tree(tree.resolve(), java_home, args)
            if figures is None:
                failed += 1
                continue
            print_figures(f"validate {tree} {java_home or ''}".rstrip(), figures, args.runs)
    print(f"end {time.strftime('%H:%M:%S')}, load average {os.getloadavg()[0]:.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
