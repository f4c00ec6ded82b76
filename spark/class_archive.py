"""Builds the audit JVM's class data archive (:data:`spark.session.CLASS_ARCHIVE`, HotSpot AppCDS).

A training run in a JVM of its own: ingest and validate of a small generated log (every line kind: messages
with each fault, other events, corrupt lines), with ``-XX:ArchiveClassesAtExit``: at its exit HotSpot writes
every class it loaded from the JDK and Spark's class path, parsed and verified, into one file that later
JVMs map instead of reading and verifying the classes again (the generated classes of a query and the jars
Spark adds at run time, such as the line parser's, are not archived). The archive is tied to this JDK and
class path: HotSpot checks both at start and runs without it when they differ. Run by
scripts/build_class_archive.sh (scripts/setup.sh)::

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

from spark import loggen
from spark.ingest import ingest
from spark.session import CLASS_ARCHIVE, JAVA_OPTIONS, build_session
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


def train(archive: Path, work: Path, lines: int = TRAINING_LINES) -> None:
    """Ingest and validate in a new JVM that writes ``archive`` when it exits; returns after it has."""
    log = work / "node.jsonl"
    write_training_log(log, lines)
    options = f"{JAVA_OPTIONS} -XX:ArchiveClassesAtExit={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
    spark = build_session("local[2]", "audit-class-archive", {"spark.driver.extraJavaOptions": options})
    gateway = spark.sparkContext._gateway  # noqa: SLF001 (the JVM process: the archive is written at its exit)
    ingest(spark, [str(log)], str(work / "audit"))
    validate(spark, load_messages(spark, [str(work / "audit")]), str(work / "audit"), "training")
    spark.stop()
    process = gateway.proc  # type: ignore[union-attr]
    gateway.shutdown()  # type: ignore[union-attr]
    process.stdin.close()  # PySpark's gateway JVM exits when its standard input closes
    if process.wait(timeout=300) != 0:
        archive.unlink(missing_ok=True)


#: A session with the archive and ``-Xshare:on`` (HotSpot refuses to start without mapping it) runs a job.
_CHECK = """
import sys
from spark.session import JAVA_OPTIONS, build_session
options = f"{JAVA_OPTIONS} -XX:SharedArchiveFile={sys.argv[1]} -Xshare:on -Xlog:cds=off -Xlog:cds+dynamic=off"
spark = build_session("local[1]", "audit-class-archive-check", {"spark.driver.extraJavaOptions": options})
sys.exit(0 if spark.range(3).count() == 3 else 1)
"""


def maps(archive: Path) -> bool:
    """Whether a new audit JVM maps ``archive`` and runs a job (an incomplete archive crashes HotSpot at start:
    it is checked before it is put where every session maps it)."""
    done = subprocess.run([sys.executable, "-c", _CHECK, str(archive)], capture_output=True, timeout=300, check=False,
                          cwd=archive.parent)  # a crash's hs_err file goes there
    return done.returncode == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("archive", nargs="?", default=CLASS_ARCHIVE)
    parser.add_argument("--lines", type=int, default=TRAINING_LINES, help="lines of the training log")
    args = parser.parse_args(argv)
    target = Path(args.archive)
    with tempfile.TemporaryDirectory(prefix="audit-class-archive-") as work:
        built = Path(work) / "classes.jsa"
        train(built, Path(work), args.lines)
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
