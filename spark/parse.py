"""JSON log lines to typed rows (appendix F, interchange.ground.logformat versions 1 and 2).

The line schema is derived from :class:`interchange.ground.logformat.LogRecord` (its field names) plus
the version-2 fields of the log contract, so nothing is inferred. Each line is read once, strictly, by
a Spark SQL function in Java (``spark/jvm``, :data:`PARSE_FUNCTION`, built by ``scripts/setup.sh``):
one pass over its bytes gives every field as text, ``details`` as a map, the application properties each
once (tables 1-7's in two structs, the others in two maps: value texts and JSON kinds) and, for a line
that is not exactly one JSON object, its reason (a plain record is read by a byte scanner straight into
Spark's UTF-8 strings, any other line by Jackson: the same rows, :data:`REFERENCE_FUNCTION`). This
module owns the contract the parser is handed: the fields, the reasons and their order. Every field
is then cast with ``try_cast`` to the column type of :data:`spark.tables.MESSAGES`: a field of the
wrong type, or a time outside the years 0001-9999 (:data:`EPOCH_MS_RANGE`), becomes null instead of
making the whole line unreadable. A line is corrupt (kept aside with its reason, never fatal) when it
is not exactly one JSON object, or lacks a readable ``schemaVersion``, ``timestamp``/``timestampMs``,
``level`` or ``event`` (:data:`REASONS`). The ingest's messages write builds the same rows in Java
(:func:`message_rows`: each message's row in the table's layout, the other rows kept aside); :func:`parse` and
:func:`messages` are the reference it is tested against, and what the other jobs read logs with.

Version 1 records have no ``timestampMs``/``arrivalMs``/``departureMs``: they are derived from the
ISO times; ``messageType``/``publicationId``/``shardId`` come from the application properties when
not at top level; a v1 ``sent_message``'s identity is its consumer and its address the source;
``rejected_message``'s reason is ``details.reason``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from interchange.ground import logformat
from interchange.ground.errors import CliError
from spark import tables
from spark.line_patterns import NON_NUMBER_OUTSIDE_STRINGS

#: Version-2 fields (the log contract) read even before the model lists them.
V2_FIELDS = (
    "timestampMs", "process", "messageId", "amqpMessageId", "consumer", "source", "messageType",
    "publicationId", "shardId", "shardKey", "shardSeq", "arrivalMs", "departureMs", "settledMs",
    "attempt", "outcome", "bodySha256", "expiryMs", "expirySource", "origin", "neighbour", "reason",
    "rawMessageHex",
)
#: The two objects of a record that are read as maps (:data:`PROPERTY_MAP`, :data:`DETAILS_MAP`), not into ``r``.
NESTED_FIELDS = ("applicationProperties", "details")


def line_fields() -> list[str]:
    """The top-level fields of a line read into ``r`` as text: every LogRecord field and the v2 ones
    but :data:`NESTED_FIELDS`."""
    names = list(logformat.LogRecord.model_fields)
    names += [name for name in V2_FIELDS if name not in names]
    return [name for name in names if name not in NESTED_FIELDS]


def line_schema() -> StructType:
    """The struct ``r`` of :func:`parse`: :func:`line_fields` as text."""
    return StructType([StructField(name, StringType(), True) for name in line_fields()])


#: The epoch milliseconds a time field may hold: the years 0001-9999 of an ISO 8601 time (the log's
#: ``timestamp``). A value outside is unreadable, as a field of the wrong type is (null): one beyond
#: Spark's microsecond timestamps would stop the whole job at the record's date, and two far apart would
#: overflow a latency's subtraction.
EPOCH_MS_RANGE = (-62_135_596_800_000, 253_402_300_799_999)
#: The fields of a record that are epoch milliseconds.
EPOCH_MS_FIELDS = frozenset({"timestampMs", "arrivalMs", "departureMs", "settledMs", "expiryMs"})


def _epoch_ms(ms: Column) -> Column:
    """``ms`` (a long) if it is within :data:`EPOCH_MS_RANGE`, else null."""
    return F.when(ms.between(*EPOCH_MS_RANGE), ms)


def _iso_ms(text: Column) -> Column:
    return _epoch_ms(F.unix_millis(text.try_cast("timestamp")))


def _typed(record: Column, name: str) -> Column:
    typed = record[name].try_cast(tables.MESSAGES[name].dataType)
    return _epoch_ms(typed) if name in EPOCH_MS_FIELDS else typed


#: A line longer than this (in bytes) is kept aside as corrupt, with its first :data:`KEPT_BYTES`:
#: the longest record the node writes carries a message under 500 KB (IP_012) twice as hex
#: (``bodyContentHex``, ``rawMessageHex``), ~2 MB; parsing a line of tens of MB would hold several
#: copies of it in the JVM at once.
MAX_LINE_BYTES = 8 * 1024 * 1024
KEPT_BYTES = 1024
#: The versions of the log schema this reader knows (:data:`interchange.ground.logformat.READABLE_VERSIONS`).
READABLE_VERSIONS = tuple(sorted(logformat.READABLE_VERSIONS))
LEVELS = tuple(logformat.LEVELS)

#: Why a line is not a record (``corrupt.reason`` starts with one of these).
TOO_LONG = f"line longer than {MAX_LINE_BYTES} bytes (its first {KEPT_BYTES} kept)"
NOT_UTF8 = "not valid UTF-8"
SURROGATE = "a lone UTF-16 surrogate escape (not a Unicode character)"
NON_NUMBER = "NaN or Infinity (not JSON numbers)"
TRAILING = "more than one JSON value on the line"
NOT_OBJECT = "not a JSON object"
MALFORMED = "not JSON (malformed or truncated)"
DUPLICATE_KEY = "a key given twice"
OUT_OF_RANGE = "a number out of range of a double"
VERSION_MISSING = "schemaVersion missing or invalid"
VERSION_UNKNOWN = "schemaVersion not readable here"
TIMESTAMP_MISSING = "timestamp missing or invalid"
EVENT_MISSING = "event missing"
LEVEL_MISSING = "level missing or unknown"
#: The reasons the Java parser tells (the JSON of the line), in the order they are tested.
JSON_REASONS = (NOT_UTF8, SURROGATE, NON_NUMBER, TRAILING, NOT_OBJECT, MALFORMED, DUPLICATE_KEY, OUT_OF_RANGE)
#: Every reason, in the order they are tested.
REASONS = (TOO_LONG, *JSON_REASONS, VERSION_MISSING, VERSION_UNKNOWN, TIMESTAMP_MISSING, EVENT_MISSING, LEVEL_MISSING)
#: What a record of an unknown version's reason starts with (its version follows).
VERSION_UNKNOWN_PREFIX = f"{VERSION_UNKNOWN} (versions {', '.join(map(str, READABLE_VERSIONS))}): "

#: Columns of :func:`parse` that :func:`messages` and :func:`events` read: the application properties as
#: :data:`spark.tables.MESSAGES` stores them (tables 1-7's values and kinds as struct fields filled by name
#: in Java; the other properties' values and kinds as maps), and ``details``.
STANDARD, STANDARD_KINDS, OTHER_PROPERTIES, OTHER_KINDS = "_standard", "_standardKinds", "_otherProperties", "_otherKinds"
DETAILS_MAP = "_details"

#: The Java line parser's name as a SQL function of the session (registered by :func:`parse`).
PARSE_FUNCTION = "croads_parse_log_line"
#: The same parser with every line read by its strict (Jackson) path, none by its byte scanner: the reference the
#: scanner is tested against (registered with :data:`PARSE_FUNCTION`).
REFERENCE_FUNCTION = PARSE_FUNCTION + "_reference"
#: The class that registers it (spark/jvm/src/croads/ingest/ParseLine.java: a Spark SQL expression).
PARSE_CLASS = "croads.ingest.ParseLine"


def register_parser(spark: SparkSession) -> None:
    """Registers :data:`PARSE_FUNCTION` in ``spark`` (again: replaced by the same), with this module's contract:
    the fields of ``r``, :data:`JSON_REASONS`, and the pattern that finds NaN/Infinity values."""
    # PySpark has no public door to a JVM class's static method: py4j's gateway is it
    udf_class: Any = spark._jvm  # noqa: SLF001
    for part in PARSE_CLASS.split("."):
        udf_class = getattr(udf_class, part)
    try:
        udf_class.register(spark._jsparkSession, PARSE_FUNCTION, ",".join(line_fields()),  # noqa: SLF001
                           ",".join(tables.STANDARD_FIELDS.names), "\n".join(JSON_REASONS), NON_NUMBER_OUTSIDE_STRINGS)
    except TypeError as error:  # py4j found a package, not the class: the jar is not on the session's class path
        raise CliError(f"the ingest line parser ({PARSE_CLASS}) is not in this Spark session: build "
                       "spark/jvm/target/croads-ingest.jar with scripts/setup.sh and start the session with "
                       "spark.session.build_session (or give spark-submit the jar with --jars)") from error


def parse(lines: DataFrame) -> DataFrame:
    """``value`` (a line) and ``file`` -> those columns plus ``r`` (the line's fields as text),
    ``timestampMs`` and ``corruptReason``; also :data:`STANDARD`, :data:`STANDARD_KINDS`,
    :data:`OTHER_PROPERTIES`, :data:`OTHER_KINDS` and :data:`DETAILS_MAP` (for :func:`messages` and
    :func:`events`).

    One pass of the Java parser per line gives the fields, or a reason of :data:`JSON_REASONS`; the
    record's own checks follow in the order of :data:`REASONS`, each only on the lines no earlier one
    explains. A line over :data:`MAX_LINE_BYTES` is not parsed and keeps only its first :data:`KEPT_BYTES`
    characters.
    """
    register_parser(lines.sparkSession)
    value = F.col("value")
    too_long = F.octet_length(value) > MAX_LINE_BYTES
    read = F.call_function(PARSE_FUNCTION, F.when(~too_long, value))
    parsed = lines.withColumn("_read", read).select(
        "*", F.col("_read.r").alias("r"), F.col("_read.reason").alias("_reason"),
        F.col("_read.standard").alias(STANDARD), F.col("_read.standardKinds").alias(STANDARD_KINDS),
        F.col("_read.properties").alias(OTHER_PROPERTIES), F.col("_read.kinds").alias(OTHER_KINDS),
        F.col("_read.details").alias(DETAILS_MAP)).drop("_read")
    r = F.col("r")
    timestamp_ms = F.coalesce(_typed(r, "timestampMs"), _iso_ms(r.timestamp))
    version = r.schemaVersion.try_cast("int")
    reason = (F.when(too_long, TOO_LONG)
              .when(F.col("_reason").isNotNull(), F.col("_reason"))
              .when(F.coalesce(version, F.lit(0)) < 1, VERSION_MISSING)
              .when(~version.isin(*READABLE_VERSIONS), F.concat(F.lit(VERSION_UNKNOWN_PREFIX), version.cast("string")))
              .when(timestamp_ms.isNull(), TIMESTAMP_MISSING)
              .when(r.event.isNull() | (r.event == ""), EVENT_MISSING)
              .when(r.level.isNull() | ~r.level.isin(*LEVELS), LEVEL_MISSING))
    kept = F.when(too_long, F.substring(value, 1, KEPT_BYTES)).otherwise(value)
    return (parsed.withColumn("timestampMs", timestamp_ms).withColumn("corruptReason", reason)
            .withColumn("value", kept).drop("_reason"))


#: The Java class that keeps rows aside (spark/jvm/src/croads/ingest/KeepAside.java: one per ingest, each with its
#: own accumulator).
KEEP_ASIDE_CLASS = "croads.ingest.KeepAside"


@dataclass(frozen=True)
class Aside:
    """The rows of :func:`parse` that are not messages, kept aside by the job that reads the rows of
    :func:`message_rows`."""

    _parsed: DataFrame
    _java: Any

    def rows(self) -> DataFrame | None:
        """Once that job is done: the rows kept aside, as :func:`parse` has them; None when they were more than
        a budget (some were left)."""
        if not self._java.complete():
            return None
        spark = self._parsed.sparkSession
        return DataFrame(spark._jsparkSession.createDataFrame(self._java.rows(), self._parsed._jdf.schema()),  # noqa: SLF001
                         spark)


#: The Java function that gives each line's row in the layout the ingest writes
#: (spark/jvm/src/croads/ingest/IngestLine.java): the messages table's row, or the row :func:`parse` has for the rows
#: kept aside; its name in the session.
INGEST_CLASS = "croads.ingest.IngestLine"
INGEST_FUNCTION = "croads_ingest_line"


def _register_ingest(spark: SparkSession, parsed: DataFrame, keep: Any) -> None:
    """Registers :data:`INGEST_FUNCTION` with this module's contract: the line parser's (:func:`register_parser`),
    the record checks' reasons in the order of :data:`REASONS`, how :func:`messages` derives the columns, and where
    the other rows go (``keep``: a KeepAside, with :func:`parse`'s ``parsed`` rows)."""
    checks = (TOO_LONG, VERSION_MISSING, VERSION_UNKNOWN_PREFIX, TIMESTAMP_MISSING, EVENT_MISSING, LEVEL_MISSING)
    settings = (str(MAX_LINE_BYTES), str(KEPT_BYTES), ",".join(map(str, READABLE_VERSIONS)), ",".join(LEVELS),
                ",".join(tables.MESSAGE_EVENTS), SENT, ",".join(DELIVERIES), ",".join(map(str, EPOCH_MS_RANGE)),
                ",".join(sorted(EPOCH_MS_FIELDS)), tables.MESSAGES.json(), parsed.schema.json(),
                spark.conf.get("spark.sql.session.timeZone") or "UTC")
    _java_class(spark, INGEST_CLASS).register(
        spark._jsparkSession, INGEST_FUNCTION, ",".join(line_fields()), ",".join(tables.STANDARD_FIELDS.names),  # noqa: SLF001
        "\n".join(JSON_REASONS), NON_NUMBER_OUTSIDE_STRINGS, "\n".join(checks), "\n".join(settings), keep)


def message_rows(lines: DataFrame, task_bytes: int, driver_bytes: int) -> tuple[DataFrame, Aside]:
    """``value`` (a line) and ``file`` -> the valid message records in the layout of :data:`spark.tables.MESSAGES`
    (the rows of :func:`messages` of :func:`parse`), and the other rows of :func:`parse` kept aside on the way
    (the line text only for the corrupt ones), up to ``task_bytes`` a task and ``driver_bytes`` in all (estimated:
    a row's line and 512 bytes): :meth:`Aside.rows` once the job that read the messages is done.

    Each line's row is built by one Java function (:data:`INGEST_FUNCTION`): the messages table's row, written by
    it in the layout that Spark then only copies into the sort's; the other rows handed to the keep-aside function
    as :func:`parse` has them. Spark must not run it twice for a line (it is not deterministic): the messages are
    the rows it gives that are not null."""
    spark = lines.sparkSession
    parsed = parse(lines)
    java = _java_class(spark, KEEP_ASIDE_CLASS).create(spark._jsparkSession, task_bytes, driver_bytes)  # noqa: SLF001
    _register_ingest(spark, parsed, java)
    row = F.call_function(INGEST_FUNCTION, F.col("value"), F.col("file")).alias("_row")
    # node and file are never null (as :func:`messages` has them: the files' columns are written "required")
    never_null = {"node", *(["file"] if not lines.schema["file"].nullable else [])}
    columns = [F.call_function(INGEST_FUNCTION + _KNOWN_NOT_NULL, F.col(f"_row.{name}")).alias(name) if name in never_null
               else F.col(f"_row.{name}") for name in tables.MESSAGES.names]
    return lines.select(row).where(F.col("_row").isNotNull()).select(*columns), Aside(parsed, java)


#: The suffix of the function registered with :data:`INGEST_FUNCTION` that marks a column never null (Spark's
#: ``KnownNotNull``).
_KNOWN_NOT_NULL = "_known_not_null"


def _java_class(spark: SparkSession, name: str) -> Any:
    """A class of the ingest's jar (PySpark has no public door to a JVM class's static methods: py4j's gateway is it)."""
    java: Any = spark._jvm  # noqa: SLF001
    for part in name.split("."):
        java = getattr(java, part)
    return java


def split_properties(props: Column, kinds: Column) -> dict[str, Column]:
    """The property columns of :data:`spark.tables.MESSAGES` (:data:`spark.tables.PROPERTY_COLUMNS`) from the
    two maps of every property that earlier layouts stored (values, kinds)."""
    names = tables.STANDARD_FIELDS.names
    # "?": a property whose kind is not known (not expected: both maps come from the same object)
    kind_of = [F.when(F.map_contains_key(props, name), F.coalesce(kinds[name], F.lit("?"))).alias(name) for name in names]
    return {"standardProperties": F.struct(*[props[name].alias(name) for name in names]),
            "standardKinds": F.struct(*kind_of),
            "otherProperties": F.map_filter(props, lambda name, _: ~name.isin(*names)),
            "otherKinds": F.map_filter(kinds, lambda name, _: ~name.isin(*names))}


def _sql_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def all_properties(kinds: bool = False) -> Column:
    """Every application property of a row of :data:`spark.tables.MESSAGES` as one map: name -> value text
    (``kinds``: name -> JSON kind). Tables 1-7's properties that were logged (a kind, even "null") in
    their tables' order, then the others in the order written; null when no properties were logged. For
    the readers that need every property by name (the selector what-if, replay); the table checks read
    the struct fields."""
    column = "standardKinds" if kinds else "standardProperties"
    others = "otherKinds" if kinds else "otherProperties"
    entries = ", ".join(f"named_struct('k', {_sql_text(name)}, 'v', {column}.`{name}`, 't', standardKinds.`{name}`)"
                        for name in tables.STANDARD_FIELDS.names)
    # SQL text with fixed lambda names: the same generated code for every job (Spark's cache of compiled classes)
    logged = f"map_from_entries(transform(filter(array({entries}), e -> e.t IS NOT NULL), e -> struct(e.k, e.v)))"
    return F.expr(f"CASE WHEN {others} IS NOT NULL THEN map_concat({logged}, {others}) END")


#: The event whose consumer a v1 record gives as its ``identity``, and the events whose source it gives as ``address``.
SENT = "sent_message"
DELIVERIES = ("sent_message", "dropped_message", "expired_message")


def _message_columns(r: Column, standard: Column) -> dict[str, Column]:
    """Columns derived from several fields; ``standard``: the properties of tables 1-7 (a struct)."""
    event = r.event
    details = F.col(DETAILS_MAP)
    delivery = event.isin(*DELIVERIES)
    return {
        "messageType": F.coalesce(r.messageType, standard["messageType"]),
        "publicationId": F.coalesce(r.publicationId, standard["publicationId"]),
        "publisherId": standard["publisherId"],
        "shardId": F.coalesce(r.shardId.try_cast("long"), standard["shardId"].try_cast("long")),
        "arrivalMs": F.coalesce(_typed(r, "arrivalMs"), _iso_ms(r.arrivalTime)),
        "departureMs": F.coalesce(_typed(r, "departureMs"), _iso_ms(r.departureTime)),
        "consumer": F.coalesce(r.consumer, F.when(event == SENT, r.identity)),
        "source": F.coalesce(r.source, F.when(delivery, r.address)),
        "reason": F.coalesce(r.reason, details["reason"]),
    }


def is_message(corrupt_reason: Column, r: Column) -> Column:
    """A row of :func:`parse` that :func:`messages` keeps: a valid record of a message event."""
    return corrupt_reason.isNull() & r.event.isin(*tables.MESSAGE_EVENTS)


def messages(parsed: DataFrame) -> DataFrame:
    """Valid message records of :func:`parse` in the layout of :data:`spark.tables.MESSAGES`."""
    r = F.col("r")
    records = parsed.where(is_message(F.col("corruptReason"), r))
    derived = _message_columns(r, F.col(STANDARD))
    stored = {"standardProperties": STANDARD, "standardKinds": STANDARD_KINDS, "otherProperties": OTHER_PROPERTIES,
              "otherKinds": OTHER_KINDS}
    columns: list[Column] = []
    for field in tables.MESSAGES.fields:
        name = field.name
        match name:
            case "timestampMs":
                column = F.col("timestampMs")
            case _ if name in stored:
                column = F.col(stored[name])
            case "file":
                column = F.col("file")
            case "node":
                column = F.coalesce(r.node, F.lit("unknown"))
            case "date":
                column = _date(F.col("timestampMs"))
            case _ if name in derived:
                column = derived[name].try_cast(field.dataType)
            case _:
                column = _typed(r, name)
        columns.append(column.alias(name))
    return records.select(*columns)


def events(parsed: DataFrame) -> DataFrame:
    """Valid non-message records of :func:`parse` in the layout of :data:`spark.tables.EVENTS`."""
    r = F.col("r")
    return (parsed.where(F.col("corruptReason").isNull() & ~r.event.isin(*tables.MESSAGE_EVENTS))
            .select(r.schemaVersion.try_cast("int").alias("schemaVersion"), F.col("timestampMs"),
                    r.level.alias("level"), r.event.alias("event"), r.process.try_cast("int").alias("process"),
                    F.col(DETAILS_MAP).alias("details"), F.col("file"),
                    F.coalesce(r.node, F.lit("unknown")).alias("node"), _date(F.col("timestampMs")).alias("date")))


def corrupt(parsed: DataFrame, ingested_ms: int) -> DataFrame:
    """Lines of :func:`parse` that are not log records, with file and reason."""
    return (parsed.where(F.col("corruptReason").isNotNull())
            .select(F.col("file"), F.col("value").alias("line"), F.col("corruptReason").alias("reason"),
                    F.lit(ingested_ms).cast("long").alias("ingestedMs")))


def _date(epoch_ms: Column) -> Column:
    return F.date_format(F.timestamp_millis(epoch_ms), "yyyy-MM-dd")
