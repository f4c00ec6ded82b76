"""``audit replay``: a slice of the log published again through a node's Basic Interface.

    interchange audit replay --input LOGS...|INGESTED_DIR [--from T] [--until T] [--node N]
        [--publisher CN] [--publisher-id ID] [--message-type T] [--publication-id ID]
        (--broker HOST:PORT --server-name NAME (--identity DIR | --pki DIR --cn CN) | --dry-run)
        [--speed X | --fast] [--target ADDRESS] [--json] [--output SUMMARY.json]

Spark selects the ``received_message`` records of the slice (from JSON-lines logs, read with the
explicit schema of :mod:`spark.parse`, or from an ``ingest`` output's ``messages`` table) and, when
the slice has SPATEM, the latest MAPEM of their intersections logged before it (IP_104). Only the
slice goes to the driver, which publishes it as a C-ITS actor (:mod:`spark.replay_publish`:
mutual TLS 1.3, SASL EXTERNAL) in the order and timing of :mod:`spark.replay_plan`, byte-exact
from ``rawMessageHex`` when logged. The summary (sent / accepted / rejected, with the broker's
reasons) is printed as text or JSON. Exit status: 0 when every planned message was accepted (or
listed, with ``--dry-run``) and none skipped, 1 otherwise, 2 when the replay could not run: a
``--from`` not before ``--until`` is refused before anything is read, and a slice that selects
nothing says what was searched and what the log holds (nodes, publishers, time span) without
connecting.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from certs.tls import TlsFiles, client_context
from interchange.ground.errors import CliError
from interchange.ground.logformat import iso_ms
from spark import ingest, parse
from spark.replay_args import FILTERS, check_range
from spark.replay_plan import LoggedMessage, build_plan, describe
from spark.replay_publish import Endpoint, ReplayError, ReplaySummary, publish, summary_of
from spark.tables import Layout

_COLUMNS = ("messageId", "node", "process", "arrivalMs", "address", "publisher", "messageType", "publicationId",
            "shardKey", "rawMessageHex", "properties", "kinds", "bodyContentHex", "expiryMs", "expirySource")


def received_messages(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """Every ``received_message`` of the logs (or of an ingest output's messages table)."""
    if len(inputs) == 1 and Layout(inputs[0]).is_ingested():
        messages = ingest.read_messages(spark, Layout(inputs[0]).messages)
    else:
        messages = parse.messages(ingest.read_records(spark, inputs))
    return (messages.where(F.col("event") == "received_message")
            .withColumn("arrivalMs", F.coalesce(F.col("arrivalMs"), F.col("timestampMs"))))


def slice_condition(args: argparse.Namespace) -> Column:
    condition = F.lit(True)
    if args.start is not None:
        condition &= F.col("arrivalMs") >= args.start
    if args.until is not None:
        condition &= F.col("arrivalMs") < args.until
    for option, column in FILTERS.items():
        values = getattr(args, option)
        if values:
            condition &= F.col(column).isin(*values)
    return condition


def earlier_mapems(received: DataFrame, args: argparse.Namespace, spatem_publishers: list[str],
                   before_ms: int) -> DataFrame:
    """The latest MAPEM of each (publisherId, intersection id) logged before ``before_ms`` (IP_104)."""
    mapems = received.where((F.col("messageType") == "MAPEM") & (F.col("arrivalMs") < before_ms)
                            & F.col("publisherId").isin(*spatem_publishers))
    if args.node:
        mapems = mapems.where(F.col("node").isin(*args.node))
    per_id = mapems.withColumn("intersection", F.explode(F.split(F.col("standardProperties")["id"], ",")))
    latest = Window.partitionBy("publisherId", "intersection").orderBy(F.col("arrivalMs").desc(),
                                                                       F.col("messageId").desc())
    return (per_id.where(F.col("intersection") != "").withColumn("rank", F.row_number().over(latest))
            .where(F.col("rank") == 1).dropDuplicates(["messageId"]))


def logged(row: Row) -> LoggedMessage:
    return LoggedMessage(
        message_id=row["messageId"], node=row["node"], arrival_ms=row["arrivalMs"], address=row["address"],
        process=row["process"], publisher=row["publisher"], message_type=row["messageType"],
        publication_id=row["publicationId"], shard_key=row["shardKey"], raw_hex=row["rawMessageHex"],
        properties=row["properties"], kinds=row["kinds"], body_hex=row["bodyContentHex"],
        expiry_ms=row["expiryMs"], expiry_source=row["expirySource"])


def collect(frame: DataFrame, limit: int | None = None) -> list[LoggedMessage]:
    """The rows to the driver (the slice is what the driver publishes; the plan orders it)."""
    rows = frame.withColumns({"properties": parse.all_properties(), "kinds": parse.all_properties(kinds=True)}).select(
        *_COLUMNS)
    if limit is not None:  # the first by arrival: one take-ordered job, no global sort
        rows = rows.orderBy("arrivalMs", "messageId").limit(limit)
    return [logged(row) for row in rows.collect()]


def select(spark: SparkSession, args: argparse.Namespace) -> tuple[list[LoggedMessage], list[LoggedMessage]]:
    """(the slice, the MAPEMs logged before it that its SPATEMs need)."""
    received = received_messages(spark, args.input)
    chosen = collect(received.where(slice_condition(args)), args.limit)
    spatems = [m for m in chosen if m.message_type == "SPATEM" and m.properties]
    if not spatems:
        return chosen, []
    publishers = sorted({str(m.properties["publisherId"]) for m in spatems if m.properties
                         and m.properties.get("publisherId")})
    context = collect(earlier_mapems(received, args, publishers, min(m.arrival_ms for m in chosen)))
    return chosen, context


def endpoint(args: argparse.Namespace) -> Endpoint:
    host, _, port = (args.broker or "").rpartition(":")
    if not host or not port.isdigit():
        raise CliError(f"--broker: expected HOST:PORT, got {args.broker!r}")
    try:
        if args.identity:
            files = TlsFiles.from_identity_dir(args.identity, trust_bundle=args.trust)
        elif args.pki and args.cn:
            files = TlsFiles.from_pki(args.pki, args.cn, with_crls=False)
        else:
            raise CliError("give the actor's certificate: --identity DIR, or --pki DIR with --cn CN")
        files.check()
        context = client_context(files)
    except (FileNotFoundError, KeyError, ValueError, OSError) as exc:
        raise CliError(f"the actor's TLS files: {exc}") from None
    return Endpoint(host.strip("[]"), int(port), context, args.server_name or host, timeout=args.timeout)


def searched(spark: SparkSession, args: argparse.Namespace) -> str:
    """What the log holds and what was asked for, for an empty selection's message."""
    received = received_messages(spark, args.input)
    row = received.agg(F.min("arrivalMs").alias("first"), F.max("arrivalMs").alias("last"),
                       F.count(F.lit(1)).alias("n"), F.array_sort(F.collect_set("node")).alias("nodes"),
                       F.array_sort(F.collect_set("publisher")).alias("publishers")).collect()[0]
    asked = [f"--from {iso_ms(args.start)}" if args.start is not None else "",
             f"--until {iso_ms(args.until)}" if args.until is not None else ""]
    asked += [f"--{option.replace('_', '-')} {','.join(getattr(args, option))}" for option in FILTERS
              if getattr(args, option)]
    if not row["n"]:
        held = "the log has no received_message records (message logging was off?)"
    else:
        held = (f"the log has {row['n']} received messages from {iso_ms(row['first'])} to {iso_ms(row['last'])}, "
                f"nodes {', '.join(row['nodes'])}, publishers {', '.join(row['publishers'][:20])}"
                + (" ..." if len(row["publishers"]) > 20 else ""))
    return f"no message selected by {' '.join(a for a in asked if a) or 'the slice'}: {held}"


def replay(spark: SparkSession, args: argparse.Namespace) -> ReplaySummary:
    speed = None if args.fast else args.speed
    chosen, context = select(spark, args)
    if not chosen:  # before connecting: an empty slice is a question answered wrongly, not a replay
        raise CliError(searched(spark, args))
    plan = build_plan(chosen, speed, args.target, context)
    summary = summary_of(plan, len(chosen), speed, args.dry_run)
    if args.dry_run:
        if not args.json:
            for planned in plan.messages:
                print(json.dumps(describe(planned), separators=(",", ":")))
        return summary
    try:
        return asyncio.run(publish(plan, endpoint(args), summary))
    except ReplayError as exc:
        raise CliError(f"replay: {exc}") from None


def exit_status(summary: ReplaySummary) -> int:
    if summary.skipped:
        return 1
    if summary.dryRun:
        return 0
    return 0 if summary.accepted == summary.planned else 1


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    check_range(args)  # the command line did already; a caller of run() too
    if not args.dry_run and not args.broker:
        raise CliError("replay: give --broker HOST:PORT (and the actor's certificate), or --dry-run")
    summary = replay(spark, args)
    if args.output:
        Path(args.output).write_text(summary.model_dump_json(indent=2) + "\n", encoding="utf-8")
    print(summary.model_dump_json(indent=2) if args.json else summary.text(), file=sys.stdout)
    return exit_status(summary)
