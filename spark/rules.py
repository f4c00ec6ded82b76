"""The audit rules: each a spec requirement (IP_xxx) checked over the messages table in column expressions.

A rule is a frame and its checks. The frame is the rows it checks: the message records for the
per-record rules and the received messages with properties for tables 1-7 (:data:`RECORD_RULES`,
also run by the stream job; apart, so that only the table checks read the columns of the
properties and each pass compiles to smaller code), or rows derived from
them (a window over a publication's arrivals, per-second counts, ...) for the rules comparing
records. Each check names the rows it checks (``scope``: the rule metrics' "checked"), those that
fail (``violated``) and the findings of a failing row. :func:`violations` runs every check of one
frame in one pass: it counts the checked rows while they stream by (an observation), keeps only
the failing rows (a cheap boolean test first: most records are valid) and builds findings on those
alone. Rules that share a frame (repetition, CAM and CPM rates, duplicates) share its sort.

A validate (:func:`all_violations` with ``walked=True``) runs the frames of :data:`WALKED` (the per-record rules,
records logged twice, shard order, shard gaps, a publication's gaps and copies, IP_104) not as Spark frames but as one Java walk
(``spark/jvm/src/croads/validate/CrossWalk.java``, ``RecordChecks.java``): every record is read once and
shuffled once, as one row per role it has (of its publication, of its shard, of its link; a record with
none as a row of its own), each by the hash of its role's window partition, and Spark's sort (which spills)
gives each partition's rows in its window's order: the walk keeps only the previous row's state of each
partition, never a partition's rows, however long a publication is. Re-published copies need a second order
(by body): the publication's walk hands its kept arrivals with a body on, sorted again within the same
partition. Records logged twice are counted as the walk passes each record's own row: the copies of a record
(equal in every column but the file and what no rule compares) have one role and one place in its order, so they
come in one short run of the sort (``LoggedTwice.java``). The findings are the frames' own, text for text (tests
hold the two together on records the broker never logs together, on a publication longer than the tests' sorts
hold, and with every partition under one hash); the checked rows are counted in the walk. The frames here stay
the reference, and the stream's per-record pass (which carries an event time) runs them.

- tables 1-7 (IP_022/026/029/037/038/100/103/122/123/128/130/131/135): :mod:`spark.property_rules`
- IP_012: departure - arrival of a first delivery of a message under 500 KB is under 30 ms ("in
  <30ms": 30 ms is a finding; a redelivery's time includes the earlier consumer's hold, so only
  attempt 1 counts; IP_012 is per message, measured per delivery)
- IP_013: in every second (per node) in which 5000 or more messages under 500 KB arrived, all of
  them were available (first delivery) less than 1000 ms after the first arrival
- IP_033: no delivery after the message's expiry (its TTL); expiries of undelivered messages accounted (info)
- IP_032: messages dropped because a source's buffer was full (warning: the message was lost); a
  drop for another reason (loop, hop limit, duplicate import, source deleted) is accounting
- IP_016: rejected (malformed) messages, with their reason (counts by reason: group by ``observed``)
- IP_128: per shard and consumer link, deliveries leave in the admission order (shardSeq) of one
  admission sequence (node, process, boot: the messageId's prefix; the broker numbers from 1 at
  every start); only strictly earlier departures are compared
- IP_048: DENM/IVIM/MAPEM/POIM-PA re-published at least every 9 min while valid: a publication seen
  again after more than 540 s was missing in between (the log cannot see validity otherwise)
- IP_104: a SPATEM only after a MAPEM (any publisher) of the same intersection (``id``) at the node
- IP_124: consecutive CAMs of a publication 1 s to 120 s apart; IP_136: CPMs 1 s apart (+-10 %)
  (the types and bounds of these three are the profile's repetitions, :data:`GAPS`)
- AUDIT (facts, not requirements): redeliveries, deliveries not accepted, re-published copies (the
  same body under the same publicationId with another messageId), records logged twice (the same
  record, twice in the log), gaps in a shard's admission sequence (admitted messages missing from
  the log, with the missing range), unroutable messages, other drops.

A record logged twice is checked once: the findings of one record are kept once (from the first
file), and the checks comparing records skip a copy of the same message.

Lambdas in generated code are SQL text with fixed names (``F.expr("filter(xs, i -> ...)")``), never
Python lambdas: a Python lambda gets a fresh name each time the rules are built (``x_8``, then
``x_12``), the name is in the generated Java, and every later validate in a JVM then missed Spark's
cache of compiled code and compiled and JIT-compiled its largest stage again (~4 s of CPU per run at
2M lines). (:func:`by_interpreter`'s lambda is never compiled.)
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial, reduce
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, Window
from pyspark.sql import functions as F

from interchange.ground import profile
from spark import property_rules

#: The accounting checks' "requirement": what they account for (no requirement of the profile).
AUDIT_TEXT = ("Accounting, not a requirement: what happened to messages and to their records (redeliveries, "
              "delivery outcomes, copies re-published with the same body, records logged twice, admitted messages "
              "missing from the log (gaps in a shard's admission sequence), unroutable messages, drops other than "
              "a full buffer).")
#: Requirement -> its sentence (the profile's), and AUDIT's.
REQUIREMENTS: dict[str, str] = {**profile.REQUIREMENTS, "AUDIT": AUDIT_TEXT}

#: Columns identifying the record a finding is about (from the messages table).
IDENTITY = ("node", "process", "event", "timestampMs", "messageId", "publicationId", "messageType",
            "publisher", "consumer", "file")
#: Columns of the messages table the rules read (the payload columns are never needed).
INPUT_COLUMNS = (*IDENTITY, "source", "address", "publisherId", "shardKey", "shardSeq", "arrivalMs", "departureMs",
                 "settledMs", "attempt", "outcome", "size", "bodySha256", "expiryMs", "reason",
                 *property_rules.COLUMNS)
#: The columns that make one record (a record logged twice has the same values in all of them): what the broker
#: writes once per record, and what places a record's rows in the walk (publicationId, shardKey, shardSeq,
#: arrivalMs, departureMs), so that the walk and this frame find the same copies whatever a line holds.
RECORD_KEY = ("node", "messageId", "event", "source", "consumer", "attempt", "timestampMs", "publicationId",
              "shardKey", "shardSeq", "arrivalMs", "departureMs")

#: The types whose publications repeat a message while it is valid (IP_048): their re-published copies are expected.
REPEATED_TYPES: tuple[str, ...] = tuple(t.value for t in profile.REPEATED_WHILE_VALID)
#: IP_012/IP_013: "a payload size <500KB". The log has the encoded message's size, which is larger:
#: a message under this size has a payload under it (a larger one is not checked).
PAYLOAD_LIMIT = 500_000
#: IP_012: "in <30ms"; IP_013: "in <1000ms" (times are whole ms: 30 ms and 1000 ms are findings).
LATENCY_LIMIT_MS, BURST_LIMIT_MS, BURST_MESSAGES = 30, 1000, 5000


#: One finding of a failing row (the :data:`spark.tables.VIOLATIONS` fields a check decides).
FINDING = "struct<rule:string,check:string,severity:string,property:string,observed:string,expected:string>"


@dataclass(frozen=True)
class Check:
    """One check over a frame's rows: which rows it checks, which fail, and a failing row's findings."""

    check: str
    #: the rules its metrics are kept under: its requirement, or every requirement of the table checks
    metric_rules: tuple[str, ...]
    scope: Column  # the rows it checks
    violated: Column  # the rows with findings (an expiry is a finding about a message checked when received)
    findings: Column  # array<FINDING>, evaluated on violating rows only
    #: the rows it checks as a predicate over the message records, when its frame keeps them as they
    #: are: the pass over all records then counts them (see :func:`counts`)
    records_scope: Column | None = None
    #: the words of its requirement's sentence it tests (a test holds each check against them)
    quote: str = ""


def finding(rule: str, check: str, severity: str | Column, observed: Column, expected: str | Column,
            prop: Column | None = None) -> Column:
    """array<FINDING> with one finding."""
    return F.array(F.struct(
        F.lit(rule).alias("rule"), F.lit(check).alias("check"),
        (F.lit(severity) if isinstance(severity, str) else severity).alias("severity"),
        (F.lit(None).cast("string") if prop is None else prop).alias("property"),
        observed.cast("string").alias("observed"),
        (F.lit(expected) if isinstance(expected, str) else expected).cast("string").alias("expected")))


def simple(rule: str, check: str, severity: str | Column, *, scope: Column, violated: Column, observed: Column,
           expected: str | Column, records_scope: Column | None = None, quote: str = "") -> Check:
    """A check with one finding per row of ``scope`` that is ``violated``."""
    return Check(check, (rule,), scope, scope & violated, finding(rule, check, severity, observed, expected),
                 records_scope, quote)


#: A frame: the message records -> the rows a rule checks.
Frame = Callable[[DataFrame], DataFrame]


@dataclass(frozen=True)
class Rule:
    """A named rule: the frame of rows it checks (rules with the same frame share one pass) and its checks."""

    name: str
    frame: Frame
    checks: Callable[[], list[Check]]


def violations(rows: DataFrame, checks: Sequence[Check], observation: Observation | None = None,
               counted: Sequence[tuple[str, Column]] = (), carry: Sequence[str] = ()) -> DataFrame:
    """One row per finding of ``checks`` over ``rows``; ``observation`` counts the ``counted`` (check, scope).

    Columns: the :data:`IDENTITY` columns, then ``rule, check, severity, property, observed,
    expected`` (:func:`all_violations` adds ``requirement``). The counts are taken as the rows
    stream by (no second pass); the findings are built only for rows that fail a check, by Spark's
    expression interpreter (:func:`by_interpreter`): the test every row takes is generated Java, the
    findings of the few failing rows were most of the largest generated class of a validate (the
    frames' findings in one stage, ~180 of its ~270 KB of Java at every run's first compile).
    """
    if observation is not None and counted:
        rows = rows.observe(observation, *[F.count_if(scope).alias(check) for check, scope in counted])
    failing = [F.coalesce(c.violated, F.lit(False)) for c in checks]
    none = F.array().cast(f"array<{FINDING}>")
    # one check: every row kept fails it, so its findings are built without its test again (for the
    # table checks the interpreter would evaluate the whole of tables 1-7 twice on each failing row)
    found = checks[0].findings if len(checks) == 1 else F.concat(
        *[F.when(fails, c.findings).otherwise(none) for fails, c in zip(failing, checks)])
    return rows.where(reduce(Column.__or__, failing)).select(*IDENTITY, *carry, F.inline(by_interpreter(found)))


def by_interpreter(value: Column) -> Column:
    """``value`` evaluated by Spark's expression interpreter, row by row, never compiled (see :func:`interpreted`).

    The lambda's parameter names are fresh per call: they are in the plan, not in any generated Java.
    """
    return F.zip_with(F.array(F.lit(0)), F.array(F.lit(0)), lambda _left, _right: value)[0]


def requirement_of(rule: Column) -> Column:
    return F.create_map(*[F.lit(x) for pair in REQUIREMENTS.items() for x in pair])[rule]


def _event(name: str) -> Column:
    return F.col("event") == name


def first_delivery() -> Column:
    return _event("sent_message") & (F.coalesce(F.col("attempt"), F.lit(1)) == 1)


def small_payload() -> Column:
    """A message under IP_012/IP_013's payload size (a record without its size counts as one)."""
    return F.coalesce(F.col("size") < PAYLOAD_LIMIT, F.lit(True))


def admission() -> Column:
    """The admission sequence of a message: ``<node>/<process>/<bootMs>`` of its messageId (null without one)."""
    return F.nullif(F.regexp_extract(F.col("messageId"), r"^(.+)/[0-9]+$", 1), F.lit(""))


# --- per-record rules: the frame is the message records ---------------------------------------------

def records(m: DataFrame) -> DataFrame:
    """Every record, without the values and kinds of the properties (only the table checks read them;
    the other properties' map tells whether the properties were logged, for :func:`counts`)."""
    return m.drop(property_rules.VALUES, property_rules.KINDS)


def _properties_logged() -> Column:
    return _event("received_message") & F.col(property_rules.OTHERS).isNotNull()


def received_properties(m: DataFrame) -> DataFrame:
    """The received messages whose properties were logged (the rows the table checks check); registers the
    table checks' Java function in ``m``'s session."""
    property_rules.RULES.register(m.sparkSession)
    return m.where(_properties_logged())


def _properties() -> list[Check]:
    """Tables 1-7 on every received message whose properties were logged (one finding per problem).

    One Java function of the profile's tables as data (:data:`property_rules.FUNCTION`), not their SQL: no
    29 KB of SQL to parse and analyse per validate, no 231 KB generated class to compile per JVM. The test
    every row takes is its findings being empty; the findings of a failing row are taken again (few rows).
    """
    call = f"{property_rules.FUNCTION}({property_rules.FUNCTION_ARGUMENTS})"
    found = F.expr(f"transform({call}, f -> named_struct('rule', f.rule, 'check', 'properties', 'severity', 'error', "
                   "'property', f.property, 'observed', f.observed, 'expected', f.expected))")
    return [Check("properties", property_rules.REQUIREMENTS, F.lit(True), F.expr(f"size({call}) > 0"), found,
                  records_scope=_properties_logged())]


def interpreted(sql: str) -> str:
    """The SQL expression ``sql`` evaluated by Spark's expression interpreter instead of generated Java.

    For expressions only the rare failing rows need (the findings of tables 1-7: ~12,500 lines of
    Java, a 56 KB method). ``zip_with`` has no code generation (a CodegenFallback expression), so
    what its lambda returns is evaluated row by row without compiling; the operator holding it
    leaves whole-stage code generation, which keeps the cheap test that runs on every row small
    for Janino and for HotSpot's JIT (on 2 cores C2 compiling one 12 KB method four times took
    ~50 s of a validate's CPU).
    """
    return f"zip_with(array(0), array(0), (_left, _right) -> {sql})[0]"


def _latency() -> list[Check]:
    took = F.col("departureMs") - F.col("arrivalMs")
    return [simple("IP_012", "latency", "error",
                   scope=first_delivery() & F.col("arrivalMs").isNotNull() & F.col("departureMs").isNotNull()
                   & small_payload(),
                   violated=took >= LATENCY_LIMIT_MS, observed=F.concat(took.cast("string"), F.lit(" ms")),
                   expected=f"< {LATENCY_LIMIT_MS} ms", quote="in <30ms")]


def _delivered_after_expiry() -> list[Check]:
    late = F.col("departureMs") - F.col("expiryMs")
    return [simple("IP_033", "delivered_after_expiry", "error",
                   scope=_event("sent_message") & F.col("expiryMs").isNotNull() & F.col("departureMs").isNotNull(),
                   violated=late > 0, expected="delivery before expiryMs",
                   observed=F.concat(F.lit("delivered "), late.cast("string"), F.lit(" ms after expiry")),
                   quote="TTL")]


def _accounted(rule: str, check: str, severity: str, violated: Column, expected: str, observed: Column,
               quote: str, counted: Column | None = None) -> list[Check]:
    """Records of an event (``violated``) accounted among the received messages (``counted``: checked)."""
    scope = _event("received_message") if counted is None else counted
    return [Check(check, (rule,), scope, violated, finding(rule, check, severity, observed, expected), quote=quote)]


def _source() -> Column:
    return F.coalesce(F.col("source"), F.lit("?"))


def _expired() -> list[Check]:
    return _accounted("IP_033", "expired_undelivered", "info", _event("expired_message"), "delivered before expiry",
                      F.concat(F.lit("expired undelivered in "), _source()), "TTL")


#: The drop reason IP_032 is about (spark never reads the broker's code: the log contract's name).
BUFFER_FULL = "buffer_full"


def _dropped() -> list[Check]:
    full = _event("dropped_message") & (F.coalesce(F.col("reason"), F.lit("?")) == BUFFER_FULL)
    other = _event("dropped_message") & ~full
    observed = F.concat(F.lit("dropped from "), _source(), F.lit(": "), F.coalesce(F.col("reason"), F.lit("?")))
    return (_accounted("IP_032", "dropped", "warning", full, "kept until delivered or expired", observed, "buffer")
            + _accounted("AUDIT", "discarded", "info", other, "delivered or expired", observed, "drops other than"))


def _unroutable() -> list[Check]:
    return _accounted("AUDIT", "unroutable", "info", _event("unroutable_message"), "taken by a source",
                      F.lit("no source took it"), "unroutable messages")


def _rejected() -> list[Check]:
    # checked: the received and the rejected messages (every message that reached the node)
    return _accounted("IP_016", "rejected", "warning", _event("rejected_message"),
                      "a message that adheres to the profile", F.coalesce(F.col("reason"), F.lit("no reason logged")),
                      "drop malformed AMQP messages", counted=_event("received_message") | _event("rejected_message"))


def _redelivery() -> list[Check]:
    attempt = F.coalesce(F.col("attempt"), F.lit(1))
    return [simple("AUDIT", "redelivery", "info", scope=_event("sent_message"), violated=attempt > 1,
                   observed=F.concat(F.lit("attempt "), attempt.cast("string"), F.lit(" on "), _source()),
                   expected="attempt 1", quote="redeliveries")]


def _outcome() -> list[Check]:
    return [simple("AUDIT", "delivery_outcome", "info", scope=_event("sent_message") & F.col("outcome").isNotNull(),
                   violated=~F.col("outcome").isin("accepted", "presettled"), observed=F.col("outcome"),
                   expected="accepted", quote="delivery outcomes")]


# --- rules over several records: each frame derives the rows to check ---------------------------------

def _keyed() -> Column:
    return F.col("messageId").isNotNull()


def logged_twice(m: DataFrame, keys: Sequence[str] = ()) -> DataFrame:
    """Records that are in the log more than once (the same :data:`RECORD_KEY`): one row per record,
    with ``copies`` and the first file it is in. A v1 record (no messageId) is not compared.
    ``keys``: more grouping columns, functions of the record key (the stream's event time)."""
    others = [c for c in IDENTITY if c not in RECORD_KEY and c != "file"]
    return (m.where(_keyed()).groupBy(*RECORD_KEY, *keys)
            .agg(F.count(F.lit(1)).alias("copies"), F.min("file").alias("file"),
                 F.size(F.collect_set("file")).alias("files"), *[F.first(c).alias(c) for c in others]))


def records_logged_twice(m: DataFrame) -> DataFrame:
    """:func:`logged_twice` of only the records whose key may be in the log more than once.

    A sort-based aggregate of every record (its text columns and set of files) was the largest
    frame of a validate. Most records are logged once, so a hash aggregate of one 64-bit hash of
    each record's key counts them first (fixed-width keys and buffers: no sort), and only the
    records of a hash counted twice or more (broadcast, a few per cent) are grouped by their key.
    Exact: records of two keys that share a hash are grouped apart there, each then once. Only
    records logged twice are rows here: the checked records are counted by the pass over all
    records (``records_scope``); a rule set without that pass counts the keys logged twice.
    A validate counts them in its walk instead (:data:`WALKED`); this frame stays the reference. The walk finds the
    copies of a record where its row is (its role's partition and order): the key holds every column that places
    a row there, so equal keys meet in one run of the walk's sort and the two find the same copies.
    """
    keyed = m.where(_keyed()).withColumn("_key", F.xxhash64(*RECORD_KEY))
    repeated = keyed.groupBy("_key").count().where(F.col("count") > 1).select("_key")
    return logged_twice(keyed.join(F.broadcast(repeated), "_key", "left_semi")).where(F.col("copies") > 1)


def logged_twice_checks() -> list[Check]:
    return [simple("AUDIT", "record_logged_twice", "warning", scope=F.lit(True), violated=F.col("copies") > 1,
                   observed=F.concat(F.lit("logged "), F.col("copies").cast("string"), F.lit(" times in "),
                                     F.col("files").cast("string"), F.lit(" file(s)")),
                   expected="each record once", records_scope=_keyed(), quote="records logged twice")]


def sequenced_delivery() -> Column:
    return first_delivery() & F.col("shardSeq").isNotNull() & F.col("departureMs").isNotNull()


def shard_links(m: DataFrame) -> DataFrame:
    """First deliveries with the highest shardSeq delivered strictly earlier on the same link and shard
    of the same admission sequence."""
    rows = m.where(sequenced_delivery()).withColumn("admission", admission())
    link = Window.partitionBy("node", "admission", "source", "consumer", "shardKey").orderBy("departureMs")
    return rows.withColumn("earlier", F.max("shardSeq").over(link.rangeBetween(Window.unboundedPreceding, -1)))


def _shard_order() -> list[Check]:
    return [simple("IP_128", "shard_order", "error", scope=F.lit(True), violated=F.col("shardSeq") < F.col("earlier"),
                   observed=F.concat(F.lit("shardSeq "), F.col("shardSeq").cast("string"), F.lit(" after "),
                                     F.col("earlier").cast("string"), F.lit(" on "), F.col("shardKey")),
                   expected="increasing shardSeq per shard and consumer", records_scope=sequenced_delivery(),
                   quote="out-of-order")]


def sequenced_arrival() -> Column:
    return _event("received_message") & F.col("shardSeq").isNotNull() & _keyed() & F.col("shardKey").isNotNull()


def shard_sequences(m: DataFrame) -> DataFrame:
    """Received messages with ``before``: the highest shardSeq logged below theirs in the same shard
    and admission sequence (a copy of the same record has the same number: it is not a step)."""
    rows = m.where(sequenced_arrival()).withColumn("admission", admission())
    shard = Window.partitionBy("node", "admission", "shardKey").orderBy("shardSeq")
    return rows.withColumn("before", F.max("shardSeq").over(shard.rangeBetween(Window.unboundedPreceding, -1)))


def _missing_range() -> Column:
    low, high = F.col("before") + 1, F.col("shardSeq") - 1
    return F.when(low == high, low.cast("string")).otherwise(F.concat(low.cast("string"), F.lit("-"), high.cast("string")))


def _shard_gap() -> list[Check]:
    missing = F.col("shardSeq") - F.col("before") - 1
    return [simple("AUDIT", "shard_gap", "warning", scope=F.lit(True), violated=missing > 0,
                   observed=F.concat(F.lit("shardSeq "), _missing_range(), F.lit(" of "), F.col("shardKey"),
                                     F.lit(" missing ("), missing.cast("string"), F.lit(" admitted, not logged; in "),
                                     F.col("admission"), F.lit(")")),
                   expected=F.concat(F.lit("shardSeq "), (F.col("before") + 1).cast("string"), F.lit(" next")),
                   records_scope=sequenced_arrival(), quote="gaps in a shard's admission sequence")]


#: The gap checks' names (the ``check`` of the output tables) by the requirement bounding the gap.
_GAP_NAMES = {"IP_048": "repetition", "IP_124": "cam_rate", "IP_136": "cpm_rate"}
#: The words of each gap requirement's sentence its check tests.
_GAP_QUOTES = {"IP_048": "repeated at least every 9 min", "IP_124": "between 1 per second and 1 per 120 seconds",
               "IP_136": "1 per second"}
#: A gap of a single nominal interval (IP_136's "1 per second") passes within this share of it.
NOMINAL_TOLERANCE = 0.1
_UNBOUNDED_MS = 2**62  #: the highest gap where the profile gives none


def _gap_checks() -> dict[str, tuple[str, str, tuple[str, ...], int, int, str]]:
    """check -> (rule, severity, message types sequenced, lowest and highest gap in ms, expected): one
    check per requirement bounding the repetition of message types in the profile (IP_048/124/136)."""
    bounded: dict[str, tuple[profile.Repetition, list[str]]] = {}
    for message_type, spec in profile.MESSAGE_TYPES.items():
        repetition = spec.repetition
        if repetition.requirement is not None:
            bounded.setdefault(repetition.requirement, (repetition, []))[1].append(message_type.value)
    gaps = {}
    for requirement, (repetition, types) in sorted(bounded.items()):
        low, high = repetition.at_least_ms or 0, repetition.at_most_ms
        if low == high:
            expected = f"{low} ms apart (+-{NOMINAL_TOLERANCE * 100:.0f} %)"
            low, high = round(low * (1 - NOMINAL_TOLERANCE)), round(low * (1 + NOMINAL_TOLERANCE))
        elif high is None:
            expected = f"at least {low} ms apart"
        elif low == 0:
            expected = f"repeated at least every {high} ms"
        else:
            expected = f"{low} to {high} ms apart"
        severity = "error" if repetition.level is profile.Level.SHALL else "warning"
        check = _GAP_NAMES.get(requirement, f"gap_{requirement.lower()}")
        gaps[check] = (requirement, severity, tuple(types), low, _UNBOUNDED_MS if high is None else high, expected)
    return gaps


#: check -> (rule, severity, message types sequenced, lowest and highest gap in ms, expected)
GAPS = _gap_checks()


def received_publication() -> Column:
    return _event("received_message") & F.col("publicationId").isNotNull()


def publications(m: DataFrame) -> DataFrame:
    """Received messages of a publication in arrival order, each message once (a record logged twice
    is kept once): the previous arrival of each gap check's types (``previous_<check>``) and the copy
    number (``copy``, by messageId) and first arrival of the same body. One shuffle by (node,
    publicationId) for the four rules, and two sorts: the copies of a record are next to each other in
    arrival order (the same messageId and arrivalMs; the first file's kept), so dropping them and the
    gaps share one sort."""
    rows = m.where(received_publication()).repartition("node", "publicationId")
    arrivals = Window.partitionBy("node", "publicationId").orderBy("arrivalMs", "messageId", "file", "timestampMs")
    again = (F.col("messageId").isNotNull() & (F.lag("messageId").over(arrivals) == F.col("messageId"))
             & F.lag("arrivalMs").over(arrivals).eqNullSafe(F.col("arrivalMs")))
    rows = rows.withColumn("_again", F.coalesce(again, F.lit(False))).where(~F.col("_again")).drop("_again")
    before = arrivals.rowsBetween(Window.unboundedPreceding, -1)
    rows = rows.select("*", *[  # in one select: one window operator (one after the other, Spark ran three)
        F.last(F.when(F.col("messageType").isin(*types) & F.col("arrivalMs").isNotNull(), F.col("arrivalMs")),
               ignorenulls=True).over(before).alias(f"previous_{check}")
        for check, (_, _, types, _, _, _) in GAPS.items()])
    same = Window.partitionBy("node", "publicationId", "bodySha256").orderBy("arrivalMs", "messageId")
    return rows.withColumn("copy", F.row_number().over(same)).withColumn("firstMs", F.first("arrivalMs").over(same))


def _gap(check: str) -> list[Check]:
    rule, severity, types, low_ms, high_ms, expected = GAPS[check]
    gap = F.col("arrivalMs") - F.col(f"previous_{check}")
    scope = F.col("messageType").isin(*types) & F.col("arrivalMs").isNotNull() & F.col(f"previous_{check}").isNotNull()
    return [simple(rule, check, severity, scope=scope, violated=(gap < low_ms) | (gap > high_ms),
                   observed=F.concat(gap.cast("string"), F.lit(" ms since the previous one")), expected=expected,
                   quote=_GAP_QUOTES.get(rule, ""))]


def _duplicates() -> list[Check]:
    severity = F.when(F.col("messageType").isin(*REPEATED_TYPES), "info").otherwise("warning")
    return [simple("AUDIT", "duplicate", severity, scope=F.col("bodySha256").isNotNull(), violated=F.col("copy") > 1,
                   observed=F.concat(F.lit("copy "), F.col("copy").cast("string"), F.lit(" (another messageId), "
                                     "first arrived at "), F.col("firstMs").cast("string")), expected="one copy per body",
                   records_scope=received_publication() & F.col("bodySha256").isNotNull(),
                   quote="copies re-published with the same body")]


def _intersections() -> Column:
    return F.split(F.regexp_replace(F.coalesce(F.col(property_rules.VALUES)["id"], F.lit("")), "^,|,$", ""), ",")


def received_arrival() -> Column:
    return _event("received_message") & F.col("arrivalMs").isNotNull()


def first_mapems(m: DataFrame) -> DataFrame:
    """The first MAPEM arrival (``mapemMs``) per node and intersection (IP_104)."""
    return (m.where(received_arrival() & (F.col("messageType") == "MAPEM"))
            .select("node", F.explode(_intersections()).alias("intersection"), "arrivalMs")
            .where(F.col("intersection") != "")
            .groupBy("node", "intersection").agg(F.min("arrivalMs").alias("mapemMs")))


def spatems(m: DataFrame) -> DataFrame:
    """Each SPATEM with ``early``: its first intersection no MAPEM had arrived for before it at the node.

    The first MAPEM arrival per (node, intersection) is small (one entry per intersection), so it is
    broadcast as one map per node to the SPATEMs: no shuffle of the SPATEMs, no explode and regroup
    of them. "Corresponding MAPEM" (IP_104) is the MAPEM of the intersection, whoever published it.
    """
    received = m.where(received_arrival())
    keys = ["node"]
    first_mapem = first_mapems(m).groupBy(*keys).agg(
        F.map_from_entries(F.collect_list(F.struct("intersection", "mapemMs"))).alias("mapems"))
    spatem = received.where(F.col("messageType") == "SPATEM").withColumn(
        "intersections", F.array_remove(_intersections(), ""))
    joined = spatem.join(F.broadcast(first_mapem), keys, "left")
    early = F.expr("filter(intersections, i -> coalesce(mapems[i] > arrivalMs, true))")  # SQL lambda: see the module docstring
    return joined.withColumn("early", F.array_min(early))


def _spatem_after_mapem() -> list[Check]:
    return [simple("IP_104", "spatem_after_mapem", "error", scope=F.lit(True), violated=F.col("early").isNotNull(),
                   observed=F.concat(F.lit("SPATEM before any MAPEM of intersection '"), F.col("early"), F.lit("'")),
                   expected="a MAPEM of the same intersection earlier",
                   records_scope=received_arrival() & (F.col("messageType") == "SPATEM"),
                   quote="SPATEM only after corresponding MAPEM")]


def message_key() -> Column:
    """What tells two messages apart (a v1 record without messageId: its file and time)."""
    return F.coalesce(F.col("messageId"), F.concat_ws("|", F.col("file"), F.col("timestampMs").cast("string")))


def seconds(m: DataFrame) -> DataFrame:
    """Per node and second of arrival in which :data:`BURST_MESSAGES` or more records of received
    messages under 500 KB arrived: messages under 500 KB arrived (each once), the first arrival, the
    last departure of a first delivery of them.

    A second with fewer such records has fewer messages and is not one IP_013 checks, so only the
    busy seconds are counted exactly: a count of records per second first (a hash aggregate of
    fixed-width keys), then the messages of the busy ones alone, each once (the busy seconds broadcast: at
    most one per 5000 records). With no busy second adaptive execution skips that second pass.
    A distinct count over every second would shuffle and aggregate every received message's key (at 2M
    lines 5 s of task CPU, more than any other frame's map stages).
    """
    received = _event("received_message") & small_payload()
    rows = (m.where((received | (first_delivery() & small_payload())) & F.col("arrivalMs").isNotNull())
            .withColumn("s", (F.col("arrivalMs") / 1000).cast("long")))
    busy = (rows.groupBy("node", "s").agg(F.count_if(received).alias("records"))
            .where(F.col("records") >= BURST_MESSAGES).select(F.col("node").alias("_node"), F.col("s").alias("_s")))
    same_second = F.col("node").eqNullSafe(F.col("_node")) & F.col("s").eqNullSafe(F.col("_s"))
    rows = (rows.join(F.broadcast(busy), same_second, "left_semi").groupBy("node", "s")
            .agg(F.count_distinct(F.when(received, message_key())).alias("arrived"),
                 F.min(F.when(received, F.col("arrivalMs"))).alias("firstMs"),
                 F.max(F.when(first_delivery(), F.col("departureMs"))).alias("lastMs")))
    return rows.select("node", *[F.lit(None).cast(t).alias(c) for c, t in (
        ("process", "int"), ("event", "string"), ("messageId", "string"), ("publicationId", "string"),
        ("messageType", "string"), ("publisher", "string"), ("consumer", "string"), ("file", "string"))],
        F.col("firstMs").alias("timestampMs"), "arrived", "lastMs", "firstMs")


def _bursts() -> list[Check]:
    took = F.col("lastMs") - F.col("firstMs")
    return [simple("IP_013", "burst", "error", scope=F.col("arrived") >= BURST_MESSAGES, violated=took >= BURST_LIMIT_MS,
                   observed=F.concat(F.col("arrived").cast("string"), F.lit(" messages arrived in this second, "
                                     "the last available "), took.cast("string"), F.lit(" ms after the first")),
                   expected=f"< {BURST_LIMIT_MS} ms for {BURST_MESSAGES} messages", quote="5000 messages")]


properties = Rule("properties", received_properties, _properties)
latency = Rule("latency", records, _latency)
delivered_after_expiry = Rule("delivered_after_expiry", records, _delivered_after_expiry)
expired = Rule("expired", records, _expired)
dropped = Rule("dropped", records, _dropped)
unroutable = Rule("unroutable", records, _unroutable)
rejected = Rule("rejected", records, _rejected)
redelivery = Rule("redelivery", records, _redelivery)
outcome = Rule("outcome", records, _outcome)
record_logged_twice = Rule("record_logged_twice", records_logged_twice, logged_twice_checks)
shard_order = Rule("shard_order", shard_links, _shard_order)
shard_gap = Rule("shard_gap", shard_sequences, _shard_gap)
#: One rule per gap check (IP_048 repetition, IP_124 CAM rate, IP_136 CPM rate).
GAP_RULES: tuple[Rule, ...] = tuple(Rule(check, publications, partial(_gap, check)) for check in GAPS)
duplicates = Rule("duplicates", publications, _duplicates)
spatem_after_mapem = Rule("spatem_after_mapem", spatems, _spatem_after_mapem)
bursts = Rule("bursts", seconds, _bursts)

#: check -> (rule, severity) of every check but the table checks: metrics list them all, found or not.
CHECKS: dict[str, tuple[str, str]] = {
    "latency": ("IP_012", "error"), "delivered_after_expiry": ("IP_033", "error"),
    "expired_undelivered": ("IP_033", "info"), "dropped": ("IP_032", "warning"), "discarded": ("AUDIT", "info"),
    "unroutable": ("AUDIT", "info"), "rejected": ("IP_016", "warning"), "redelivery": ("AUDIT", "info"),
    "delivery_outcome": ("AUDIT", "info"), "record_logged_twice": ("AUDIT", "warning"),
    "shard_order": ("IP_128", "error"), "shard_gap": ("AUDIT", "warning"), "duplicate": ("AUDIT", "info"),
    "spatem_after_mapem": ("IP_104", "error"), "burst": ("IP_013", "error"),
    **{check: (rule, severity) for check, (rule, severity, *_) in GAPS.items()},
}

#: Rules over single records.
RECORD_RULES: tuple[Rule, ...] = (properties, latency, delivered_after_expiry, expired, dropped, unroutable,
                                  rejected, redelivery, outcome)
#: Rules comparing records.
ACROSS_RULES: tuple[Rule, ...] = (record_logged_twice, shard_order, shard_gap, *GAP_RULES, duplicates,
                                  spatem_after_mapem, bursts)
ALL_RULES = RECORD_RULES + ACROSS_RULES


def frames(rule_set: Sequence[Rule]) -> dict[Frame, list[Check]]:
    """The checks of ``rule_set`` by frame, in rule order: one pass per frame."""
    grouped: dict[Frame, list[Check]] = {}
    for rule in rule_set:
        grouped.setdefault(rule.frame, []).extend(rule.checks())
    return grouped


def counts(grouped: dict[Frame, list[Check]]) -> dict[Frame, list[tuple[str, Column]]]:
    """Where each check's checked rows are counted: (check, the rows it checks) per frame.

    A check with a ``records_scope`` is counted by the pass over every record when that pass runs,
    so its own frame needs no observation of its rows (each observed frame hands every row to the
    observation: at 2M lines ~1 s per frame, ~2 s for the table checks' wide rows); the others
    (gaps between arrivals, busy seconds) are counted on their frame. Records are counted as
    logged: a record logged twice is counted twice (and found once).
    """
    by_records = records in grouped
    counted: dict[Frame, list[tuple[str, Column]]] = {frame: [] for frame in grouped}
    for frame, checks in grouped.items():
        for c in checks:
            if by_records and c.records_scope is not None and frame is not records:
                counted[records].append((c.check, c.records_scope))
            else:
                counted[frame].append((c.check, c.scope))
    return counted


#: The columns of a finding but its file: findings equal in these are one (a record logged twice).
FINDING_COLUMNS = (*[c for c in IDENTITY if c != "file"], "rule", "check", "severity", "property", "observed", "expected")


def once(found: DataFrame) -> DataFrame:
    """Each finding once: those of a record logged twice (the same but for the file) are one, from the first file.

    The first file is the least of a list of them, not ``min(file)``: a string minimum is sort-based
    aggregation, whose sort of the 15 key columns was generated into the stage that holds every
    frame's findings (the largest of a validate); a list is hash-based and runs without generated code.
    """
    first = F.array_min(F.collect_list("file")).alias("file")
    return found.groupBy(*FINDING_COLUMNS).agg(first).select(*IDENTITY, *FINDING_COLUMNS[9:])


#: The frames whose checks one Java walk runs (``croads.validate.CrossWalk``) over one shuffle of their rows.
WALKED: tuple[Frame, ...] = (records, records_logged_twice, shard_links, shard_sequences, publications, spatems)
#: The walk's class (spark/jvm/src/croads/validate/CrossWalk.java).
WALK_CLASS = "croads.validate.CrossWalk"


#: A walk row's role (``kind``, CrossWalk.java): of a publication, of a shard's sequence, of a link (0: a record alone).
_PUB, _SEQ, _LINK = 1, 2, 4


def _walk_keys(kind: Column, admitted: Column) -> list[Column]:
    """A walk row's window partition after its node (``k1``..``k4``): a publication's publicationId; a
    shard's admission sequence (``admitted``) and shardKey; a link's admission sequence, source, consumer and
    shardKey; a record alone's messageId (only to spread them)."""
    shard = (kind == _SEQ) | (kind == _LINK)
    return [F.when(kind == _PUB, F.col("publicationId")).when(shard, admitted).otherwise(F.col("messageId")),
            F.when(kind == _SEQ, F.col("shardKey")).when(kind == _LINK, F.col("source")),
            F.when(kind == _LINK, F.col("consumer")),
            F.when(kind == _LINK, F.col("shardKey"))]


def walk_hash(kind: Column, keys: Sequence[Column]) -> Column:
    """The hash a walk row is partitioned and sorted by: of its role and window partition (node, ``keys``)."""
    return F.xxhash64(kind, F.col("node"), *keys)


def walk_rows(m: DataFrame, frames_walked: Sequence[Frame]) -> DataFrame:
    """The rows of the walked frames, one per role of a record (a received message of a publication and a
    shard is two rows), partitioned by the hash of the role's window partition and sorted as each role's
    window orders its partition: the columns CrossWalk.java reads. Spark's sort spills, so a partition
    of any length is walked in constant memory. ``rec``: the row (one per record) its per-record rules run on;
    a second row of a record carries its identity and its shard only. The partition's keys are taken from the
    row's columns after the shuffle (only the admission sequence is shuffled as a column of its own)."""
    pub = received_publication() if publications in frames_walked else F.lit(False)
    seq = sequenced_arrival() if shard_sequences in frames_walked else F.lit(False)
    link = sequenced_delivery() if shard_links in frames_walked else F.lit(False)
    alone = records in frames_walked or spatems in frames_walked or records_logged_twice in frames_walked
    first = F.when(pub, _PUB).when(seq, _SEQ).when(link, _LINK).otherwise(0)
    kinds = F.when(pub & seq, F.array(F.lit(_PUB), F.lit(_SEQ))).otherwise(F.array(first))
    columns = [*IDENTITY, "source", "shardKey", "shardSeq", "arrivalMs", "departureMs", "bodySha256"]
    extra = ["attempt", "outcome", "size", "expiryMs", "reason"]
    rows = m if alone else m.where(pub | seq | link)
    intersections = F.when(F.col("messageType") == "SPATEM", F.col(property_rules.VALUES)["id"]).alias("_ids")
    rows = rows.select(*columns, *extra, F.col(property_rules.OTHERS).isNotNull().alias("_properties"), intersections,
                       F.posexplode(kinds).alias("_n", "kind"))
    kind, first_row = F.col("kind"), F.col("_n") == 0
    admitted = F.when((kind == _SEQ) | (kind == _LINK), admission())
    shard_only = {"shardKey", "shardSeq", "kind", *IDENTITY}  # what a second row (a shard's) needs
    rows = rows.select(*[c if c in shard_only else F.when(first_row, F.col(c)).alias(c)
                         for c in (*columns, "kind", *extra, "_properties", "_ids")],
                       (first_row if alone else F.lit(False)).alias("rec"), admitted.alias("_admission"))
    keys = _walk_keys(kind, F.col("_admission"))
    rows = rows.withColumn("hash", walk_hash(kind, keys)).repartition("hash")
    order = F.when(kind == _PUB, F.col("arrivalMs")).when(kind == _SEQ, F.col("shardSeq")).when(
        kind == _LINK, F.col("departureMs")).alias("o1")
    rows = rows.select(*columns, "kind", "hash", *extra, "_properties", "_ids", "rec",
                       *[key.alias(f"k{i}") for i, key in enumerate(keys, 1)], order)
    # the rows of a hash in their role's order (a publication's ties by messageId, file, timestampMs: its window's),
    # then by partition: the rows of two partitions with one hash (rare) interleave, and the walk tells them apart
    return rows.sortWithinPartitions("hash", "kind", "o1", "messageId", "file", "timestampMs", "node", "k1", "k2", "k3",
                                     "k4")


def walk_spec(checks: Sequence[str], record_checks: Sequence[str],
              mapems: dict[str, dict[str, int]] | None = None) -> str:
    """The walk's checks as JSON (CrossWalk.create): the gap checks, the repeated types, which others run."""
    gaps = [{"check": check, "rule": rule, "severity": severity, "types": list(types), "low": low, "high": high,
             "expected": expected} for check, (rule, severity, types, low, high, expected) in GAPS.items()
            if check in checks]
    return json.dumps({"gaps": gaps, "repeatedTypes": list(REPEATED_TYPES), "order": "shard_order" in checks,
                       "shardGap": "shard_gap" in checks, "duplicates": "duplicate" in checks,
                       "loggedTwice": "record_logged_twice" in checks,
                       "records": list(record_checks), "spatems": mapems is not None, "mapems": mapems or {},
                       "payloadLimit": PAYLOAD_LIMIT, "latencyLimitMs": LATENCY_LIMIT_MS})


@dataclass
class Walk:
    """A walk's findings and, once they were computed, the rows each of its counted checks checked."""

    findings: DataFrame
    handle: Any
    counted: tuple[tuple[str, str], ...]  # (the walk's count, the check it counts)
    rows: DataFrame  # what it walked (:func:`walk_rows`): its plan has the sort's metrics

    def checked(self) -> dict[str, int]:
        counts = self.handle.counts()
        return {check: int(counts[name]) for name, check in self.counted}


def walk(m: DataFrame, grouped: dict[Frame, list[Check]], counted: dict[Frame, list[tuple[str, Column]]]) -> Walk:
    """The findings of the walked frames' checks in ``grouped`` (one Java walk: :data:`WALKED`)."""
    walked = [frame for frame in WALKED if frame in grouped]
    checks = [c.check for frame in walked if frame not in (records, spatems) for c in grouped[frame]]
    record_checks = [c.check for c in grouped.get(records, [])]
    spark = m.sparkSession
    walk_class: Any = spark._jvm  # noqa: SLF001 (py4j: a JVM class's static method)
    for part in WALK_CLASS.split("."):
        walk_class = getattr(walk_class, part)
    mapems: dict[str, dict[str, int]] | None = None
    if spatems in walked:  # small (an entry per intersection): to the walk as data
        mapems = {}
        for row in first_mapems(m).collect():
            mapems.setdefault(row["node"], {})[row["intersection"]] = row["mapemMs"]
    handle = walk_class.create(spark._jsparkSession, walk_spec(checks, record_checks, mapems))  # noqa: SLF001
    rows = walk_rows(m, walked)
    found = DataFrame(handle.findings(rows._jdf), spark)  # noqa: SLF001
    found = found.select(*IDENTITY, *FINDING_COLUMNS[9:])
    # the walk counts every check's records as the records' pass would ("records:<check>"), and the rows of
    # its other frames under the check's name
    return Walk(found, handle, tuple((f"records:{check}" if frame in (records, spatems) else check, check)
                                     for frame in walked for check, _ in counted[frame]), rows)


def all_violations(messages: DataFrame, rule_set: Sequence[Rule] = ALL_RULES,
                   observe: Callable[[str], Observation | None] = lambda _: None,
                   checks_by_frame: dict[Frame, list[Check]] | None = None, each_once: bool = True,
                   carry: Sequence[str] = (), walks: list[Walk] | None = None, walked: bool = False) -> DataFrame:
    """Every finding of ``rule_set`` over ``messages`` (the messages table's columns), one pass per frame.

    ``observe(frame name)`` gives the observation that counts the checked rows :func:`counts`
    places on that frame (or None); it is asked only for frames that count some.
    ``checks_by_frame``: :func:`frames` of ``rule_set`` when the caller has built them already
    (building the table checks' expressions takes ~65,000 calls into the JVM, ~2 s).
    ``each_once``: the findings of a record logged twice kept once (:func:`once`); ``carry``: more
    columns of ``messages`` kept in each finding (the per-record frames only: the stream's event time).
    ``walked``: the frames of :data:`WALKED` run as the Java walk (as validate runs them; not with ``carry``),
    whose counts of checked rows are then in the :class:`Walk` appended to ``walks``; False (the default): as
    the Spark frames here, the reference the walk is held against.
    """
    m = messages.select(*INPUT_COLUMNS, *carry)
    grouped = frames(rule_set) if checks_by_frame is None else checks_by_frame
    counted = counts(grouped)
    walked = walked and not carry and any(frame in grouped for frame in WALKED)
    found = [violations(frame(m), checks, observe(frame.__name__) if counted[frame] else None, counted[frame], carry)
             for frame, checks in grouped.items() if not (walked and frame in WALKED)]
    if walked:
        done = walk(m, grouped, counted)
        found.append(done.findings)
        if walks is not None:
            walks.append(done)
    every = reduce(DataFrame.unionByName, found)
    every = once(every) if each_once else every
    return every.withColumn("requirement", requirement_of(F.col("rule")))  # once, not once per frame
