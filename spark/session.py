"""The SparkSession the audit jobs run in: ``local[*]`` by default, any master unchanged.

``--master`` picks the cluster (``spark://host:7077``, ``local[2]``, ...). Under ``spark-submit``
the master and resources come from spark-submit and are left alone. The defaults suit the
embedded case, a 2-core / 24 GB machine in local mode: few shuffle partitions (the default 200
would make 200 tiny tasks per shuffle), adaptive query execution to coalesce them further, UTC
for every date, Parquet with zstd, no web UI unless asked for, and HotSpot options for batch work
(:data:`JAVA_OPTIONS`), on the Java :func:`spark.runtime.select_runtime` picks (JDK 25 with its AOT cache when set up,
else the system's JDK 17 with its class data archive when built). In local
mode the thread that builds the session compiles Spark's generated classes into the tasks' class loader
(:func:`share_compiled_classes`): each is compiled once, not once on the driver and again in a task.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pyspark.sql import SparkSession

from spark.runtime import AOT_CACHE as AOT_CACHE
from spark.runtime import CLASS_ARCHIVE as CLASS_ARCHIVE
from spark.runtime import JAVA_OPTIONS as JAVA_OPTIONS
from spark.runtime import java_home, select_runtime

#: The ingest's line parser (spark/jvm, built by scripts/setup.sh): on the class path of every session.
PARSER_JAR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jvm", "target", "croads-ingest.jar")

DEFAULT_MASTER = "local[*]"

def java_options(archive: str = CLASS_ARCHIVE) -> str:
    """:data:`JAVA_OPTIONS`, with the archive options of the selected :class:`~spark.runtime.Runtime`
    (:func:`~spark.runtime.select_runtime`; on the system's Java the class data archive ``archive`` when built)."""
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
    local = (master or DEFAULT_MASTER).startswith("local") and not under_spark_submit()
    runtime = select_runtime(local=local)
    settings = {**DEFAULT_CONF, "spark.driver.extraJavaOptions": runtime.options(), **(conf or {})}
    settings["spark.jars"] = ",".join(filter(None, (settings.get("spark.jars"), PARSER_JAR)))
    if local:
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
