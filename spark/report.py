"""``audit report``: one self-contained HTML page a governance reader understands without the code.

    interchange audit report --input INGESTED_DIR|LOGS... --output report.html [--top N]

Input: an ``ingest`` output directory (its messages, events and corrupt tables, and the latest
``validate`` run's violations when there is one), or JSON-lines logs read directly with the
explicit schema of :mod:`spark.parse`. Every aggregation runs in Spark (volumes per messageType,
publisher, neighbour and node over time; latency percentiles against IP_012's 30 ms; violations
per rule and top offenders, and per rule across the validate runs (the rule metrics history);
rejections by reason (IP_016), drops (IP_032), expiries (IP_033);
federation health from the II's ``ii_*`` events); only the small aggregated results reach the
driver, where :mod:`spark.report_render` draws the page (jinja2 + matplotlib, inline SVG).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from interchange.ground.errors import CliError
from spark import ingest, parse, tables
from spark.report_model import (
    FINDINGS_INLINE,
    HISTORY_RUNS,
    LATENCY_LIMIT_MS,
    SEVERITY_RANK,
    Change,
    Count,
    FindingRow,
    Latency,
    Offender,
    Party,
    ReportData,
    RuleCount,
    RunMetrics,
    Series,
    StatusChange,
    Subscription,
    bucket_for,
    severity_rank,
)
from spark.replay_args import check_range
from spark.report_render import render
from spark.tables import Layout

LOSS_EVENTS = ("dropped_message", "expired_message", "unroutable_message")

#: The counts of the report over the message records: each is one grouping set of a single
#: aggregation (one Spark job for all of them); "event" is in every set and filtered on the driver.
MESSAGE_SETS: dict[str, tuple[str, ...]] = {
    "records": ("event",),
    "volumes": ("event", "bucket", "messageType"),
    "publishers": ("event", "publisher", "publisherId"),
    "neighbours": ("event", "origin", "neighbour"),
    "nodes": ("event", "node"),
    "losses": ("event", "where", "reason", "messageType"),
    "loss_series": ("event", "bucket"),
    "rejections": ("event", "reason"),
}

Groups = dict[str, list[tuple[tuple[object, ...], int]]]


def _bucket(column: Column, bucket_ms: int) -> Column:
    return (F.floor(column / bucket_ms) * bucket_ms).cast("long")


def _grouping_ids(sets: dict[str, tuple[str, ...]], columns: Sequence[str]) -> dict[int, str]:
    """grouping_id() of each set: bit (n-1-i) is set when columns[i] is not grouped on."""
    return {sum(1 << (len(columns) - 1 - i) for i, column in enumerate(columns) if column not in grouped): name
            for name, grouped in sets.items()}


def message_groups(messages: DataFrame, bucket_ms: int) -> Groups:
    """Every count of :data:`MESSAGE_SETS` in one aggregation: set name -> [(values, count)]."""
    derived = {"bucket": _bucket(F.col("timestampMs"), bucket_ms),
               "where": F.coalesce(F.col("source"), F.col("address"))}
    columns = sorted({column for grouped in MESSAGE_SETS.values() for column in grouped})
    frame = messages.select(*(derived.get(c, F.col(c)).alias(c) for c in columns))
    rows = (frame.groupingSets([list(grouped) for grouped in MESSAGE_SETS.values()], *columns)
            .agg(F.count(F.lit(1)).alias("count"), F.grouping_id().alias("gid")).collect())
    names = _grouping_ids(MESSAGE_SETS, columns)
    groups: Groups = {name: [] for name in MESSAGE_SETS}
    for row in rows:
        name = names[row["gid"]]
        groups[name].append((tuple(row[c] for c in MESSAGE_SETS[name]), int(row["count"])))
    return groups


def _ranked(items: dict[tuple[str, ...], int], top: int | None = None) -> list[Count]:
    ranked = sorted(items.items(), key=lambda item: (-item[1], item[0]))
    return [Count(labels, count) for labels, count in ranked[:top]]


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def _select(groups: Groups, name: str, events: Sequence[str], keep: slice) -> dict[tuple[str, ...], int]:
    """Counts of set ``name`` for ``events``, keyed by the set's columns in ``keep`` (as text)."""
    out: dict[tuple[str, ...], int] = {}
    for values, count in groups[name]:
        if values[0] in events:
            key = tuple(_text(v) for v in values[keep])
            out[key] = out.get(key, 0) + count
    return out


def _series_of(items: dict[tuple[str, ...], int], bucket_ms: int) -> Series:
    """(bucket, key) counts -> a Series."""
    points: dict[str, dict[int, float]] = {}
    for (bucket, key), count in items.items():
        if bucket != "-":
            points.setdefault(key, {})[int(bucket)] = float(count)
    return Series(bucket_ms, points)


def counts(groups: Groups, data: ReportData, bucket_ms: int, top: int) -> None:
    """Volumes, drops, expiries and rejections of the report from :func:`message_groups`."""
    received = ("received_message",)
    data.records = {str(values[0]): count for values, count in groups["records"]}
    data.volumes = _series_of(_select(groups, "volumes", received, slice(1, 3)), bucket_ms)
    data.publishers = _ranked(_select(groups, "publishers", received, slice(1, 3)), top)
    federated = {key[1:]: n for key, n in _select(groups, "neighbours", received, slice(1, 3)).items()
                 if key[0] == "federated"}
    data.neighbours = _ranked(federated, top)
    data.per_node = _ranked(_select(groups, "nodes", received, slice(1, 2)))
    losses = {(event.removesuffix("_message"), *rest): n
              for (event, *rest), n in _select(groups, "losses", LOSS_EVENTS, slice(0, 4)).items()}
    data.losses = _ranked(losses, top)
    data.loss_series = _series_of({(bucket, event.removesuffix("_message")): n for (event, bucket), n
                                   in _select(groups, "loss_series", LOSS_EVENTS, slice(0, 2)).items()}, bucket_ms)
    data.rejections = _ranked(_select(groups, "rejections", ("rejected_message",), slice(1, 2)), top)


def _latency_row(message_type: str, row: Row) -> Latency:
    p50, p90, p99 = row["percentiles"]
    return Latency(message_type, int(row["deliveries"]), float(p50), float(p90), float(p99), float(row["max"]),
                   int(row["over"]))


def latency(messages: DataFrame, data: ReportData, bucket_ms: int) -> None:
    """Percentiles per messageType, over all, and per time bucket: one aggregation (grouping sets)."""
    delivered = (messages.where((F.col("event") == "sent_message") & F.col("departureMs").isNotNull()
                                & F.col("arrivalMs").isNotNull())
                 .select((F.col("departureMs") - F.col("arrivalMs")).cast("double").alias("latencyMs"),
                         F.coalesce(F.col("messageType"), F.lit("(unknown)")).alias("type"),
                         _bucket(F.col("departureMs"), bucket_ms).alias("bucket")))
    measures = [F.count(F.lit(1)).alias("deliveries"),
                F.percentile_approx("latencyMs", [0.5, 0.9, 0.99], 10_000).alias("percentiles"),
                F.max("latencyMs").alias("max"),
                F.sum(F.when(F.col("latencyMs") >= LATENCY_LIMIT_MS, 1).otherwise(0)).alias("over"),
                F.grouping_id().alias("gid")]
    sets = {"type": ("type",), "all": (), "bucket": ("bucket",)}
    names = _grouping_ids(sets, ["bucket", "type"])
    rows = [row for row in delivered.groupingSets([list(g) for g in sets.values()], "bucket", "type")
            .agg(*measures).collect() if row["deliveries"]]
    per = {name: [row for row in rows if names[row["gid"]] == name] for name in sets}
    data.latency = sorted((_latency_row(row["type"], row) for row in per["type"]), key=lambda r: r.message_type)
    data.latency += [_latency_row("all", row) for row in per["all"]]
    data.latency_series = Series(bucket_ms, {
        "p50": {int(row["bucket"]): float(row["percentiles"][0]) for row in per["bucket"]},
        "p99": {int(row["bucket"]): float(row["percentiles"][2]) for row in per["bucket"]}})


def in_period(frame: DataFrame, period: tuple[int | None, int | None], column: str = "timestampMs") -> DataFrame:
    """The rows of ``frame`` whose ``column`` is at or after --from and before --until."""
    start, until = period
    if start is not None:
        frame = frame.where(F.col(column) >= start)
    if until is not None:
        frame = frame.where(F.col(column) < until)
    return frame


def _severity_order() -> Column:
    return F.create_map(*[F.lit(x) for pair in SEVERITY_RANK.items() for x in pair])[F.col("severity")]


#: The CSV's columns: a finding as a governance reader traces it to its messages.
CSV_COLUMNS = ("severity", "rule", "check", "requirement", "node", "messageId", "publicationId", "messageType",
               "publisher", "consumer", "timestampMs", "property", "observed", "expected", "file")


def violations(spark: SparkSession, layout: Layout, data: ReportData, top: int, csv_path: Path | None = None) -> None:
    """The latest validate run's findings (``violations`` table), when the input has one: per rule
    (by severity, then count), the first of each rule, all of them in ``csv_path``, top offenders."""
    if not Path(layout.violations).is_dir():
        return
    found = ingest.read_table(spark, layout.violations, tables.VIOLATIONS)
    latest = found.groupBy("runId", "runMs").count().orderBy(F.col("runMs").desc()).limit(1).collect()
    if not latest:
        return
    run_id, run_ms = latest[0]["runId"], latest[0]["runMs"]
    data.violations_run = f"{run_id} ({time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime((run_ms or 0) / 1000))})"
    run = in_period(found.where(F.col("runMs") == run_ms), data.period).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counted = run.groupBy("rule", "check", "severity", "requirement").count().collect()
        data.violations = sorted((RuleCount(row["rule"], row["check"] or "", row["severity"] or "",
                                            row["requirement"] or "", int(row["count"])) for row in counted),
                                 key=lambda r: (severity_rank(r.severity), -r.count, r.rule, r.check))
        data.findings_total = sum(r.count for r in data.violations)
        first = Window.partitionBy("rule", "check").orderBy("timestampMs", "messageId")
        rows = (run.withColumn("_n", F.row_number().over(first)).where(F.col("_n") <= FINDINGS_INLINE)
                .orderBy("rule", "check", "_n").collect())
        for row in rows:
            data.findings.setdefault((row["rule"], row["check"] or ""), []).append(FindingRow(
                row["rule"], row["check"] or "", row["severity"] or "", row["messageId"], row["node"],
                row["publisher"], row["timestampMs"], row["observed"], row["expected"]))
        offenders = (run.where(F.col("publisher").isNotNull()).groupBy("publisher")
                     .agg(F.count(F.lit(1)).alias("n"), F.array_sort(F.collect_set("rule")).alias("rules"))
                     .orderBy(F.col("n").desc(), "publisher").limit(top).collect())
        data.offenders = [Offender(row["publisher"], int(row["n"]), tuple(row["rules"])) for row in offenders]
        data.party_findings = {(kind, row[kind]): int(row["count"]) for kind in ("publisher", "consumer")
                               for row in run.where(F.col(kind).isNotNull()).groupBy(kind).count().collect()}
        if csv_path is not None:
            write_csv(run.orderBy(_severity_order(), "rule", "check", "timestampMs", "messageId")
                      .select(*CSV_COLUMNS), csv_path)
            data.findings_csv = csv_path.name
    finally:
        run.unpersist()


def write_csv(frame: DataFrame, path: Path) -> None:
    """``frame`` as one CSV file with a header at ``path`` (written by Spark, in order, then moved there)."""
    with tempfile.TemporaryDirectory(prefix=".findings-", dir=path.parent) as work:
        frame.coalesce(1).write.mode("overwrite").option("header", True).option("escape", '"').csv(work + "/csv")
        (part,) = Path(work, "csv").glob("part-*.csv")
        shutil.move(str(part), path)


def parties(messages: DataFrame, data: ReportData) -> None:
    """Per neighbour (federated messages received from it and their deliveries) and per consumer
    (deliveries to it): counts, latency percentiles, deliveries of 30 ms or more, findings."""
    delivered = (F.col("event") == "sent_message") & F.col("departureMs").isNotNull() & F.col("arrivalMs").isNotNull()
    took = (F.col("departureMs") - F.col("arrivalMs")).cast("double")
    measures = [F.count_if(F.col("event") == "received_message").alias("received"),
                F.count_if(delivered).alias("delivered"),
                F.percentile_approx(F.when(delivered, took), [0.5, 0.99], 10_000).alias("pct"),
                F.count_if(delivered & (took >= LATENCY_LIMIT_MS)).alias("over")]
    found = data.party_findings
    for kind, column, rows in (
            ("neighbour", "neighbour", messages.where((F.col("origin") == "federated") & F.col("neighbour").isNotNull())),
            ("consumer", "consumer", messages.where((F.col("event") == "sent_message") & F.col("consumer").isNotNull()))):
        for row in rows.groupBy(column).agg(*measures).orderBy(column).collect():
            pct = row["pct"] or [None, None]
            data.parties.append(Party(kind, row[column], int(row["received"]), int(row["delivered"]),
                                      pct[0], pct[1], int(row["over"]),
                                      found.get(("publisher" if kind == "neighbour" else "consumer", row[column]), 0)))


def changes(data: ReportData) -> None:
    """What changed between the previous validate run and the latest (the history's last two)."""
    if len(data.history) < 2:
        return
    before, after = data.history[-2], data.history[-1]
    data.previous_run = f"{before.run_id} ({time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(before.run_ms / 1000))})"
    keys = sorted(set(before.violations) | set(after.violations))
    data.changes = [Change(rule, check, before.violations.get((rule, check), 0), after.violations.get((rule, check), 0))
                    for rule, check in keys
                    if before.violations.get((rule, check), 0) != after.violations.get((rule, check), 0)]


def history(spark: SparkSession, layout: Layout, data: ReportData) -> None:
    """The rule metrics of the latest validate runs (``rule_metrics``: one row per (rule, check) and run)."""
    if not Path(layout.rule_metrics).is_dir():
        return
    metrics = ingest.read_table(spark, layout.rule_metrics, tables.RULE_METRICS)
    runs = [row["runId"] for row in metrics.groupBy("runId").agg(F.max("runMs").alias("runMs"))
            .orderBy(F.col("runMs").desc(), F.col("runId").desc()).limit(HISTORY_RUNS).collect()]
    rows = metrics.where(F.col("runId").isin(*runs)).orderBy("runMs", "runId", "rule", "check").collect()
    by_run: dict[str, RunMetrics] = {}
    for row in rows:
        run = by_run.setdefault(row["runId"], RunMetrics(row["runId"], int(row["runMs"] or 0), row["input"] or "", {}, {}))
        key = (row["rule"], row["check"] or "")
        run.violations[key] = run.violations.get(key, 0) + int(row["violations"] or 0)
        run.checked[key] = run.checked.get(key, 0) + int(row["checked"] or 0)
    data.history = list(by_run.values())


def _detail(name: str) -> Column:
    return F.col("details")[name]


#: II events drawn or tabled one by one (rare: control-plane changes, not traffic).
FEDERATION_EVENTS = ("ii_started", "ii_neighbours_changed", "ii_subscription_status", "ii_subscription_received",
                     "ii_subscription_deleted")


def federation(events: DataFrame, data: ReportData) -> None:
    """Neighbours over time and every subscription's statuses, from the II's events."""
    ii = events.where(F.col("event").startswith("ii_"))
    data.federation_events = [Count((row["event"], _text(row["level"])), int(row["count"]))
                              for row in ii.groupBy("event", "level").count().orderBy("event", "level").collect()]
    rows = (ii.where(F.col("event").isin(*FEDERATION_EVENTS))
            .select("timestampMs", "event", _detail("neighbour").alias("neighbour"),
                    F.coalesce(_detail("selector"), F.concat(F.lit("id "), _detail("id"))).alias("selector"),
                    F.coalesce(_detail("status"), F.upper(_detail("phase"))).alias("status"),
                    _detail("error").alias("error"), _detail("id").alias("id"),
                    F.size(F.from_json(_detail("neighbours"), ArrayType(StringType()))).alias("neighbours"))
            .orderBy("timestampMs").collect())
    data.neighbour_counts = [(int(row["timestampMs"]), int(row["neighbours"])) for row in rows
                             if row["event"] in ("ii_started", "ii_neighbours_changed") and row["neighbours"] >= 0]
    data.status_changes = [StatusChange(_text(row["neighbour"]), row["selector"] or "", int(row["timestampMs"]),
                                        row["status"] or "?", row["error"])
                           for row in rows if row["event"] == "ii_subscription_status"]
    data.subscriptions = _last_statuses(rows)


def _last_statuses(rows: Sequence[Row]) -> list[Subscription]:
    """The last status of each outgoing (neighbour, selector) and incoming (neighbour, id) subscription."""
    last: dict[tuple[str, str, str], Subscription] = {}
    for row in rows:  # in time order
        if row["event"] == "ii_subscription_status":
            key = ("outgoing", _text(row["neighbour"]), row["selector"] or "")
        elif row["event"] in ("ii_subscription_received", "ii_subscription_deleted"):
            key = ("incoming", _text(row["neighbour"]), _text(row["id"]))
        else:
            continue
        before = last.get(key)
        status = "DELETED" if row["event"] == "ii_subscription_deleted" else (row["status"] or "?")
        selector = row["selector"] if row["event"] != "ii_subscription_deleted" or before is None else before.selector
        last[key] = Subscription(key[0], key[1], selector or "", status, int(row["timestampMs"]),
                                 (before.changes if before else 0) + 1, row["error"])
    return [last[key] for key in sorted(last)]


def overview(messages: DataFrame, events: DataFrame, data: ReportData) -> int:
    """Period and nodes; returns the charts' time bucket for the period."""
    both = messages.select("timestampMs", "node", "event").unionByName(events.select("timestampMs", "node", "event"))
    bounds = both.agg(F.min("timestampMs").alias("first"), F.max("timestampMs").alias("last"),
                      F.array_sort(F.collect_set("node")).alias("nodes")).collect()[0]
    data.first_ms, data.last_ms, data.nodes = bounds["first"], bounds["last"], list(bounds["nodes"] or [])
    return bucket_for((data.last_ms or 0) - (data.first_ms or 0))


@dataclass
class Input:
    """The report's input as tables: an ingest output, or logs parsed once (kept until :meth:`close`)."""

    messages: DataFrame
    events: DataFrame
    corrupt_lines: int | None
    layout: Layout | None = None
    parsed: DataFrame | None = None

    def close(self) -> None:
        self.messages.unpersist()
        if self.parsed is not None:
            self.parsed.unpersist()


def open_input(spark: SparkSession, inputs: Sequence[str], period: tuple[int | None, int | None] = (None, None)) -> Input:
    if len(inputs) == 1 and Layout(inputs[0]).is_ingested():
        layout = Layout(inputs[0])
        corrupt = ingest.read_table(spark, layout.corrupt, tables.CORRUPT).count() \
            if Path(layout.corrupt).is_dir() else None
        messages = in_period(ingest.read_messages(spark, layout.messages), period).drop(
            *tables.PROPERTY_COLUMNS).persist(StorageLevel.MEMORY_AND_DISK)  # those are validate's
        return Input(messages, in_period(ingest.read_table(spark, layout.events, tables.EVENTS), period), corrupt, layout)
    parsed = ingest.read_records(spark, inputs).persist(StorageLevel.MEMORY_AND_DISK)  # every line parsed once
    corrupt = parsed.where(F.col("corruptReason").isNotNull()).count()
    return Input(in_period(parse.messages(parsed), period).persist(StorageLevel.MEMORY_AND_DISK),
                 in_period(parse.events(parsed), period), corrupt, parsed=parsed)


def build(spark: SparkSession, inputs: Sequence[str], top: int = 10, period: tuple[int | None, int | None] = (None, None),
          csv_path: Path | None = None) -> ReportData:
    """Every aggregation of the report over ``inputs`` (records and findings of ``period`` only);
    ``csv_path``: where every finding of the latest validate run goes (a CSV beside the page)."""
    source = open_input(spark, inputs, period)
    try:
        data = ReportData(inputs=list(inputs), generated_ms=time.time_ns() // 1_000_000,
                          corrupt_lines=source.corrupt_lines, period=period)
        bucket_ms = overview(source.messages, source.events, data)
        counts(message_groups(source.messages, bucket_ms), data, bucket_ms, top)
        latency(source.messages, data, bucket_ms)
        if source.layout is not None:
            violations(spark, source.layout, data, top, csv_path)
            history(spark, source.layout, data)
            changes(data)
        parties(source.messages, data)
        federation(source.events, data)
    finally:
        source.close()
    return data


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    check_range(args)
    output = Path(args.output)
    if output.is_dir():
        raise CliError(f"--output must be the report's file name (e.g. report.html), {output} is a directory")
    output.parent.mkdir(parents=True, exist_ok=True)
    data = build(spark, args.input, args.top, (args.start, args.until), output.with_suffix(".findings.csv"))
    output.write_text(render(data, args.title), encoding="utf-8")
    received = data.records.get("received_message", 0)
    by_severity = {severity: sum(r.count for r in data.violations if r.severity == severity) for severity in SEVERITY_RANK}
    print(f"report: {received} messages received, {len(data.violations)} rules with violations "
          f"({', '.join(f'{n} {s}' for s, n in by_severity.items())}), {len(data.subscriptions)} subscriptions -> {output}"
          + (f" (findings: {output.with_suffix('.findings.csv')})" if data.findings_csv else ""))
    return 0
