"""``audit match``: what a subscription with a selector would have received in a period (a what-if).

    interchange audit match --selector "messageType = 'DENM' AND quadTree LIKE '%,1202%'" --input audit/
        [--from T] [--until T] [--examples 3] [--json] [--output SUMMARY.json]

The selector is the broker's (:mod:`jms_selectors`: the same dialect and the same parse errors,
exit 2) compiled to a Spark column (:mod:`spark.selector_sql`) and evaluated on the logged
application properties of every ``received_message`` of the period (arrivals at or after
``--from``, before ``--until``): the messages the node admitted, which a consumer attached with
that selector to a source of every message would have been offered. Printed per message type,
publisher and hour (UTC), with the first messages of each as examples; received messages whose
properties were not logged (property logging off) cannot be evaluated and are counted apart.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

import jms_selectors
from interchange.ground.errors import CliError
from interchange.ground.logformat import iso_ms
from spark import ingest, parse, selector_sql
from spark.replay_args import check_range
from spark.report import in_period
from spark.tables import Layout

HOUR_MS = 3_600_000


@dataclass
class Group:
    message_type: str | None
    publisher: str | None
    hour: str
    messages: int
    examples: list[str]


@dataclass
class MatchSummary:
    selector: str
    period: tuple[str | None, str | None]
    received: int  #: received messages in the period
    evaluated: int  #: of them, with their properties logged
    matched: int
    groups: list[Group] = field(default_factory=list)

    def text(self) -> str:
        lines = [f"selector: {self.selector}",
                 f"period: {self.period[0] or 'start of the log'} to {self.period[1] or 'end of the log'}",
                 f"{self.matched} of {self.evaluated} received messages match"
                 + (f" ({self.received - self.evaluated} more without logged properties not evaluated)"
                    if self.received > self.evaluated else "")]
        lines.append(f"{'messageType':12} {'publisher':20} {'hour (UTC)':17} {'messages':>9}  examples")
        lines += [f"{g.message_type or '-':12} {g.publisher or '-':20} {g.hour:17} {g.messages:>9}  {', '.join(g.examples)}"
                  for g in self.groups]
        return "\n".join(lines)


def received(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """Every received_message of an ingest output's messages table or of JSON-lines logs."""
    if len(inputs) == 1 and Layout(inputs[0]).is_ingested():
        messages = ingest.read_messages(spark, Layout(inputs[0]).messages)
    else:
        messages = parse.messages(ingest.read_records(spark, inputs))
    return (messages.where(F.col("event") == "received_message")
            .withColumn("arrivalMs", F.coalesce(F.col("arrivalMs"), F.col("timestampMs"))))


def match(spark: SparkSession, inputs: Sequence[str], selector: str, period: tuple[int | None, int | None] = (None, None),
          examples: int = 3) -> MatchSummary:
    try:
        condition = selector_sql.matches(selector)
    except jms_selectors.SelectorError as exc:
        raise CliError(f"--selector: {exc}") from None
    chosen = in_period(received(spark, inputs), period, "arrivalMs").withColumn(
        "evaluated", F.col("otherProperties").isNotNull()).withColumn(  # null: no properties logged
        "matched", F.col("evaluated") & condition).withColumn(
        "hour", (F.floor(F.col("arrivalMs") / HOUR_MS) * HOUR_MS).cast("long")).persist()
    try:
        totals = chosen.agg(F.count(F.lit(1)).alias("received"), F.count_if("evaluated").alias("evaluated"),
                            F.count_if("matched").alias("matched")).collect()[0]
        hit = chosen.where("matched")
        keys = ["messageType", "publisher", "hour"]
        counted = {tuple(r[k] for k in keys): int(r["n"]) for r in hit.groupBy(*keys).agg(F.count(F.lit(1)).alias("n")).collect()}
        first = Window.partitionBy(*keys).orderBy("arrivalMs", "messageId")
        shown: dict[tuple[object, ...], list[str]] = {}
        for r in (hit.withColumn("_n", F.row_number().over(first)).where(F.col("_n") <= examples)
                  .orderBy(*keys, "_n").collect()):
            shown.setdefault(tuple(r[k] for k in keys), []).append(str(r["messageId"]))
    finally:
        chosen.unpersist()
    groups = [Group(key[0], key[1], iso_ms(int(str(key[2])))[:13] + ":00Z", n, shown.get(key, []))
              for key, n in sorted(counted.items(), key=lambda item: (str(item[0][2]), str(item[0][0]), str(item[0][1])))]
    start, until = period
    return MatchSummary(selector, (iso_ms(start) if start is not None else None, iso_ms(until) if until is not None else None),
                        int(totals["received"]), int(totals["evaluated"]), int(totals["matched"]), groups)


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    check_range(args)
    summary = match(spark, args.input, args.selector, (args.start, args.until), args.examples)
    if args.output:
        Path(args.output).write_text(json.dumps(asdict(summary), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(asdict(summary), indent=2) if args.json else summary.text(), file=sys.stdout)
    return 0
