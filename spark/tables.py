"""The pipeline's tables: explicit schemas and where each lives under an output directory.

Every job writes Parquet under one output root (``--output``)::

    <root>/messages/node=<n>/date=<yyyy-mm-dd>/   one row per message record (ingest)
    <root>/events/node=<n>/date=<yyyy-mm-dd>/     one row per other record: connections, links, II (ingest)
    <root>/corrupt/                               lines that are not log records, with file and reason (ingest)
    <root>/violations/                            one row per finding, every validate run appended
    <root>/rule_metrics/                          one row per (rule, check) and run: checked, violations (history)
    <root>/stream/violations/, <root>/stream/metrics/, <root>/stream/checkpoints/   (stream)

Times are epoch milliseconds (``...Ms``, long) in UTC; partition dates are UTC days. Readers
(the report, replay) rely on these schemas: they change only with a note in
``/work/notes/spark-tables.md`` and docs. This module imports only :mod:`pyspark.sql.types` and
the names of tables 1-7 (:mod:`interchange.ground.profile`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from interchange.ground.profile import PROPERTY_NAMES as STANDARD_PROPERTY_NAMES

_S, _L, _I = StringType(), LongType(), IntegerType()
#: map<string,string>: application properties and event details, values as text
STRING_MAP = MapType(StringType(), StringType())
_STRING_MAP = STRING_MAP


def _fields(*spec: tuple[str, object]) -> list[StructField]:
    return [StructField(name, kind, True) for name, kind in spec]  # type: ignore[arg-type]


#: struct<publisherId: string, ...>: one field per property of tables 1-7 (value text or JSON kind).
STANDARD_FIELDS = StructType(_fields(*[(name, _S) for name in STANDARD_PROPERTY_NAMES]))

#: The messages table's columns of the application properties (see :data:`MESSAGES`): tables 1-7's
#: values and kinds, every other property's value and kind.
PROPERTY_COLUMNS = ("standardProperties", "standardKinds", "otherProperties", "otherKinds")
#: The two maps of every property that earlier layouts stored (:func:`layout_version`).
EARLIER_PROPERTY_COLUMNS = ("applicationProperties", "propertyKinds")

#: The messages table's layout written now (:func:`layout_version`).
LAYOUT_VERSION = 3


def layout_version(columns: Sequence[str]) -> int:
    """The layout of a messages table with these columns: 1 the two maps of every property only (before
    2026-11-26), 2 the maps and tables 1-7's columns beside them, :data:`LAYOUT_VERSION` each value once
    (:data:`MESSAGES`). Layouts 1 and 2 are read (:func:`spark.ingest.read_messages`), not appended to."""
    if set(PROPERTY_COLUMNS) <= set(columns):
        return LAYOUT_VERSION
    return 2 if "standardProperties" in columns else 1


#: Message events (interchange.ground.logformat v2; v1 records fill what they have).
MESSAGE_EVENTS = ("received_message", "sent_message", "rejected_message",
                  "dropped_message", "expired_message", "unroutable_message")

_COMMON = (("schemaVersion", _I), ("timestampMs", _L), ("level", _S), ("event", _S), ("process", _I))

#: The ingested message records. Each application property is stored once, its value as text (a
#: JSON string unquoted, a number as written, JSON null as null) beside its JSON kind ("string",
#: "integer", "float", "boolean", "null", "object", "array"), because the log keeps AMQP types only
#: as JSON kinds and the table checks depend on them:
#: - the properties of tables 1-7 as struct fields (validate's table checks read a field directly,
#:   where a map is searched key by key for every lookup): ``standardProperties.<name>`` the value
#:   text (null when absent or JSON null), ``standardKinds.<name>`` its kind (null when absent);
#: - every other property in two maps, ``otherProperties`` (name -> value text) and ``otherKinds``
#:   (name -> kind), in the order written; both null when no properties were logged.
#: :func:`spark.parse.all_properties` puts the whole set back together as one map (the selector
#: what-if, replay). Tables of earlier layouts (:func:`layout_version`) are read through
#: :func:`spark.ingest.read_messages`, which derives these columns.
MESSAGES = StructType(_fields(
    *_COMMON,
    ("messageId", _S), ("amqpMessageId", _S), ("address", _S), ("identity", _S), ("publisher", _S),
    ("consumer", _S), ("source", _S), ("messageType", _S), ("publicationId", _S), ("publisherId", _S),
    ("shardId", _L), ("shardKey", _S), ("shardSeq", _L),
    ("arrivalMs", _L), ("departureMs", _L), ("settledMs", _L), ("attempt", _I), ("outcome", _S),
    ("size", _L), ("bodySha256", _S), ("expiryMs", _L), ("expirySource", _S),
    ("origin", _S), ("neighbour", _S), ("reason", _S),
    ("standardProperties", STANDARD_FIELDS), ("standardKinds", STANDARD_FIELDS),
    ("otherProperties", _STRING_MAP), ("otherKinds", _STRING_MAP),
    ("bodyContentHex", _S), ("rawMessageHex", _S),
    ("file", _S),
    ("node", _S), ("date", _S),  # partition columns, last
))

#: Every other record: connect/disconnect, links, SASL/TLS refusals, II events (``ii_*``).
#: ``details`` values are text (nested objects as JSON).
EVENTS = StructType(_fields(*_COMMON, ("details", _STRING_MAP), ("file", _S), ("node", _S), ("date", _S)))

#: Lines that could not be read as a log record; never fatal, kept for the auditor.
CORRUPT = StructType(_fields(("file", _S), ("line", _S), ("reason", _S), ("ingestedMs", _L)))

#: One finding. ``rule`` is the spec requirement (IP_xxx), ``check`` the stable name of the
#: check within it (a requirement may have several), ``requirement`` its text.
#: ``severity``: "error" (a shall is broken), "warning" (a should, or a message lost),
#: "info" (accounted for, e.g. an expiry or a re-published copy).
VIOLATIONS = StructType(_fields(
    ("runId", _S), ("runMs", _L), ("rule", _S), ("check", _S), ("requirement", _S), ("severity", _S),
    ("node", _S), ("process", _I), ("event", _S), ("timestampMs", _L), ("messageId", _S),
    ("publicationId", _S), ("messageType", _S), ("publisher", _S), ("consumer", _S),
    ("property", _S), ("observed", _S), ("expected", _S), ("file", _S),
))

#: One row per (rule, check) and run: how many records or groups were checked, how many failed.
RULE_METRICS = StructType(_fields(
    ("runId", _S), ("runMs", _L), ("input", _S), ("rule", _S), ("check", _S), ("requirement", _S),
    ("severity", _S), ("checked", _L), ("violations", _L),
))

#: Windowed traffic metrics of the stream job (1-minute event-time windows per node, event, type).
STREAM_METRICS = StructType(_fields(
    ("windowStartMs", _L), ("windowEndMs", _L), ("node", _S), ("event", _S), ("messageType", _S),
    ("records", _L), ("latencyMaxMs", _L), ("latencyAvgMs", DoubleType()), ("overLatency", _L),
))


@dataclass(frozen=True)
class Layout:
    """Where each table lives under an output root (local path or any Hadoop URI)."""

    root: str

    def _at(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def messages(self) -> str:
        return self._at("messages")

    @property
    def events(self) -> str:
        return self._at("events")

    @property
    def corrupt(self) -> str:
        return self._at("corrupt")

    @property
    def violations(self) -> str:
        return self._at("violations")

    @property
    def rule_metrics(self) -> str:
        return self._at("rule_metrics")

    @property
    def stream_violations(self) -> str:
        return self._at("stream", "violations")

    @property
    def stream_metrics(self) -> str:
        return self._at("stream", "metrics")

    def checkpoint(self, query: str) -> str:
        return self._at("stream", "checkpoints", query)

    def is_ingested(self) -> bool:
        """True when ``root`` is a local ingest output (has a messages table)."""
        return (Path(self.root) / "messages").is_dir()
