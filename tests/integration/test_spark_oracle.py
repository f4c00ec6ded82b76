"""The audit against an independent oracle (tests/integration/audit_oracle: a log written from the log schema
and the profile's text, with planted violations whose exact set is known): validate finds exactly
them, hostile lines are corrupt with the reason of their kind, and mutants of the pipeline (a rule
off, a bound moved, the admission sequence forgotten) and of the oracle make the comparison fail."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import audit_oracle
from audit_oracle import Finding
from spark import property_rules, rules, tables
from spark.ingest import ingest, read_messages, read_table
from spark.validate import validate


keys = audit_oracle.finding_keys


@pytest.fixture(scope="module")
def oracle() -> audit_oracle.OracleLog:
    return audit_oracle.build()


@pytest.fixture(scope="module")
def ingested(spark: SparkSession, oracle: audit_oracle.OracleLog, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The oracle's log in three rotated files, ingested, validated once."""
    root = tmp_path_factory.mktemp("oracle")
    (root / "logs").mkdir()
    for i, text in enumerate(oracle.files(3)):
        (root / "logs" / f"node-20261130T00000{i}000000-000{i}.jsonl").write_text(text, encoding="utf-8")
    out = str(root / "out")
    ingest(spark, [str(root / "logs")], out)
    validate(spark, read_messages(spark, tables.Layout(out).messages), out, "oracle", "oracle")
    return out


def findings(spark: SparkSession, out: str) -> list[object]:
    return read_table(spark, tables.Layout(out).violations, tables.VIOLATIONS).collect()


def test_validate_finds_exactly_the_planted_violations(spark: SparkSession, oracle: audit_oracle.OracleLog,
                                                       ingested: str) -> None:
    found = findings(spark, ingested)
    assert keys(found) == oracle.expected
    assert len(found) == len(oracle.expected)  # each once (a record logged twice too)


def test_the_oracle_plants_a_violation_of_every_rule(oracle: audit_oracle.OracleLog) -> None:
    """Each check of the pipeline has a planted violation: with any one of them off, the comparison
    above fails (its expected findings are missing)."""
    planted_checks = {check for _, check, _, _ in oracle.expected}
    assert set(rules.CHECKS) <= planted_checks, sorted(set(rules.CHECKS) - planted_checks)
    planted_tables = {rule for rule, check, _, _ in oracle.expected if check == "properties"}
    assert set(property_rules.REQUIREMENTS) <= planted_tables, sorted(set(property_rules.REQUIREMENTS) - planted_tables)


def _run(spark: SparkSession, out: str, rule_set: Sequence[rules.Rule]) -> set[Finding]:
    messages: DataFrame = read_messages(spark, tables.Layout(out).messages)
    return keys(rules.all_violations(messages, rule_set).collect())


def _expected(oracle: audit_oracle.OracleLog, checks: set[str]) -> set[Finding]:
    return {f for f in oracle.expected if f[1] in checks}


def test_mutant_without_the_admission_sequence_fails(spark: SparkSession, oracle: audit_oracle.OracleLog,
                                                     ingested: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shard order and gaps compared across process starts (the broker numbers from 1 at each start):
    the restart gives a false "shardSeq 1 after 2", and the gaps are not where they are."""
    checks = {"shard_order", "shard_gap"}
    assert _run(spark, ingested, [rules.shard_order, rules.shard_gap]) == _expected(oracle, checks)
    monkeypatch.setattr(rules, "admission", lambda: F.regexp_extract(F.col("messageId"), r"^([^/]+)/", 1))
    assert _run(spark, ingested, [rules.shard_order, rules.shard_gap]) != _expected(oracle, checks)


def test_mutant_with_the_latency_bound_moved_fails(spark: SparkSession, oracle: audit_oracle.OracleLog,
                                                   ingested: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """"in <30ms": a pipeline accepting 30 ms misses the planted 30 ms delivery."""
    monkeypatch.setattr(rules, "LATENCY_LIMIT_MS", 31)
    assert _run(spark, ingested, [rules.latency]) != _expected(oracle, {"latency"})


def test_mutant_of_the_oracle_fails(spark: SparkSession, oracle: audit_oracle.OracleLog, ingested: str) -> None:
    """An oracle expecting one more (or one less) finding is told it is wrong."""
    found = keys(findings(spark, ingested))
    assert found != oracle.expected | {("IP_013", "burst", f"second:{audit_oracle.T0 + 3_000_000}", None)}
    assert found != oracle.expected - {next(iter(sorted(oracle.expected)))}


def test_hostile_lines_are_corrupt_with_their_reason(spark: SparkSession, tmp_path: Path) -> None:
    """No line stops ingest (48 MB on one line included); each is corrupt with the reason of its kind,
    or a record (after a byte order mark, with a carriage return inside, with ":1e400" in a string)."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "hostile.jsonl").write_bytes(audit_oracle.hostile_file())
    out = str(tmp_path / "out")
    summary = ingest(spark, [str(tmp_path / "logs")], out)
    corrupt = [r.reason for r in read_table(spark, tables.Layout(out).corrupt, tables.CORRUPT).collect()]
    expected = [h.reason for h in audit_oracle.HOSTILE_LINES if h.reason is not None]
    unmatched = list(corrupt)
    for kind in expected:
        match = next((reason for reason in unmatched if reason.startswith(kind)), None)
        assert match is not None, (kind, corrupt)
        unmatched.remove(match)
    assert unmatched == []
    assert (summary.events, summary.corrupt) == (len(audit_oracle.HOSTILE_LINES) - len(expected), len(expected))
    longest = max(len(r.line) for r in read_table(spark, tables.Layout(out).corrupt, tables.CORRUPT).collect())
    assert longest <= 1024
