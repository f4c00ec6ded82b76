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
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from spark import parse, property_rules, rules, tables
from spark.ingest import read_records, read_table
from spark.tables import Layout


def load_messages(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """The messages table of an ingest output, or the message records of JSON-lines logs."""
    if len(inputs) == 1 and Layout(inputs[0]).is_ingested():
        return read_table(spark, Layout(inputs[0]).messages, tables.MESSAGES)
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


def _checks_run(rule_set: Sequence[rules.Rule]) -> list[tuple[str, str, str]]:
    """(rule, check, severity) of every metric the rules in ``rule_set`` produce, found or not."""
    ran = {rule.__name__ for rule in rule_set}
    checks = [(rule, check, severity) for check, (rule, severity) in rules.CHECKS.items()
              if rules.CHECK_RULES[check] in ran]
    if "properties" in ran:
        checks += [(requirement, "properties", "error") for requirement in property_rules.REQUIREMENTS]
    return checks


def _metric_columns(checks: Sequence[tuple[str, str, str]]) -> list[Column]:
    """Two counts (checked, violations) per (rule, check), evaluated while the violations are written.

    An observation (``DataFrame.observe``) aggregates the candidates on their way to the writer, so
    every rule's candidates are computed once and never stored (no cache of the candidates, no
    second pass to count them).
    """
    columns = []
    for rule, check, _ in checks:
        this = F.col("check") == check
        if check == "properties":  # the table checks: one candidate per finding, rule = its requirement
            this = this & (F.col("rule") == rule)
        columns += [F.count_if(this & F.col("counted")).alias(f"{rule}/{check}/checked"),
                    F.count_if(this & F.col("violated")).alias(f"{rule}/{check}/violations")]
    return columns


def _metrics(observed: dict[str, int], checks: Sequence[tuple[str, str, str]], properties_checked: int) -> list[RuleMetric]:
    metrics = [RuleMetric(rule, check, rules.REQUIREMENTS[rule], severity,
                          properties_checked if check == "properties" else observed[f"{rule}/{check}/checked"],
                          observed[f"{rule}/{check}/violations"]) for rule, check, severity in checks]
    return sorted(metrics, key=lambda m: (m.rule, m.check))


def validate(spark: SparkSession, messages: DataFrame, output: str, input_name: str,
             run_id: str | None = None, rule_set: Sequence[rules.Rule] = rules.ALL_RULES) -> ValidationRun:
    """Run the rules (all by default) over ``messages``; append violations and rule metrics under ``output``."""
    layout = Layout(output)
    run_ms = time.time_ns() // 1_000_000
    run_id = run_id or dt.datetime.fromtimestamp(run_ms / 1000, dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    checks = _checks_run(rule_set)
    m = messages.select(*rules.INPUT_COLUMNS).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        observation = Observation(f"rule-metrics-{run_id}-{time.time_ns()}")  # unique per run in the session
        found = rules.all_candidates(m, rule_set).observe(observation, *_metric_columns(checks))
        violations = found.where("violated").select(
            F.lit(run_id).alias("runId"), F.lit(run_ms).cast("long").alias("runMs"),
            *[F.col(f.name) for f in tables.VIOLATIONS.fields[2:]])
        violations.write.mode("append").parquet(layout.violations)
        properties_checked = m.where((F.col("event") == "received_message")
                                     & F.col("applicationProperties").isNotNull()).count()
        metrics = _metrics(observation.get, checks, properties_checked)
    finally:
        m.unpersist()
    rows = [(run_id, run_ms, input_name, x.rule, x.check, x.requirement, x.severity, x.checked, x.violations)
            for x in metrics]
    spark.createDataFrame(rows, tables.RULE_METRICS).coalesce(1).write.mode("append").parquet(layout.rule_metrics)
    return ValidationRun(run_id, run_ms, metrics)


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    result = validate(spark, load_messages(spark, args.input), args.output, " ".join(args.input), args.run_id)
    print(result.table())
    print(f"validate: run {result.run_id}: {result.violations} findings -> {Layout(args.output).violations}")
    return 0
