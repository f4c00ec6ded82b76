"""``audit stream``: every rule of ``validate`` and windowed traffic metrics over the rotated log directory.

Structured Streaming reads ``<dir>/*.jsonl``: the node's writer renames a full log file to an
immutable ``<stem>-<UTC time>-<n>.jsonl`` (log contract v2), and the active file does not match
the glob, so the stream only ever sees complete files (Spark's file source reads a file once and
would skip lines appended later). Two queries, each with its own checkpoint under
``<output>/stream/checkpoints/``, write Parquet through Spark's file sink, which commits each
micro-batch exactly once: a restart resumes from the checkpoint with nothing lost or counted twice.

- ``stream/violations``: the findings of every rule of :data:`spark.rules.ALL_RULES` in
  :data:`spark.tables.VIOLATIONS` (``runId`` "stream", ``runMs`` the micro-batch time), the same
  rows ``validate`` writes for the same files (but for those two columns). Three branches, each
  with its state in the checkpoint:

  - the per-record rules, as a column expression per record; a finding is written as soon as its
    record is read, and a second copy of it (a record logged twice) is dropped
    (``dropDuplicatesWithinWatermark``);
  - records logged twice: a count per record key, written once the watermark has passed the record;
  - the rules comparing records (:mod:`spark.stream_rules`): rows keyed by what they are compared
    within (link and shard, shard, publication, node, second) through ``applyInPandasWithState``;
    each key's rows wait in its state until the watermark has passed them, are then taken in the
    batch rules' order and compared with the key's past (kept in the state).

- ``stream/metrics``: per 1-minute event-time window, node, event and messageType, the record
  count and first-delivery latency (max, mean, 30 ms or more); a window is written once the
  watermark has passed it.

Lateness: the watermark is :data:`LATENESS` behind the newest record time (``timestampMs``) the
stream has read. A record up to that much older than the newest one read before it is compared
in its place; a record later than that (e.g. an old file copied into the directory afterwards) is
left out of the stream's rules: Spark drops it from every stateful operator, and the job prints
how many were dropped so (``numRowsDroppedByWatermark``); ``validate`` over the same files checks
them. Findings of the rules comparing records, and of records logged twice, are therefore written
when the watermark passes them: :data:`LATENESS` after newer records arrive (the last ones of a
log once a later file comes, or the stream's next file).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from interchange.ground.errors import CliError
from spark import parse, property_rules, rules, stream_rules, tables
from spark.ingest import LINE_SEPARATOR, not_blank
from spark.tables import Layout

WINDOW = "1 minute"
#: How far behind the newest record time the watermark is (see the module docstring).
LATENESS = "2 minutes"
LATENESS_MS = 120_000
WATERMARK = LATENESS
STREAM_GLOB = "*.jsonl"
EVENT_TIME = "eventTime"

#: What the rules comparing records take from :mod:`spark.rules`.
SETTINGS = stream_rules.Settings(
    gaps=tuple(stream_rules.Gap(check, rule, severity, types, low, high, expected)
               for check, (rule, severity, types, low, high, expected) in rules.GAPS.items()),
    repeated_types=rules.REPEATED_TYPES, burst_messages=rules.BURST_MESSAGES, burst_limit_ms=rules.BURST_LIMIT_MS,
    lateness_ms=LATENESS_MS)


def read_stream(spark: SparkSession, log_dir: str, max_files_per_trigger: int | None = None) -> DataFrame:
    """Message records of every new ``*.jsonl`` file in ``log_dir``, with their event time and its watermark."""
    reader = spark.readStream.format("text").option("lineSep", LINE_SEPARATOR)
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    lines = (reader.load(os.path.join(log_dir, STREAM_GLOB))
             .select(F.col("value"), F.col("_metadata.file_path").alias("file"))
             .where(not_blank(F.col("value"))))
    messages = parse.messages(parse.parse(lines))
    return messages.withColumn(EVENT_TIME, F.timestamp_millis(F.col("timestampMs"))).withWatermark(EVENT_TIME, LATENESS)


# --- the rules comparing records: rows per (kind, key) -------------------------------------------------

#: Columns of the rows handed to :mod:`spark.stream_rules` (besides kind, key and the event times).
_ROW_COLUMNS = (*rules.IDENTITY, "shardKey", "shardSeq", "arrivalMs", "departureMs", "bodySha256")
_OUTPUT = ", ".join(
    f"{name} {kind}" for name, kind in (*[(f.name, f.dataType.simpleString()) for f in tables.VIOLATIONS.fields
                                          if f.name in rules.IDENTITY], *[(c, "string") for c in stream_rules.FINDING]))
_OUTPUT_COLUMNS = [f.name for f in tables.VIOLATIONS.fields if f.name in rules.IDENTITY] + list(stream_rules.FINDING)


#: The keys of a kind (but ``sec``'s) are spread over this many groups of applyInPandasWithState: one
#: call of the Python function per group and micro-batch, each with its keys' rows and state.
BUCKETS = 32


def _keyed(m: DataFrame, kind: str, condition: Column, key: list[Column], event_ms: Column,
           bucketed: bool = True) -> DataFrame:
    sub = F.concat_ws("|", *[F.coalesce(k.cast("string"), F.lit("")) for k in key])
    group = F.pmod(F.xxhash64(sub), F.lit(BUCKETS)).cast("string") if bucketed else sub
    return m.where(condition).select(
        F.lit(kind).alias("kind"), group.alias("key"), sub.alias("sub"),
        event_ms.alias("eventMs"), *_ROW_COLUMNS, rules.admission().alias("admission"),
        F.array_remove(F.split(F.regexp_replace(F.coalesce(F.col(property_rules.VALUES)["id"], F.lit("")), "^,|,$", ""),
                               ","), "").alias("intersections"),
        rules.message_key().alias("messageKey"), F.col(EVENT_TIME))


def compared_rows(m: DataFrame) -> DataFrame:
    """The rows of each rule comparing records, keyed as :mod:`spark.stream_rules` compares them."""
    c = F.col
    received = c("event") == "received_message"
    frames = [
        _keyed(m, "order", rules.sequenced_delivery(), [c("node"), rules.admission(), c("source"), c("consumer"),
                                                         c("shardKey")], c("departureMs")),
        _keyed(m, "gap", rules.sequenced_arrival(), [c("node"), rules.admission(), c("shardKey")], c("timestampMs")),
        _keyed(m, "pub", rules.received_publication(), [c("node"), c("publicationId")],
               F.coalesce(c("arrivalMs"), c("timestampMs"))),
        _keyed(m, "ix", rules.received_arrival() & c("messageType").isin("MAPEM", "SPATEM"), [c("node")], c("arrivalMs")),
        _keyed(m, "sec", ((received & rules.small_payload()) | (rules.first_delivery() & rules.small_payload()))
               & c("arrivalMs").isNotNull(), [c("node"), (c("arrivalMs") / 1000).cast("long")], c("timestampMs"),
               bucketed=False),
    ]
    return reduce(DataFrame.unionByName, frames)


def _compare(key: tuple[Any, ...], frames: Iterator[Any], state: GroupState) -> Iterator[Any]:
    """applyInPandasWithState's function: one call of :func:`spark.stream_rules.advance`."""
    import pandas as pd  # type: ignore[import-untyped]  # noqa: PLC0415 - only in the Python worker (the spark extra)

    kind, name = key
    rows: list[dict[str, Any]] = []
    if not state.hasTimedOut:
        for frame in frames:
            rows += stream_rules.clean_rows(frame.drop(columns=[EVENT_TIME]).to_dict("records"))
    step = stream_rules.advance(kind, name, state.get[0] if state.exists else None, rows,
                                state.getCurrentWatermarkMs(), SETTINGS)
    if step.state is None:
        state.remove()
    else:
        state.update((json.dumps(step.state, separators=(",", ":")),))
        if step.timeout_ms is not None:
            state.setTimeoutTimestamp(step.timeout_ms)
    if step.findings:
        yield pd.DataFrame(step.findings, columns=_OUTPUT_COLUMNS).astype(object)


def compared_findings(m: DataFrame) -> DataFrame:
    """The findings of the rules comparing records (IP_128, shard gaps, IP_048/124/136, copies, IP_104, IP_013)."""
    return compared_rows(m).groupBy("kind", "key").applyInPandasWithState(
        _compare, _OUTPUT, "state string", "append", GroupStateTimeout.EventTimeTimeout)


def violations(messages: DataFrame) -> DataFrame:
    """Every finding of every rule, as ``validate`` writes them (``runId`` "stream")."""
    per_record = rules.all_violations(messages, rules.RECORD_RULES, each_once=False, carry=(EVENT_TIME,))
    per_record = per_record.dropDuplicatesWithinWatermark([*rules.FINDING_COLUMNS]).drop(EVENT_TIME, "requirement")
    m = messages.select(*rules.INPUT_COLUMNS, EVENT_TIME)
    twice = rules.violations(rules.logged_twice(m, keys=(EVENT_TIME,)), rules.logged_twice_checks())
    found = reduce(DataFrame.unionByName, [per_record, twice, compared_findings(m)])
    return found.select(F.lit("stream").alias("runId"), F.unix_millis(F.current_timestamp()).alias("runMs"),
                        *[(rules.requirement_of(F.col("rule")) if f.name == "requirement" else F.col(f.name))
                          .cast(f.dataType).alias(f.name) for f in tables.VIOLATIONS.fields[2:]])


def windowed_metrics(messages: DataFrame) -> DataFrame:
    first = (F.col("event") == "sent_message") & (F.coalesce(F.col("attempt"), F.lit(1)) == 1)
    latency = F.when(first, F.col("departureMs") - F.col("arrivalMs"))
    grouped = messages.groupBy(F.window(EVENT_TIME, WINDOW).alias("w"), "node", "event", "messageType")
    counted = grouped.agg(F.count(F.lit(1)).alias("records"), F.max(latency).alias("latencyMaxMs"),
                          F.avg(latency).alias("latencyAvgMs"),
                          F.count_if(latency >= rules.LATENCY_LIMIT_MS).alias("overLatency"))
    return counted.select(F.unix_millis(F.col("w.start")).alias("windowStartMs"),
                          F.unix_millis(F.col("w.end")).alias("windowEndMs"),
                          *[F.col(f.name) for f in tables.STREAM_METRICS.fields[2:]])


def start(spark: SparkSession, log_dir: str, output: str, *, trigger_seconds: float = 1.0,
          available_now: bool = False, max_files_per_trigger: int | None = None) -> list[StreamingQuery]:
    """Start the violations and metrics queries (resuming from their checkpoints)."""
    layout = Layout(output)
    messages = read_stream(spark, log_dir, max_files_per_trigger)
    queries = []
    for name, frame, path in (("violations", violations(messages), layout.stream_violations),
                              ("metrics", windowed_metrics(messages), layout.stream_metrics)):
        writer = (frame.writeStream.format("parquet").outputMode("append").queryName(f"audit_{name}")
                  .option("path", path).option("checkpointLocation", layout.checkpoint(name)))
        writer = writer.trigger(availableNow=True) if available_now else \
            writer.trigger(processingTime=f"{int(trigger_seconds * 1000)} milliseconds")
        queries.append(writer.start())
    return queries


def dropped_late(queries: list[StreamingQuery]) -> int:
    """Rows the stateful operators dropped as later than the watermark, over the queries' recent progress."""
    return sum(int(operator.get("numRowsDroppedByWatermark", 0)) for query in queries
               for progress in query.recentProgress for operator in progress.get("stateOperators", []))


def stop(queries: list[StreamingQuery], settle_s: float = 10.0) -> None:
    """Stop the queries, each between two micro-batches if its running one ends within ``settle_s``.
    Stopping in the middle of a batch loses nothing (the checkpoint runs it again on restart), but
    Spark logs the interrupted write as an ERROR with a Java stack trace, which reads as a crash."""
    deadline = time.monotonic() + settle_s
    for query in queries:
        while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.05)
        query.stop()


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    if len(args.input) != 1 or not os.path.isdir(args.input[0]):
        raise CliError(f"stream reads one log directory (its *.jsonl files), got {' '.join(args.input)!r}")
    queries = start(spark, args.input[0], args.output, trigger_seconds=args.trigger_seconds,
                    available_now=args.available_now, max_files_per_trigger=args.max_files_per_trigger)
    try:
        if args.available_now:
            for query in queries:
                query.awaitTermination()
        else:
            spark.streams.awaitAnyTermination(args.timeout)
    finally:
        stop(queries)
    late = dropped_late(queries)
    print(f"stream: {args.input[0]}/{STREAM_GLOB} -> {Layout(args.output).root}/stream"
          + (f" ({late} record rows later than the {LATENESS} watermark left out: validate checks them)" if late else ""))
    return 0
