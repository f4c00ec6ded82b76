"""Builds the audit JVM's archive for the selected Java (:func:`spark.session.select_runtime`): on JDK 25 its AOT cache
(:data:`spark.session.AOT_CACHE`), on the system's JDK 17 its class data archive (:data:`spark.session.CLASS_ARCHIVE`,
HotSpot AppCDS).

A training run in a JVM of its own: ingest, validate and report of a small generated log (every line kind: messages
with each fault, other events, corrupt lines). On JDK 17 with ``-XX:ArchiveClassesAtExit``: at its exit HotSpot
writes every class it loaded from the JDK and Spark's class path, parsed and verified, into one file that later
JVMs map instead of reading and verifying the classes again. On JDK 25 with ``-XX:AOTCacheOutput`` (JEP 483, 514,
515): at its exit HotSpot assembles (in a second JVM) an AOT cache of those classes loaded and linked, and of the
profiles of the methods the training ran, so that a later JVM's JIT compiles the hot ones at once. Neither holds the
generated classes of a query nor the jars Spark adds at run time (such as the line parser's). Both are tied to the
JDK, the class path and (the AOT cache) the HotSpot options: HotSpot checks at start and runs without them when they
differ. Run by scripts/build_class_archive.sh (scripts/setup.sh)::

    .venv/bin/python -m spark.class_archive [ARCHIVE] [--lines N]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from spark import loggen, report
from spark.ingest import ingest
from spark.runtime import AOT_CACHE, CLASS_ARCHIVE, JAVA_OPTIONS, Runtime, select_runtime
from spark.session import build_session
from spark.validate import load_messages, validate

#: Lines of the training log: enough for every frame of validate to run, small enough for setup (~1 min).
TRAINING_LINES = 20_000


def write_training_log(path: Path, lines: int = TRAINING_LINES) -> None:
    """A generated log with message records, other events and corrupt lines."""
    with path.open("w", encoding="utf-8") as out:
        for line in loggen.traffic(lines):
            out.write(line + "\n")
        out.write(loggen.lines([loggen.event_record("connect", "ixc-a", 1_795_000_000_000, identity="actor-1")]))
        out.write('{"schemaVersion":2,"timestamp":"2026-11-18T\nnot json\n{"a":1,"a":2}\n')


def is_aot(runtime: Runtime) -> bool:
    """Whether ``runtime`` takes an AOT cache (JDK 25: any Java but the system's)."""
    return runtime.java_home is not None


def training_options(runtime: Runtime, archive: Path) -> str:
    """The audit JVM's HotSpot options with those that write ``archive`` at exit (AOT cache or class archive)."""
    if is_aot(runtime):
        return f"{JAVA_OPTIONS} -XX:AOTCacheOutput={archive}"
    return f"{JAVA_OPTIONS} -XX:ArchiveClassesAtExit={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def train(archive: Path, work: Path, lines: int = TRAINING_LINES, runtime: Runtime | None = None) -> None:
    """Ingest, validate and report in a new JVM that writes ``archive`` when it exits; returns after it has."""
    log = work / "node.jsonl"
    write_training_log(log, lines)
    options = training_options(runtime or select_runtime(), archive)
    spark = build_session("local[2]", "audit-class-archive", {"spark.driver.extraJavaOptions": options})
    gateway = spark.sparkContext._gateway  # noqa: SLF001 (the JVM process: the archive is written at its exit)
    ingest(spark, [str(log)], str(work / "audit"))
    validate(spark, load_messages(spark, [str(work / "audit")]), str(work / "audit"), "training")
    report.build(spark, [str(work / "audit")])
    spark.stop()
    process = gateway.proc  # type: ignore[union-attr]
    gateway.shutdown()  # type: ignore[union-attr]
    process.stdin.close()  # PySpark's gateway JVM exits when its standard input closes
    if process.wait(timeout=600) != 0:
        archive.unlink(missing_ok=True)


#: A session with the archive and ``-Xshare:on`` (or the AOT cache and ``-XX:AOTMode=on``: HotSpot refuses to
#: start without mapping it) runs a job.
_CHECK = """
import sys
from spark.runtime import JAVA_OPTIONS, aot_options
from spark.session import build_session
if sys.argv[2] == "aot":
    options = f"{JAVA_OPTIONS} {aot_options(sys.argv[1])} -XX:AOTMode=on"
else:
    options = f"{JAVA_OPTIONS} -XX:SharedArchiveFile={sys.argv[1]} -Xshare:on -Xlog:cds=off -Xlog:cds+dynamic=off"
spark = build_session("local[1]", "audit-class-archive-check", {"spark.driver.extraJavaOptions": options})
sys.exit(0 if spark.range(3).count() == 3 else 1)
"""


def maps(archive: Path, runtime: Runtime | None = None) -> bool:
    """Whether a new audit JVM of ``runtime`` (the selected one by default) maps ``archive`` and runs a job (an
    incomplete archive crashes HotSpot at start: it is checked before it is put where every session maps it)."""
    kind = "aot" if is_aot(runtime or select_runtime()) else "cds"
    done = subprocess.run([sys.executable, "-c", _CHECK, str(archive), kind], capture_output=True, timeout=300,
                          check=False, cwd=archive.parent)  # a crash's hs_err file goes there
    return done.returncode == 0


def plan(runtime: Runtime | None = None) -> tuple[str, str, str]:
    """The archive ``runtime`` (the selected one by default) maps, the java that runs it and its HotSpot options."""
    runtime = runtime or select_runtime()
    java = os.path.join(runtime.java_home, "bin", "java") if runtime.java_home else _system_java()
    return (AOT_CACHE if is_aot(runtime) else CLASS_ARCHIVE), java, JAVA_OPTIONS


def _system_java() -> str:
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else (shutil.which("java") or "java")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("archive", nargs="?", default=None,
                        help=f"where it goes (default: {AOT_CACHE} on JDK 25, {CLASS_ARCHIVE} on the system's Java)")
    parser.add_argument("--lines", type=int, default=TRAINING_LINES, help="lines of the training log")
    args = parser.parse_args(argv)
    runtime = select_runtime()
    target = Path(args.archive or plan(runtime)[0])
    with tempfile.TemporaryDirectory(prefix="audit-class-archive-") as work:
        built = Path(work) / ("audit.aot" if is_aot(runtime) else "classes.jsa")
        train(built, Path(work), args.lines, runtime)
        if not built.is_file() or not maps(built):
            sys.stderr.write(f"class archive: the training JVM wrote no archive that a JVM maps ({built})\n")
            return 1
        staged = target.with_name(target.name + ".new")
        shutil.copyfile(built, staged)
        os.replace(staged, target)  # atomically: a JVM starting meanwhile maps the old file or the new one
    sys.stdout.write(f"class archive: {target} ({target.stat().st_size // 1_000_000} MB)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
