"""The audit rules: each a spec requirement (IP_xxx) checked over the messages table in column expressions.

A rule turns the messages into *candidates*: one row per record (or group) it checked, with
``counted`` (counts as checked), ``violated`` and the finding's fields; violations are the violated
candidates, rule metrics count both per (rule, check). Per-record rules (:data:`RECORD_RULES`) also
run on a stream; the others compare records (windows, joins) and run in batch.

- tables 1-7 (IP_022/026/029/037/038/100/122/123/128/130/131/135): :mod:`spark.property_rules`
- IP_012: departure - arrival of a first delivery is at most 30 ms (a redelivery's time includes the
  earlier consumer's hold, so only attempt 1 counts; IP_012 is per message, measured per delivery)
- IP_013: in every second (per node) in which 5000 or more messages arrived, all of them were
  available (first delivery) within 1000 ms of the first arrival
  (times are whole milliseconds: a measured 30 ms / 1000 ms is accepted, one more is not)
- IP_033: no delivery after the message's expiry; expiries of undelivered messages accounted (info)
- IP_032: messages dropped because a source's buffer was full (warning: the message was lost)
- IP_016: rejected (malformed) messages, with their reason (counts by reason: group by ``observed``)
- IP_128: per shard (shardKey = publicationId#shardId) and consumer link, deliveries leave in the
  admission order (shardSeq); only strictly earlier departures are compared
- IP_048: DENM/IVIM/MAPEM/POIM-PA re-published at least every 9 min while valid: a publication seen
  again after more than 540 s was missing in between (the log cannot see validity otherwise)
- IP_104: a SPATEM only after a MAPEM of the same publisher for the same intersection (``id``)
- IP_124: consecutive CAMs of a publication 1 s to 120 s apart; IP_136: CPMs 1 s apart (+-10 %)
- AUDIT (facts, not requirements): redeliveries (attempt > 1 on a source), deliveries not accepted,
  duplicates (the same body re-published under the same publicationId), unroutable messages.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark import property_rules

REQUIREMENTS: dict[str, str] = {
    "IP_012": "A broker shall be able to route a single message with a payload size <500KB in <30ms, "
              "from message arrival (on broker target) to message availability (on broker source).",
    "IP_013": "A broker shall be able to route 5000 messages with a payload size <500KB in <1000ms.",
    "IP_016": "A broker should drop malformed AMQP messages that do not adhere to this specification "
              "and shall log the event.",
    "IP_022": "All mandatory fields of Table 1 shall be inside the AMQP application properties of every "
              "C-ITS message; optional fields as Table 1 defines them.",
    "IP_026": "All mandatory fields of Table 2 shall be inside the application properties of DENM messages.",
    "IP_029": "IVIM fields of Table 3, and comma separated string lists (',a,b,').",
    "IP_032": "A broker shall provide a buffer with a size of minimum 200 messages (a full buffer drops messages).",
    "IP_033": "An AMQP message TTL shall be the BI repetition interval x 1.2 (minimum 1 s); a broker can "
              "enforce TTL policies: no message is delivered after its expiry.",
    "IP_037": "Geolocation shall be based on quadtree: the quadTree property lists tiles of the digits 0-3.",
    "IP_038": "C-ITS actors shall publish AMQP messages with a minimum quadtree zoom level of 18 for the "
              "geographic reference locations.",
    "IP_048": "Each DENM, IVIM, MAPEM or POIM-PA shall be repeated on BI at least every 9 min while still valid.",
    "IP_100": "SPATEM/MAPEM (Table 4) and SREM/SSEM (Table 5) fields: id and name are comma separated lists.",
    "IP_104": "C-ITS actors shall publish SPATEM only after the corresponding MAPEM has been published.",
    "IP_122": "All mandatory fields of Table 6 shall be inside the application properties of CAM messages.",
    "IP_123": "Optional fields of Table 6 (CAM): vehicleRole is an integer 0-15.",
    "IP_124": "The frequency of CAM message distribution over BI shall be between 1 per second and 1 per 120 seconds.",
    "IP_128": "In-order delivery: messages with the same shardId are not delivered out of order "
              "(no shardId = shard 1).",
    "IP_130": "On a capability with shardCount > 1 a shardId <= shardCount is provided.",
    "IP_131": "Application properties beyond the specification shall be named custom-<namespace>-<name>.",
    "IP_135": "Optional fields of Table 7 (CPM): type is 'Vehicle' or 'RSU'.",
    "IP_136": "The frequency of CPM message distribution over BI should be 1 per second.",
    "AUDIT": "Accounting, not a requirement: what happened to messages (redeliveries, outcomes, "
             "duplicates, unroutable messages).",
}

#: Columns identifying the record a finding is about (from the messages table).
IDENTITY = ("node", "process", "event", "timestampMs", "messageId", "publicationId", "messageType",
            "publisher", "consumer", "file")
#: Columns of the messages table the rules read (the payload columns are never needed).
INPUT_COLUMNS = (*IDENTITY, "source", "publisherId", "shardKey", "shardSeq", "arrivalMs", "departureMs",
                 "settledMs", "attempt", "outcome", "bodySha256", "expiryMs", "reason",
                 "applicationProperties", "propertyKinds")

NINE_MINUTES_MS = 9 * 60 * 1000
REPEATED_TYPES = ("DENM", "IVIM", "MAPEM", "POIM-PA")


def candidates(rows: DataFrame, rule: str | Column, check: str, severity: str | Column, *, violated: Column,
               observed: Column, expected: str | Column, counted: Column | None = None,
               prop: Column | None = None) -> DataFrame:
    """The uniform candidate rows of one rule over ``rows``."""
    rule_col = F.lit(rule) if isinstance(rule, str) else rule
    requirement = F.lit(REQUIREMENTS[rule]) if isinstance(rule, str) else _requirement_of(rule_col)
    return rows.select(
        rule_col.alias("rule"), F.lit(check).alias("check"), requirement.alias("requirement"),
        (F.lit(severity) if isinstance(severity, str) else severity).alias("severity"),
        (F.lit(True) if counted is None else counted).alias("counted"), F.coalesce(violated, F.lit(False)).alias("violated"),
        *[F.col(name) for name in IDENTITY],
        (F.lit(None).cast("string") if prop is None else prop).alias("property"),
        observed.cast("string").alias("observed"),
        (F.lit(expected) if isinstance(expected, str) else expected).cast("string").alias("expected"),
    )


def _requirement_of(rule: Column) -> Column:
    return F.create_map(*[F.lit(x) for pair in REQUIREMENTS.items() for x in pair])[rule]


def _event(name: str) -> Column:
    return F.col("event") == name


def _first_delivery() -> Column:
    return _event("sent_message") & (F.coalesce(F.col("attempt"), F.lit(1)) == 1)


# --- per-record rules ------------------------------------------------------------------------------

def properties(m: DataFrame) -> DataFrame:
    """Tables 1-7 on every received message whose properties were logged (one row per finding)."""
    received = m.where(_event("received_message") & F.col("applicationProperties").isNotNull())
    found = received.select("*", F.explode(property_rules.findings(F.col("applicationProperties"),
                                                                    F.col("propertyKinds"))).alias("f"))
    return candidates(found, F.col("f.rule"), "properties", "error", counted=F.lit(False), violated=F.lit(True),
                      observed=F.col("f.observed"), expected=F.col("f.expected"), prop=F.col("f.property"))


def latency(m: DataFrame) -> DataFrame:
    rows = m.where(_first_delivery() & F.col("arrivalMs").isNotNull() & F.col("departureMs").isNotNull())
    took = F.col("departureMs") - F.col("arrivalMs")
    return candidates(rows, "IP_012", "latency", "error", violated=took > 30,
                      observed=F.concat(took.cast("string"), F.lit(" ms")), expected="<= 30 ms")


def delivered_after_expiry(m: DataFrame) -> DataFrame:
    rows = m.where(_event("sent_message") & F.col("expiryMs").isNotNull() & F.col("departureMs").isNotNull())
    late = F.col("departureMs") - F.col("expiryMs")
    return candidates(rows, "IP_033", "delivered_after_expiry", "error", violated=late > 0,
                      observed=F.concat(F.lit("delivered "), late.cast("string"), F.lit(" ms after expiry")),
                      expected="delivery before expiryMs")


def _accounted(m: DataFrame, rule: str, check: str, severity: str, event: str, expected: str,
               observed: Column, counted_event: str = "received_message") -> DataFrame:
    """Records of ``event`` (violations) among the received messages (checked)."""
    rows = m.where(_event(counted_event) | _event(event))
    return candidates(rows, rule, check, severity, counted=_event(counted_event), violated=_event(event),
                      observed=observed, expected=expected)


def expired(m: DataFrame) -> DataFrame:
    return _accounted(m, "IP_033", "expired_undelivered", "info", "expired_message", "delivered before expiry",
                      F.concat(F.lit("expired undelivered in "), F.coalesce(F.col("source"), F.lit("?"))))


def dropped(m: DataFrame) -> DataFrame:
    return _accounted(m, "IP_032", "dropped", "warning", "dropped_message", "kept until delivered or expired",
                      F.concat(F.lit("dropped from "), F.coalesce(F.col("source"), F.lit("?")), F.lit(": "),
                               F.coalesce(F.col("reason"), F.lit("?"))))


def unroutable(m: DataFrame) -> DataFrame:
    return _accounted(m, "AUDIT", "unroutable", "info", "unroutable_message", "taken by a source",
                      F.lit("no source took it"))


def rejected(m: DataFrame) -> DataFrame:
    rows = m.where(_event("received_message") | _event("rejected_message"))
    return candidates(rows, "IP_016", "rejected", "warning", violated=_event("rejected_message"),
                      observed=F.coalesce(F.col("reason"), F.lit("no reason logged")),
                      expected="a message that adheres to the profile")


def redelivery(m: DataFrame) -> DataFrame:
    rows = m.where(_event("sent_message"))
    attempt = F.coalesce(F.col("attempt"), F.lit(1))
    return candidates(rows, "AUDIT", "redelivery", "info", violated=attempt > 1,
                      observed=F.concat(F.lit("attempt "), attempt.cast("string"), F.lit(" on "),
                                        F.coalesce(F.col("source"), F.lit("?"))), expected="attempt 1")


def outcome(m: DataFrame) -> DataFrame:
    rows = m.where(_event("sent_message") & F.col("outcome").isNotNull())
    return candidates(rows, "AUDIT", "delivery_outcome", "info",
                      violated=~F.col("outcome").isin("accepted", "presettled"),
                      observed=F.col("outcome"), expected="accepted")


# --- rules over several records --------------------------------------------------------------------

def shard_order(m: DataFrame) -> DataFrame:
    rows = m.where(_first_delivery() & F.col("shardSeq").isNotNull() & F.col("departureMs").isNotNull())
    link = Window.partitionBy("node", "process", "source", "consumer", "shardKey").orderBy("departureMs")
    earlier = F.max("shardSeq").over(link.rangeBetween(Window.unboundedPreceding, -1))
    rows = rows.withColumn("earlier", earlier)
    return candidates(rows, "IP_128", "shard_order", "error", violated=F.col("shardSeq") < F.col("earlier"),
                      observed=F.concat(F.lit("shardSeq "), F.col("shardSeq").cast("string"), F.lit(" after "),
                                        F.col("earlier").cast("string"), F.lit(" on "), F.col("shardKey")),
                      expected="increasing shardSeq per shard and consumer")


def _received_sequence(m: DataFrame, types: Sequence[str]) -> DataFrame:
    """Received messages of ``types`` with the previous arrival of the same publication at the node."""
    rows = m.where(_event("received_message") & F.col("messageType").isin(*types)
                   & F.col("publicationId").isNotNull() & F.col("arrivalMs").isNotNull())
    publication = Window.partitionBy("node", "publicationId").orderBy("arrivalMs", "messageId")
    return rows.withColumn("gapMs", F.col("arrivalMs") - F.lag("arrivalMs").over(publication))


def _gap_rule(m: DataFrame, rule: str, check: str, severity: str, types: Sequence[str],
              low_ms: int, high_ms: int, expected: str) -> DataFrame:
    rows = _received_sequence(m, types).where(F.col("gapMs").isNotNull())
    gap = F.col("gapMs")
    return candidates(rows, rule, check, severity, violated=(gap < low_ms) | (gap > high_ms),
                      observed=F.concat(gap.cast("string"), F.lit(" ms since the previous one")), expected=expected)


def repetition(m: DataFrame) -> DataFrame:
    return _gap_rule(m, "IP_048", "repetition", "error", REPEATED_TYPES, 0, NINE_MINUTES_MS,
                     "repeated at least every 540000 ms")


def cam_rate(m: DataFrame) -> DataFrame:
    return _gap_rule(m, "IP_124", "cam_rate", "error", ("CAM",), 1000, 120_000, "1000 to 120000 ms apart")


def cpm_rate(m: DataFrame) -> DataFrame:
    return _gap_rule(m, "IP_136", "cpm_rate", "warning", ("CPM",), 900, 1100, "1000 ms apart (+-10 %)")


def duplicates(m: DataFrame) -> DataFrame:
    rows = m.where(_event("received_message") & F.col("bodySha256").isNotNull() & F.col("publicationId").isNotNull())
    same = Window.partitionBy("node", "publicationId", "bodySha256").orderBy("arrivalMs", "messageId")
    rows = rows.withColumn("copy", F.row_number().over(same)).withColumn("firstMs", F.first("arrivalMs").over(same))
    severity = F.when(F.col("messageType").isin(*REPEATED_TYPES), "info").otherwise("warning")
    return candidates(rows, "AUDIT", "duplicate", severity, violated=F.col("copy") > 1,
                      observed=F.concat(F.lit("copy "), F.col("copy").cast("string"), F.lit(", first arrived at "),
                                        F.col("firstMs").cast("string")), expected="one copy per body")


def _intersections(rows: DataFrame) -> DataFrame:
    ids = F.split(F.regexp_replace(F.coalesce(F.col("applicationProperties")["id"], F.lit("")), "^,|,$", ""), ",")
    return rows.withColumn("intersection", F.explode(ids))


def spatem_after_mapem(m: DataFrame) -> DataFrame:
    received = m.where(_event("received_message") & F.col("arrivalMs").isNotNull())
    keys = ["node", "publisherId", "intersection"]
    mapem = (_intersections(received.where(F.col("messageType") == "MAPEM"))
             .groupBy(*keys).agg(F.min("arrivalMs").alias("mapemMs")))
    spatem = received.where(F.col("messageType") == "SPATEM").withColumn("row", F.monotonically_increasing_id())
    joined = _intersections(spatem).join(mapem, keys, "left")
    early = F.coalesce(F.col("mapemMs") > F.col("arrivalMs"), F.lit(True))
    per_spatem = joined.groupBy("row").agg(*[F.first(name).alias(name) for name in IDENTITY],
                                           F.min(F.when(early, F.col("intersection"))).alias("early"))
    return candidates(per_spatem, "IP_104", "spatem_after_mapem", "error", violated=F.col("early").isNotNull(),
                      observed=F.concat(F.lit("SPATEM before any MAPEM of intersection '"), F.col("early"), F.lit("'")),
                      expected="a MAPEM of the same publisher and intersection earlier")


def bursts(m: DataFrame) -> DataFrame:
    second = (F.col("arrivalMs") / 1000).cast("long")
    arrived = (m.where(_event("received_message") & F.col("arrivalMs").isNotNull()).groupBy("node", second.alias("s"))
               .agg(F.count(F.lit(1)).alias("arrived"), F.min("arrivalMs").alias("firstMs")).where("arrived >= 5000"))
    routed = (m.where(_first_delivery() & F.col("arrivalMs").isNotNull()).groupBy("node", second.alias("s"))
              .agg(F.max("departureMs").alias("lastMs")))
    rows = arrived.join(routed, ["node", "s"], "left")
    took = F.col("lastMs") - F.col("firstMs")
    rows = rows.select("node", *[F.lit(None).cast(t).alias(c) for c, t in (
        ("process", "int"), ("event", "string"), ("messageId", "string"), ("publicationId", "string"),
        ("messageType", "string"), ("publisher", "string"), ("consumer", "string"), ("file", "string"))],
        F.col("firstMs").alias("timestampMs"), "arrived", "lastMs", "firstMs")
    return candidates(rows, "IP_013", "burst", "error", violated=took > 1000,
                      observed=F.concat(F.col("arrived").cast("string"), F.lit(" messages arrived in this second, "
                                        "the last available "), took.cast("string"), F.lit(" ms after the first")),
                      expected="<= 1000 ms for 5000 messages")


Rule = Callable[[DataFrame], DataFrame]

#: check -> (rule, severity) of every check but the table checks: metrics list them all, found or not.
CHECKS: dict[str, tuple[str, str]] = {
    "latency": ("IP_012", "error"), "delivered_after_expiry": ("IP_033", "error"),
    "expired_undelivered": ("IP_033", "info"), "dropped": ("IP_032", "warning"), "unroutable": ("AUDIT", "info"),
    "rejected": ("IP_016", "warning"), "redelivery": ("AUDIT", "info"), "delivery_outcome": ("AUDIT", "info"),
    "shard_order": ("IP_128", "error"), "repetition": ("IP_048", "error"), "cam_rate": ("IP_124", "error"),
    "cpm_rate": ("IP_136", "warning"), "duplicate": ("AUDIT", "info"), "spatem_after_mapem": ("IP_104", "error"),
    "burst": ("IP_013", "error"),
}


#: Rules over single records (also run by the stream job).
RECORD_RULES: tuple[Rule, ...] = (properties, latency, delivered_after_expiry, expired, dropped, unroutable,
                                  rejected, redelivery, outcome)
#: Rules comparing records (batch only).
ACROSS_RULES: tuple[Rule, ...] = (shard_order, repetition, cam_rate, cpm_rate, duplicates, spatem_after_mapem,
                                  bursts)


ALL_RULES = RECORD_RULES + ACROSS_RULES
#: check -> name of the rule function producing it
CHECK_RULES = {"latency": "latency", "delivered_after_expiry": "delivered_after_expiry", "expired_undelivered": "expired",
               "dropped": "dropped", "unroutable": "unroutable", "rejected": "rejected", "redelivery": "redelivery",
               "delivery_outcome": "outcome", "shard_order": "shard_order", "repetition": "repetition",
               "cam_rate": "cam_rate", "cpm_rate": "cpm_rate", "duplicate": "duplicates",
               "spatem_after_mapem": "spatem_after_mapem", "burst": "bursts"}


def all_candidates(messages: DataFrame, rules: Sequence[Rule] = ALL_RULES) -> DataFrame:
    """The union of every rule's candidates over ``messages`` (the messages table's columns)."""
    m = messages.select(*INPUT_COLUMNS)
    return reduce(DataFrame.unionByName, [rule(m) for rule in rules])
