"""``audit validate``: every rule of :mod:`spark.rules` over a log; violations and rule metrics appended.

Input: an ingest output directory (its messages table, the fast path) or JSON-lines logs (parsed on
the fly, as ingest would). Each run appends one row per violation to ``violations`` and one row per
(rule, check) to ``rule_metrics`` with the same ``runId``/``runMs``, so both keep a history across
runs. For the table checks (:mod:`spark.property_rules`) "checked" is the number of received
messages whose properties were logged, for every requirement those checks name.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from spark import parse, rules, tables
from spark.audit_metrics import write_metrics
from spark.ingest import read_messages, read_records, read_table
from spark.session import settings
from spark.tables import Layout

#: Adaptive execution replaces a stage that produced no rows (say, a frame without findings) and what
#: depends on it by an empty relation, the frames' row counts (observations) with it: theirs then never
#: come (``Observation.get`` fails). A validate counts every frame's checked rows, so its job runs
#: without that one rule; its cost is the few empty tasks it would have skipped.
KEEP_OBSERVATIONS = "org.apache.spark.sql.execution.adaptive.AQEPropagateEmptyRelation"


def is_table(inputs: Sequence[str]) -> bool:
    """True when ``inputs`` is one ingest output (its messages table is read, not JSON lines)."""
    return len(inputs) == 1 and Layout(inputs[0]).is_ingested()


def load_messages(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """The messages table of an ingest output, or the message records of JSON-lines logs."""
    if is_table(inputs):
        return read_messages(spark, Layout(inputs[0]).messages)
    return parse.messages(read_records(spark, inputs))


@dataclass(frozen=True)
class RuleMetric:
    rule: str
    check: str
    requirement: str
    severity: str
    checked: int
    violations: int


@dataclass(frozen=True)
class ValidationRun:
    run_id: str
    run_ms: int
    metrics: list[RuleMetric]

    @property
    def violations(self) -> int:
        return sum(metric.violations for metric in self.metrics)

    def table(self) -> str:
        lines = [f"{'rule':8} {'check':24} {'severity':8} {'checked':>10} {'violations':>10}"]
        lines += [f"{m.rule:8} {m.check:24} {m.severity:8} {m.checked:>10} {m.violations:>10}" for m in self.metrics]
        return "\n".join(lines)


def _checks_run(checks_by_frame: dict[rules.Frame, list[rules.Check]]) -> list[tuple[str, str, str]]:
    """(rule, check, severity) of every metric the checks produce, found or not."""
    return [(rule, check.check, rules.CHECKS.get(check.check, (rule, "error"))[1])
            for checks in checks_by_frame.values() for check in checks for rule in check.metric_rules]


def _metrics(checked: dict[str, int], found: dict[str, int], runs: Sequence[tuple[str, str, str]]) -> list[RuleMetric]:
    metrics = [RuleMetric(rule, check, rules.REQUIREMENTS[rule], severity, checked[check], found.get(f"{rule}/{check}", 0))
               for rule, check, severity in runs]
    return sorted(metrics, key=lambda m: (m.rule, m.check))


def _found(spark: SparkSession, layout: Layout, run_id: str, run_ms: int) -> dict[str, int]:
    """Findings per "rule/check" of the run, counted in the violations written (by ``runMs`` too: a
    run id given again, ``--run-id``, names an earlier run's rows as well)."""
    written = read_table(spark, layout.violations, tables.VIOLATIONS).where(F.col("runId") == run_id)
    # runMs compared here, not in the query: a long literal is written into the generated Java (a
    # new class in every run), a string one is not
    counted = written.groupBy("rule", "check", "runMs").count().collect()
    return {f"{row['rule']}/{row['check']}": row["count"] for row in counted if row["runMs"] == run_ms}


def _unchanging_code(run_ms: int) -> Column:
    """``run_ms`` as a column whose value is not written into the generated Java.

    A long literal is (a string one is not): the largest stage, which writes the findings, would
    be new code in every run, compiled by Janino and JIT-compiled by HotSpot again (~4 s of CPU per
    validate at 2M lines; the new classes also pushed others out of Spark's cache of 100). The
    projection holding it leaves whole-stage code generation, so the findings' union is no longer
    fused into the writing stage (measured neutral, docs/performance.md).
    """
    return F.expr(rules.interpreted(f"{int(run_ms)}L"))


def local_rows(spark: SparkSession, rows: Sequence[tuple[object, ...]], schema: StructType) -> DataFrame:
    """``rows`` as a DataFrame of ``schema`` built in the JVM: one JSON text literal, parsed there.

    ``spark.createDataFrame`` of a Python list has a Python worker unpickle it when it runs:
    starting that process cost a first validate after ingest ~1 s for its ~40 rule metrics
    (~0.5 s of the 4.1 s these took in a new JVM).
    """
    text = json.dumps([dict(zip(schema.fieldNames(), row)) for row in rows])
    return spark.range(1).select(F.inline(F.from_json(F.lit(text), ArrayType(schema))))


def validate(spark: SparkSession, messages: DataFrame, output: str, input_name: str,
             run_id: str | None = None, rule_set: Sequence[rules.Rule] = rules.ALL_RULES,
             cache_input: bool = False) -> ValidationRun:
    """Run the rules (all by default) over ``messages``; append violations and rule metrics under ``output``.

    One Spark job: each frame of rows (the table checks' received messages, the busy seconds) is computed once
    and all its checks run in that pass; observations count the checked rows as they stream by
    (:func:`spark.rules.counts`); the other frames' rules run in one Java walk over one shuffle of every record
    (:data:`spark.rules.WALKED`), which counts its checked rows itself. The findings per (rule, check) are
    counted in what was written (a small job over this run's violations: an observation of the findings cost
    ~2 s at 2M lines).
    Over Parquet every frame reads only its columns (no cache: cheaper than caching the rule
    columns, maps included, once); ``cache_input`` keeps parsed JSON lines for the frames instead
    of parsing them once per frame.
    """
    layout = Layout(output)
    run_ms = time.time_ns() // 1_000_000
    run_id = run_id or dt.datetime.fromtimestamp(run_ms / 1000, dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    checks_by_frame = rules.frames(rule_set)
    runs = _checks_run(checks_by_frame)
    m = messages.select(*rules.INPUT_COLUMNS)
    if cache_input:  # on local disk: at 2M lines 1,958 MB JVM peak and 99 s, in memory 2,019 MB and 105 s
        m = m.persist(StorageLevel.DISK_ONLY)
    unique = f"{run_id}-{time.time_ns()}"  # observation names are unique per run in the session
    observed: dict[str, Observation] = {}  # frame -> its observation, for the frames that count rows

    def observe(frame: str) -> Observation:
        return observed.setdefault(frame, Observation(f"checked-{frame}-{unique}"))
    try:
        with settings(spark, {"spark.sql.adaptive.optimizer.excludedRules": _excluded_rules(spark)}):
            walks: list[rules.Walk] = []
            found = rules.all_violations(m, rule_set, observe, checks_by_frame, walks=walks, walked=True)
            found.select(F.lit(run_id).alias("runId"), _unchanging_code(run_ms).alias("runMs"),
                         *[F.col(f.name) for f in tables.VIOLATIONS.fields[2:]]).write.mode("append").parquet(layout.violations)
        checked = {check: count for o in observed.values() for check, count in o.get.items()}
        checked.update({check: count for w in walks for check, count in w.checked().items()})
        metrics = _metrics(checked, _found(spark, layout, run_id, run_ms), runs)
    finally:
        if cache_input:
            m.unpersist()
    rows = [(run_id, run_ms, input_name, x.rule, x.check, x.requirement, x.severity, x.checked, x.violations)
            for x in metrics]
    local_rows(spark, rows, tables.RULE_METRICS).coalesce(1).write.mode("append").parquet(layout.rule_metrics)
    return ValidationRun(run_id, run_ms, metrics)


def _excluded_rules(spark: SparkSession) -> str:
    """The session's excluded adaptive rules and :data:`KEEP_OBSERVATIONS`."""
    before = spark.conf.get("spark.sql.adaptive.optimizer.excludedRules", None)
    return ",".join(filter(None, (before, KEEP_OBSERVATIONS)))


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    result = validate(spark, load_messages(spark, args.input), args.output, " ".join(args.input), args.run_id,
                      cache_input=not is_table(args.input))
    print(result.table())
    print(f"validate: run {result.run_id}: {result.violations} findings -> {Layout(args.output).violations}")
    if getattr(args, "metrics_file", None):
        write_metrics(args.metrics_file, result)
    return 0
