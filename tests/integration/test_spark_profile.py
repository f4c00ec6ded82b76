"""The audit's tables 1-7 rules (spark.property_rules) follow the message profile entry by entry.

The cases of interchange/testing/profile_cases.py (each entry of the profile broken once, from its data alone)
go through the log pipeline (log records -> spark.parse -> findings): each gives exactly the one
finding the profile names, and the cheap test ``valid`` agrees. A changed profile (properties
added, a range narrowed) is checked by the SQL built from it without a line of Spark code; its
messages are given as the messages table's columns (the table's own schema follows the profile).
"""
from __future__ import annotations

import json

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType, StructField, StructType

from interchange.ground import logformat
from interchange.ground.profile import TABLES, Tables
from interchange.testing.profile_cases import cases, changed_tables, valid_sets
from spark import loggen, parse, property_rules
from spark.loggen import Message, received

T0 = 1_795_000_000_000
NODE = "ixc-p"


def _from_log(spark: SparkSession, sets: list[dict[str, object]]):
    records = [received(Message(NODE, i + 1, T0 + i, props)) for i, props in enumerate(sets)]
    lines = spark.createDataFrame([(logformat.dumps(r), "mem") for r in records], "value string, file string")
    return parse.messages(parse.parse(lines))


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", int: "integer", float: "float"}[type(value)]


def _as_columns(spark: SparkSession, tables: Tables, sets: list[dict[str, object]]):
    """The messages table's property columns of ``sets`` for ``tables``: value text and JSON kind per
    standard name (as spark.parse writes them), the other properties' values."""
    names = [p.name for p in tables.properties]
    fields = StructType([StructField(name, StringType(), True) for name in names])
    schema = StructType([StructField("messageId", StringType()), StructField("standardProperties", fields),
                         StructField("standardKinds", fields),
                         StructField("otherProperties", MapType(StringType(), StringType()))])
    rows = []
    for i, props in enumerate(sets):
        text = {k: v if isinstance(v, str) else json.dumps(v) for k, v in props.items()}
        rows.append((loggen.message_id(NODE, i + 1), tuple(text.get(n) for n in names),
                     tuple(_json_kind(props[n]) if n in props else None for n in names),
                     {k: v for k, v in text.items() if k not in names}))
    return spark.createDataFrame(rows, schema)


def _findings(messages, rules: property_rules.TableRules) -> tuple[dict[str, list[tuple[str, str]]], dict[str, bool]]:
    """The findings and ``valid`` of the SQL; the Java function (what validate runs) must give the same findings,
    in the same order, texts included."""
    name = f"table_findings_{abs(hash(rules.function_spec()))}"
    rules.register(messages.sparkSession, name)
    rows = messages.select("messageId", F.expr(rules.findings_sql()).alias("found"),
                           F.expr(f"{name}({property_rules.FUNCTION_ARGUMENTS})").alias("java"),
                           F.expr(rules.valid_sql()).alias("valid")).collect()
    assert {r.messageId: r.java for r in rows} == {r.messageId: r.found for r in rows}
    return ({r.messageId: [(f.property, f.rule) for f in r.found] for r in rows}, {r.messageId: r.valid for r in rows})


def _check(found: dict[str, list[tuple[str, str]]], valid: dict[str, bool], all_cases, good) -> None:
    ids = [loggen.message_id(NODE, i + 1) for i in range(len(all_cases) + len(good))]
    wrong = {case.what: found[mid] for case, mid in zip(all_cases, ids) if found[mid] != [case.expected]}
    assert not wrong
    assert not [case.what for case, mid in zip(all_cases, ids) if valid[mid]]
    assert [found[mid] for mid in ids[len(all_cases):]] == [[] for _ in good]
    assert all(valid[mid] for mid in ids[len(all_cases):])


def test_every_entry_of_the_profile_is_checked_by_the_audit(spark: SparkSession) -> None:
    all_cases, good = cases(TABLES), valid_sets(TABLES)
    messages = _from_log(spark, [case.props for case in all_cases] + good)
    _check(*_findings(messages, property_rules.RULES), all_cases, good)


def test_a_changed_profile_is_checked_without_further_code(spark: SparkSession) -> None:
    tables = changed_tables()
    all_cases, good = cases(tables), valid_sets(tables)
    assert {"laneCount", "zoneIds", "detector", "road", "operatorId", "lane"} <= {c.expected[0] for c in all_cases}
    messages = _as_columns(spark, tables, [case.props for case in all_cases] + good)
    _check(*_findings(messages, property_rules.TableRules(tables)), all_cases, good)
