"""The audit session's defaults reach the JVM: the HotSpot options of :data:`spark.session.JAVA_OPTIONS` and the
class data archive (:mod:`spark.class_archive`)."""
from __future__ import annotations

import os
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark.class_archive import maps
from spark.session import CLASS_ARCHIVE, JAVA_OPTIONS, java_options


def test_driver_jvm_runs_the_parallel_collector(spark: SparkSession) -> None:
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory  # type: ignore[union-attr]
    collectors = {bean.getName() for bean in management.getGarbageCollectorMXBeans()}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}  # G1 would name "G1 Young Generation", ...


def test_driver_jvm_compiles_huge_methods(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    hotspot = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(  # type: ignore[union-attr]
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))  # type: ignore[union-attr]
    assert hotspot.getVMOption("DontCompileHugeMethods").getValue() == "false"


def test_java_options_map_the_class_archive_once_built(tmp_path: Path) -> None:
    archive = tmp_path / "audit-classes.jsa"
    assert java_options(str(archive)) == JAVA_OPTIONS  # not built (or removed): the JVM runs without
    archive.write_bytes(b"")
    assert java_options(str(archive)).split() == [*JAVA_OPTIONS.split(), f"-XX:SharedArchiveFile={archive}",
                                                  "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def test_session_jvm_gets_the_class_archive_when_built(spark: SparkSession) -> None:
    arguments = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory  # type: ignore[union-attr]
                     .getRuntimeMXBean().getInputArguments())
    assert (f"-XX:SharedArchiveFile={CLASS_ARCHIVE}" in arguments) == os.path.isfile(CLASS_ARCHIVE)


def test_class_archive_is_built_by_the_set_up_training_run_and_checked(tmp_path: Path) -> None:
    """scripts/setup.sh builds the archive by a training run (spark.class_archive) and stamps it; the build is
    optional there (the jobs run without it), so this is where a broken training run fails."""
    archive = Path(CLASS_ARCHIVE)
    assert archive.is_file(), "no class data archive: scripts/setup.sh's training run failed (see its output)"
    assert list(archive.parent.glob(".archive-*")), "the archive was not stamped by a complete training run"
    assert archive.stat().st_size > 50_000_000  # the JDK's, Spark's, Parquet's, Janino's classes: ~190 MB
    assert maps(archive)  # HotSpot maps it (-Xshare:on) in an audit JVM and a job runs
    # an incomplete archive (a training JVM killed while writing it) crashes HotSpot at start: never installed
    truncated = tmp_path / "truncated.jsa"
    with archive.open("rb") as whole:
        truncated.write_bytes(whole.read(1_000_000))
    assert not maps(truncated)


def test_a_whole_stage_is_compiled_once_in_local_mode(spark: SparkSession) -> None:
    """The driver compiles a whole stage's class (to check it) where the local tasks look for it: the tasks
    find it compiled (before, each stage was compiled twice: the driver's and the tasks' class loaders)."""
    compiles = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()  # type: ignore[union-attr]
    unique = time.time_ns()  # a long literal is written into the generated Java: code no earlier query compiled
    generated = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}  # the defaults
    saved = {key: str(spark.conf.get(key)) for key in generated}
    try:
        for key, value in generated.items():
            spark.conf.set(key, value)
        before = compiles.getCount()
        rows = spark.range(0, 10, 1, 2).select((F.col("id") + F.lit(unique)).alias("x")).collect()
        compiled = compiles.getCount() - before
    finally:
        for key, value in saved.items():
            spark.conf.set(key, value)
    assert sorted(row.x for row in rows) == [unique + i for i in range(10)]
    assert compiled == 1  # one class: the stage's, compiled by the driver, run by both tasks
