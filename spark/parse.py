"""JSON log lines to typed rows (appendix F, interchange.ground.logformat versions 1 and 2), in column expressions.

The line schema is derived from :class:`interchange.ground.logformat.LogRecord` (its field names) plus
the version-2 fields of the log contract, so nothing is inferred. Every field is read as text and
cast with ``try_cast`` to the column type of :data:`spark.tables.MESSAGES`: a field of the wrong
type becomes null instead of making the whole line unreadable. A line is corrupt (kept aside with
its reason, never fatal) when it is not a JSON object, is truncated, or lacks ``schemaVersion``,
``timestamp``/``timestampMs``, ``level`` or ``event``.

Version 1 records have no ``timestampMs``/``arrivalMs``/``departureMs``: they are derived from the
ISO times; ``messageType``/``publicationId``/``shardId`` come from the application properties when
not at top level; a v1 ``sent_message``'s identity is its consumer and its address the source;
``rejected_message``'s reason is ``details.reason``.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from interchange.ground import logformat
from spark import tables

CORRUPT_COLUMN = "_corrupt_record"

#: Version-2 fields (the log contract) read even before the model lists them.
V2_FIELDS = (
    "timestampMs", "process", "messageId", "amqpMessageId", "consumer", "source", "messageType",
    "publicationId", "shardId", "shardKey", "shardSeq", "arrivalMs", "departureMs", "settledMs",
    "attempt", "outcome", "bodySha256", "expiryMs", "expirySource", "origin", "neighbour", "reason",
    "rawMessageHex",
)


def line_schema() -> StructType:
    """The schema lines are parsed with: every LogRecord field (and the v2 ones) as text."""
    names = list(logformat.LogRecord.model_fields)
    names += [name for name in V2_FIELDS if name not in names]
    return StructType([StructField(name, StringType(), True) for name in names]
                      + [StructField(CORRUPT_COLUMN, StringType(), True)])


# A key of a JSON object and the first token of its value. `"` inside a JSON string is always
# escaped, so `[{,]\s*"` only matches where a key starts.
_KEY_TOKEN = r'[{,]\s*"((?:[^"\\]|\\.)*)"\s*:\s*(-?[0-9][0-9.eE+-]*|.)'


def _kind(token: Column) -> Column:
    """The JSON kind of a value from its first token."""
    return (F.when(token == '"', "string").when(token.isin("t", "f"), "boolean").when(token == "n", "null")
            .when(token == "{", "object").when(token == "[", "array")
            .when(token.rlike("[.eE]"), "float").otherwise("integer"))


def _iso_ms(text: Column) -> Column:
    return F.unix_millis(text.try_cast("timestamp"))


def _typed(record: Column, name: str) -> Column:
    kind = tables.MESSAGES[name].dataType
    return record[name].try_cast(kind)


def parse(lines: DataFrame) -> DataFrame:
    """``value`` (a line) and ``file`` -> those columns plus ``r`` (the parsed line) and ``corruptReason``."""
    parsed = lines.withColumn("r", F.from_json("value", line_schema(),
                                                {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}))
    r = F.col("r")
    timestamp_ms = F.coalesce(r.timestampMs.try_cast("long"), _iso_ms(r.timestamp))
    reason = (F.when(r.isNull() | r[CORRUPT_COLUMN].isNotNull(), "not a JSON object (malformed or truncated)")
              .when(F.coalesce(r.schemaVersion.try_cast("int"), F.lit(0)) < 1, "schemaVersion missing or invalid")
              .when(timestamp_ms.isNull(), "timestamp missing or invalid")
              .when(r.event.isNull() | (r.event == ""), "event missing")
              .when(r.level.isNull(), "level missing"))
    return parsed.withColumn("timestampMs", timestamp_ms).withColumn("corruptReason", reason)


def _properties(raw: Column) -> tuple[Column, Column]:
    values = F.from_json(raw, tables.STRING_MAP)
    keys = F.regexp_extract_all(raw, F.lit(_KEY_TOKEN), 1)
    kinds = F.transform(F.regexp_extract_all(raw, F.lit(_KEY_TOKEN), 2), _kind)
    return values, F.when(raw.isNotNull(), F.map_from_arrays(keys, kinds))


def standard_columns(props: Column, kinds: Column) -> dict[str, Column]:
    """The columns of tables 1-7's properties (:data:`spark.tables.MESSAGES`) from the two property maps."""
    names = tables.STANDARD_FIELDS.names
    # "?": a property whose kind is not known (not expected: both maps come from the same object)
    kind_of = [F.when(F.map_contains_key(props, name), F.coalesce(kinds[name], F.lit("?"))).alias(name) for name in names]
    return {"standardProperties": F.struct(*[props[name].alias(name) for name in names]),
            "standardKinds": F.struct(*kind_of),
            "otherPropertyNames": F.filter(F.map_keys(props), lambda name: ~name.isin(*names))}


def _message_columns(r: Column, props: Column) -> dict[str, Column]:
    event = r.event
    details = F.from_json(r.details, tables.STRING_MAP)
    delivery = event.isin("sent_message", "dropped_message", "expired_message")
    return {
        "messageType": F.coalesce(r.messageType, props["messageType"]),
        "publicationId": F.coalesce(r.publicationId, props["publicationId"]),
        "publisherId": props["publisherId"],
        "shardId": F.coalesce(r.shardId.try_cast("long"), props["shardId"].try_cast("long")),
        "arrivalMs": F.coalesce(r.arrivalMs.try_cast("long"), _iso_ms(r.arrivalTime)),
        "departureMs": F.coalesce(r.departureMs.try_cast("long"), _iso_ms(r.departureTime)),
        "consumer": F.coalesce(r.consumer, F.when(event == "sent_message", r.identity)),
        "source": F.coalesce(r.source, F.when(delivery, r.address)),
        "reason": F.coalesce(r.reason, details["reason"]),
    }


def messages(parsed: DataFrame) -> DataFrame:
    """Valid message records of :func:`parse` in the layout of :data:`spark.tables.MESSAGES`."""
    r = F.col("r")
    # the two maps first, as columns: each expression below reads them without parsing the JSON again
    records = parsed.where(F.col("corruptReason").isNull() & r.event.isin(*tables.MESSAGE_EVENTS)).withColumns(
        dict(zip(("applicationProperties", "propertyKinds"), _properties(r.applicationProperties))))
    props, kinds = F.col("applicationProperties"), F.col("propertyKinds")
    derived = _message_columns(r, props)
    standard = standard_columns(props, kinds)
    columns: list[Column] = []
    for field in tables.MESSAGES.fields:
        name = field.name
        match name:
            case "timestampMs":
                column = F.col("timestampMs")
            case "applicationProperties":
                column = props
            case "propertyKinds":
                column = kinds
            case _ if name in standard:
                column = standard[name]
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
                    F.from_json(r.details, tables.STRING_MAP).alias("details"), F.col("file"),
                    F.coalesce(r.node, F.lit("unknown")).alias("node"), _date(F.col("timestampMs")).alias("date")))


def corrupt(parsed: DataFrame, ingested_ms: int) -> DataFrame:
    """Lines of :func:`parse` that are not log records, with file and reason."""
    return (parsed.where(F.col("corruptReason").isNotNull())
            .select(F.col("file"), F.col("value").alias("line"), F.col("corruptReason").alias("reason"),
                    F.lit(ingested_ms).cast("long").alias("ingestedMs")))


def _date(epoch_ms: Column) -> Column:
    return F.date_format(F.timestamp_millis(epoch_ms), "yyyy-MM-dd")
