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
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from interchange.ground import logformat
from spark import tables
from spark.line_patterns import KEY_TOKEN, LONE_SURROGATE, NON_NUMBER_OUTSIDE_STRINGS, NUMBER_GATE, NUMBER_OUTSIDE_STRINGS

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


def _kind(token: Column) -> Column:
    """The JSON kind of a value from its first token."""
    return (F.when(token == '"', "string").when(token.isin("t", "f"), "boolean").when(token == "n", "null")
            .when(token == "{", "object").when(token == "[", "array")
            .when(token.contains(".") | token.contains("e") | token.contains("E"), "float").otherwise("integer"))


def _iso_ms(text: Column) -> Column:
    return F.unix_millis(text.try_cast("timestamp"))


def _typed(record: Column, name: str) -> Column:
    kind = tables.MESSAGES[name].dataType
    return record[name].try_cast(kind)


#: A line longer than this (in bytes) is kept aside as corrupt, with its first :data:`KEPT_BYTES`:
#: the longest record the node writes carries a message under 500 KB (IP_012) twice as hex
#: (``bodyContentHex``, ``rawMessageHex``), ~2 MB; parsing a line of tens of MB would hold several
#: copies of it in the JVM at once.
MAX_LINE_BYTES = 8 * 1024 * 1024
KEPT_BYTES = 1024
#: Options of the one JSON parse of a line: JSON as RFC 8259 has it (no NaN/Infinity, no single quotes).
STRICT_JSON = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN, "allowNonNumericNumbers": "false",
               "allowSingleQuotes": "false"}
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
#: Every reason, in the order they are tested.
REASONS = (TOO_LONG, NOT_UTF8, SURROGATE, NON_NUMBER, TRAILING, NOT_OBJECT, MALFORMED, DUPLICATE_KEY,
           OUT_OF_RANGE, VERSION_MISSING, VERSION_UNKNOWN, "timestamp missing or invalid", "event missing",
           "level missing or unknown")

def _line(value: Column) -> Column:
    """The text parsed: without a UTF-8 byte order mark, cut to :data:`KEPT_BYTES` when too long."""
    text = F.when(F.startswith(value, F.lit("\ufeff")), F.substring(value, 2, 2**31 - 1)).otherwise(value)
    return F.when(F.octet_length(value) > MAX_LINE_BYTES, F.substring(value, 1, KEPT_BYTES)).otherwise(text)


def _sql_text(text: str) -> str:
    """A Spark SQL string literal of ``text``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


#: The parsed ``applicationProperties`` (a map: a key given twice is there once) and the first token of
#: each of its values (:data:`spark.line_patterns.KEY_TOKEN`), columns of :func:`parse` that
#: :func:`messages` reads.
PROPERTY_MAP, PROPERTY_TOKENS = "_propertyMap", "_propertyTokens"
#: Every key of the line and of its two nested objects (``applicationProperties.<k>``, ``details.<k>``).
#: The keys of ``applicationProperties`` are listed only when the tokens are not one per key of its map:
#: the tokens count every key given (K) plus keys of objects inside values (N >= 0), the map the
#: distinct keys (D <= K); tokens = D means K = D, no key given twice (and no third parse of the JSON).
_KEYS_SQL = ("concat(coalesce(json_object_keys(_line), array()), "
             f"coalesce(transform(CASE WHEN NOT (size({PROPERTY_TOKENS}) <=> size({PROPERTY_MAP})) "
             "THEN json_object_keys(r.applicationProperties) END, k -> concat('applicationProperties.', k)), array()), "
             "coalesce(transform(json_object_keys(r.details), k -> concat('details.', k)), array()))")
#: The keys of ``_keys`` listed more than once (SQL lambdas: see spark.rules' docstring).
_REPEATED_SQL = "array_distinct(filter(_keys, (k, i) -> array_position(_keys, k) != i + 1))"
#: Numbers of the line too large for a double (1e400: JSON's grammar has it, no reader can hold it).
#: (An empty group 1 is a string skipped: its try_cast is null.)
_HUGE_SQL = (f"filter(regexp_extract_all(_line, {_sql_text(NUMBER_OUTSIDE_STRINGS)}, 1), "
             "n -> abs(try_cast(n AS DOUBLE)) = double('infinity'))")
#: NaN or Infinity where a value stands, outside strings.
_NON_NUMBER_SQL = (f"exists(regexp_extract_all(_line, {_sql_text(NON_NUMBER_OUTSIDE_STRINGS)}, 1), "
                   "t -> t != '')")


def _json_reason(line: Column) -> Column:
    """Why the strict parse of ``line`` failed: the first applicable reason."""
    first = F.from_json(line, line_schema(), STRICT_JSON)
    return (F.when(F.expr(_NON_NUMBER_SQL), NON_NUMBER)
            .when(~F.ltrim(line).startswith("{"), NOT_OBJECT)
            .when(first.isNotNull() & first[CORRUPT_COLUMN].isNull(), TRAILING)
            .otherwise(MALFORMED))


def parse(lines: DataFrame) -> DataFrame:
    """``value`` (a line) and ``file`` -> those columns plus ``r`` (the parsed line) and ``corruptReason``.

    Also :data:`PROPERTY_MAP` and :data:`PROPERTY_TOKENS` (for :func:`messages`).
    One strict JSON parse of ``[<line>]`` reads the line and tells a line of several values apart;
    the reasons of a corrupt line are tested in the order of :data:`REASONS`, each only on the lines
    no earlier one explains. A line over :data:`MAX_LINE_BYTES` keeps only its first bytes.
    """
    value = F.col("value")
    too_long = F.octet_length(value) > MAX_LINE_BYTES
    parsed = (lines.withColumn("_line", _line(value))
              .withColumn("_values", F.from_json(F.concat(F.lit("["), F.col("_line"), F.lit("]")),
                                                 ArrayType(line_schema()), STRICT_JSON))
              .withColumn("r", F.when(F.size("_values") == 1, F.col("_values")[0]))
              .withColumns({PROPERTY_MAP: F.from_json(F.col("r.applicationProperties"), tables.STRING_MAP),
                            PROPERTY_TOKENS: F.regexp_extract_all(F.col("r.applicationProperties"), F.lit(KEY_TOKEN), 2)})
              .withColumn("_keys", F.expr(_KEYS_SQL)))
    line, r = F.col("_line"), F.col("r")
    timestamp_ms = F.coalesce(r.timestampMs.try_cast("long"), _iso_ms(r.timestamp))
    version = r.schemaVersion.try_cast("int")
    readable = ", ".join(map(str, READABLE_VERSIONS))
    reason = (F.when(too_long, TOO_LONG)
              .when(~F.is_valid_utf8(value), NOT_UTF8)
              .when(line.contains("\\u") & line.rlike(LONE_SURROGATE), SURROGATE)
              .when(F.col("_values").isNull(), _json_reason(line))
              .when(F.size("_values") != 1, TRAILING)
              .when(r.isNull() | r[CORRUPT_COLUMN].isNotNull(), NOT_OBJECT)
              .when(F.size("_keys") != F.size(F.array_distinct("_keys")),
                    F.concat(F.lit(DUPLICATE_KEY + ": "), F.array_join(F.expr(_REPEATED_SQL), ", ")))
              .when(line.rlike(NUMBER_GATE) & (F.size(F.expr(_HUGE_SQL)) > 0),
                    F.concat(F.lit(OUT_OF_RANGE + ": "), F.expr(_HUGE_SQL)[0]))
              .when(F.coalesce(version, F.lit(0)) < 1, VERSION_MISSING)
              .when(~version.isin(*READABLE_VERSIONS),
                    F.concat(F.lit(f"{VERSION_UNKNOWN} (versions {readable}): "), version.cast("string")))
              .when(timestamp_ms.isNull(), "timestamp missing or invalid")
              .when(r.event.isNull() | (r.event == ""), "event missing")
              .when(r.level.isNull() | ~r.level.isin(*LEVELS), "level missing or unknown"))
    return (parsed.withColumn("timestampMs", timestamp_ms).withColumn("corruptReason", reason)
            .withColumn("value", F.when(too_long, line).otherwise(value)).drop("_values", "_keys", "_line"))


def _kinds(raw: Column, values: Column, tokens: Column) -> Column:
    """The JSON kind of each property of ``values`` (the map of the object ``raw``), one per key of the map.

    ``tokens``: the first token of every value matched by :data:`spark.line_patterns.KEY_TOKEN` in ``raw``. Without an object
    of two keys or more inside a value they are the map's values in its order (a record's object has no
    repeated key, the map keeps the text's order): one regex pass, the keys from the map. Otherwise the
    keys of the nested objects were matched too, and each key's kind is looked up by its name (a second
    pass; "?" for a key not found, e.g. written with an escape).
    """
    keys = F.map_keys(values)
    aligned = F.map_from_arrays(keys, F.transform(tokens, _kind))
    by_name = F.map_from_arrays(F.regexp_extract_all(raw, F.lit(KEY_TOKEN), 1), F.transform(tokens, _kind))
    looked_up = F.map_from_arrays(keys, F.transform(keys, lambda key: F.coalesce(by_name[key], F.lit("?"))))
    return F.when(raw.isNotNull(), F.when(F.size(tokens) == F.size(keys), aligned).otherwise(looked_up))


def _standard_columns(props: Column, kinds: Column) -> dict[str, Column]:
    """:func:`standard_columns` from maps of the same keys (as :func:`messages` builds them): a kind is
    then null exactly when the property is absent, one map lookup instead of two."""
    names = tables.STANDARD_FIELDS.names
    return {"standardProperties": F.struct(*[props[name].alias(name) for name in names]),
            "standardKinds": F.struct(*[kinds[name].alias(name) for name in names]),
            "otherPropertyNames": F.filter(F.map_keys(props), lambda name: ~name.isin(*names))}


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
    # the map and the value tokens of parse, and the kinds as a column: each expression below reads
    # them without parsing the JSON or running the regex again
    records = (parsed.where(F.col("corruptReason").isNull() & r.event.isin(*tables.MESSAGE_EVENTS))
               .withColumn("applicationProperties", F.col(PROPERTY_MAP))
               .withColumn("propertyKinds", _kinds(r.applicationProperties, F.col(PROPERTY_MAP), F.col(PROPERTY_TOKENS))))
    props, kinds = F.col("applicationProperties"), F.col("propertyKinds")
    derived = _message_columns(r, props)
    standard = _standard_columns(props, kinds)
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
