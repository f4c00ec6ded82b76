"""The SparkSession the audit jobs run in: ``local[*]`` by default, any master unchanged.

``--master`` picks the cluster (``spark://host:7077``, ``local[2]``, ...). Under ``spark-submit``
the master and resources come from spark-submit and are left alone. The defaults suit the
embedded case, a 2-core / 24 GB machine in local mode: few shuffle partitions (the default 200
would make 200 tiny tasks per shuffle), adaptive query execution to coalesce them further, UTC
for every date, Parquet with zstd, and no web UI unless asked for.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"

#: HotSpot compiler directives for the driver JVM: Spark's generated classes are compiled by C1
#: only. Measured at 2M lines on 2 cores (docs/performance.md): a first validate after ingest
#: 25.5-26.9 s against 28.1-34.1 s, a validate in a fresh JVM 33.1/34.5 s against 34.8/36.0 s; the
#: cost, C1's slower code: a second validate in the same JVM ~1 s slower, ingest ~5 % slower.
JIT_DIRECTIVES = Path(__file__).with_name("jit-directives.json")


def _driver_jit() -> str:
    # the VM announces the directives on its stdout, which is the audit command's: to stderr
    return f'-XX:+DisplayVMOutputToStderr -XX:+UnlockDiagnosticVMOptions "-XX:CompilerDirectivesFile={JIT_DIRECTIVES}"'


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
    # Let HotSpot compile generated methods over 8,000 bytes of bytecode (a stage of many column
    # expressions has some): by default it runs them interpreted, several times slower. In the
    # driver JVM (local mode runs the tasks there) Spark's generated classes stop at C1: C2 spent
    # ~17 s of CPU on 2 cores optimizing them during a first validate (see JIT_DIRECTIVES).
    "spark.driver.extraJavaOptions": f"-XX:-DontCompileHugeMethods {_driver_jit()}",
    "spark.executor.extraJavaOptions": "-XX:-DontCompileHugeMethods",
    "spark.sql.streaming.schemaInference": "false",
    # No Python call site recorded for every column function (an error's DataFrame context): 5 calls
    # into the JVM per function, half of the ~12,000 that building the rules makes (~0.5 s a validate).
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Spark's cache of compiled classes (per class loader: the driver's and the tasks' count apart)
    # keeps 100 by default; one validate compiles ~90, so a second one found them pushed out.
    "spark.sql.codegen.cache.maxEntries": "1000",
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
    settings = {**DEFAULT_CONF, **(conf or {})}
    if (master or DEFAULT_MASTER).startswith("local") and not under_spark_submit():
        settings = {**LOCAL_CONF, **settings}
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def open_session(master: str | None, app_name: str, conf: Mapping[str, str] | None = None) -> tuple[SparkSession, bool]:
    """:func:`build_session`, and whether it started a new one (the caller then stops it)."""
    created = SparkSession.getActiveSession() is None
    return build_session(master, app_name, conf), created
