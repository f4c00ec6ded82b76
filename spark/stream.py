"""``audit stream``: the per-record rules and windowed traffic metrics over the rotated log directory.

Structured Streaming reads ``<dir>/*.jsonl``: the node's writer renames a full log file to an
immutable ``<stem>-<UTC time>-<n>.jsonl`` (log contract v2), and the active file does not match
the glob, so the stream only ever sees complete files (Spark's file source reads a file once and
would skip lines appended later). Two queries, each with its own checkpoint under
``<output>/stream/checkpoints/``, write Parquet through Spark's file sink, which commits each
micro-batch exactly once: a restart resumes from the checkpoint with nothing lost or counted twice.

- ``stream/violations``: the findings of :data:`spark.rules.RECORD_RULES` (tables 1-7, IP_012,
  IP_033, IP_032, IP_016, accounting) in :data:`spark.tables.VIOLATIONS` (``runId`` "stream",
  ``runMs`` the micro-batch time). Rules that compare records (order, rates, repetition) need
  the whole history and run in ``validate``.
- ``stream/metrics``: per 1-minute event-time window, node, event and messageType, the record
  count and first-delivery latency (max, mean, over 30 ms); a window is written once the
  watermark (2 minutes behind the newest record) has passed it.
"""
from __future__ import annotations

import argparse
import os
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from interchange.ground.errors import CliError
from spark import parse, rules, tables
from spark.ingest import LINE_SEPARATOR, not_blank
from spark.tables import Layout

WINDOW = "1 minute"
WATERMARK = "2 minutes"
STREAM_GLOB = "*.jsonl"


def read_stream(spark: SparkSession, log_dir: str, max_files_per_trigger: int | None = None) -> DataFrame:
    """Message records of every new ``*.jsonl`` file in ``log_dir``."""
    reader = spark.readStream.format("text").option("lineSep", LINE_SEPARATOR)
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    lines = (reader.load(os.path.join(log_dir, STREAM_GLOB))
             .select(F.col("value"), F.col("_metadata.file_path").alias("file"))
             .where(not_blank(F.col("value"))))
    return parse.messages(parse.parse(lines))


def violations(messages: DataFrame) -> DataFrame:
    found = rules.all_violations(messages, rules.RECORD_RULES, each_once=False)
    return found.select(F.lit("stream").alias("runId"), F.unix_millis(F.current_timestamp()).alias("runMs"),
                        *[F.col(f.name) for f in tables.VIOLATIONS.fields[2:]])


def windowed_metrics(messages: DataFrame) -> DataFrame:
    first = (F.col("event") == "sent_message") & (F.coalesce(F.col("attempt"), F.lit(1)) == 1)
    latency = F.when(first, F.col("departureMs") - F.col("arrivalMs"))
    timed = messages.withColumn("eventTime", F.timestamp_millis(F.col("timestampMs"))).withWatermark("eventTime", WATERMARK)
    grouped = timed.groupBy(F.window("eventTime", WINDOW).alias("w"), "node", "event", "messageType")
    counted = grouped.agg(F.count(F.lit(1)).alias("records"), F.max(latency).alias("latencyMaxMs"),
                          F.avg(latency).alias("latencyAvgMs"), F.count_if(latency > 30).alias("overLatency"))
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
    print(f"stream: {args.input[0]}/{STREAM_GLOB} -> {Layout(args.output).root}/stream")
    return 0
