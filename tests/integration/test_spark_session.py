"""The audit session's defaults reach the JVM: the HotSpot options of :data:`spark.session.JAVA_OPTIONS`."""
from __future__ import annotations

from pyspark.sql import SparkSession


def test_driver_jvm_runs_the_parallel_collector(spark: SparkSession) -> None:
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory  # type: ignore[union-attr]
    collectors = {bean.getName() for bean in management.getGarbageCollectorMXBeans()}
    assert collectors == {"PS Scavenge", "PS MarkSweep"}  # G1 would name "G1 Young Generation", ...


def test_driver_jvm_compiles_huge_methods(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    hotspot = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(  # type: ignore[union-attr]
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))  # type: ignore[union-attr]
    assert hotspot.getVMOption("DontCompileHugeMethods").getValue() == "false"
