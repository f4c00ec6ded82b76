"""The node's JSON-lines log format: one shared, versioned schema (appendix F, IP_009/010/016/119/120/121/128).

Writers (the broker, the II) and readers (the Spark audit pipeline) both use this module; each line
is one JSON object of schema version 2, and :func:`parse_line` reads version 1 lines too (the v2
fields then read as null). Every message record carries a node-unique ``messageId``
(:func:`message_id`), a ``shardKey`` (:func:`shard_key`) and, after validation, a per-shard
``shardSeq`` (IP_128-130); the records in :data:`ALWAYS_LOGGED_EVENTS` are written whatever the
logging switches, so an audit can account for every message. :data:`FIELDS` lists every field with
its type and nullability for readers that build an explicit schema (e.g. ``spark.tables``).
Every field and event, with an example: docs/log-format.md.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import math
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 2
#: Versions :func:`parse_line` accepts.
READABLE_VERSIONS = frozenset({1, 2})

Level = Literal["debug", "info", "warning", "error"]
LEVELS: dict[str, int] = {"debug": 10, "info": 20, "warning": 30, "error": 40}

MESSAGE_EVENTS = frozenset({"received_message", "sent_message", "rejected_message", "dropped_message",
                            "expired_message", "unroutable_message"})
#: Message records written whatever the property/payload/raw switches and the level (an audit accounts
#: for every message; IP_016 and IP_138: a level chooses what else is stored, never the audit trail).
ALWAYS_LOGGED_EVENTS = frozenset({"rejected_message", "dropped_message", "expired_message", "unroutable_message"})

Outcome = Literal["accepted", "released", "modified", "rejected", "presettled", "settled", "link_lost"]
OUTCOMES: tuple[str, ...] = typing.get_args(Outcome)
ExpirySource = Literal["ttl", "absolute-expiry-time", "default"]
EXPIRY_SOURCES: tuple[str, ...] = typing.get_args(ExpirySource)
Origin = Literal["local", "federated"]
DropReason = Literal["buffer_full", "node_memory", "source_deleted", "loop", "hop_limit", "duplicate"]
DROP_REASONS: tuple[str, ...] = typing.get_args(DropReason)


class LogRecord(BaseModel):
    """One log line, as read back by consumers of the log (e.g. the Spark pipeline); fields as in
    docs/log-format.md, in the order of :data:`FIELDS`."""

    model_config = ConfigDict(extra="allow")

    schemaVersion: int = Field(ge=1)
    timestamp: str
    timestampMs: int | None = None
    level: Level
    event: str
    node: str | None = None
    process: int | None = None
    messageId: str | None = None
    amqpMessageId: str | None = None
    address: str | None = None
    identity: str | None = None
    publisher: str | None = None
    consumer: str | None = None
    source: str | None = None
    messageType: str | None = None
    publicationId: str | None = None
    shardId: int | None = None
    shardKey: str | None = None
    shardSeq: int | None = None
    arrivalTime: str | None = None
    arrivalMs: int | None = None
    departureTime: str | None = None
    departureMs: int | None = None
    settledMs: int | None = None
    attempt: int | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    size: int | None = None
    bodySha256: str | None = None
    expiryMs: int | None = None
    expirySource: ExpirySource | None = None
    origin: Origin | None = None
    neighbour: str | None = None
    applicationProperties: dict[str, Any] | None = None
    bodyContentHex: str | None = None
    rawMessageHex: str | None = None
    details: dict[str, Any] | None = None


class LogField(NamedTuple):
    """One field of the schema: ``type`` is str, int or dict (a JSON object)."""

    name: str
    type: type
    nullable: bool


def _field_type(annotation: object) -> tuple[type, bool]:
    union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    args = typing.get_args(annotation) if union else (annotation,)
    nullable = type(None) in args
    (kind,) = [a for a in args if a is not type(None)]
    origin = typing.get_origin(kind)
    if origin is Literal:
        return type(typing.get_args(kind)[0]), nullable
    return (origin or kind), nullable  # dict[str, Any] -> dict


#: Every field of a version-2 record, in order: (name, Python type, nullable). ``timestamp``,
#: ``level``, ``event`` and ``schemaVersion`` are never null; the others are null (or absent)
#: when not known or not applicable to the event.
FIELDS: tuple[LogField, ...] = tuple(
    LogField(name, *_field_type(info.annotation)) for name, info in LogRecord.model_fields.items())


#: (second, its ISO-8601 text up to the ms): records come many to a second, and the date's formatting
#: costs more than the rest of a small record's line (one tuple: replaced whole, safe across threads)
_last_second: tuple[int, str] = (-1, "")


def iso_ms(epoch_ms: int) -> str:
    """Milliseconds since the epoch as ISO-8601 UTC with ms precision (IP_010)."""
    global _last_second
    seconds, ms = divmod(int(epoch_ms), 1000)
    last = _last_second
    if last[0] != seconds:
        last = _last_second = (seconds, dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S."))
    return f"{last[1]}{ms:03d}Z"


def message_id(node: str, process: int, boot_ms: int, seq: int) -> str:
    """The node-unique id of a message: ``<node>/<process>/<bootMs>/<seq>``."""
    return f"{node}/{process}/{boot_ms}/{seq}"


def shard_key(publication_id: object, shard_id: object) -> str:
    """``<publicationId>#<shardId>`` (IP_128: no shardId means shard 1)."""
    return f"{publication_id}#{shard_id}"


def json_value(value: object) -> object:
    """An application-property value as JSON (AMQP types without a JSON form become strings)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and value != value:  # NaN is not JSON
            return "NaN"
        return value if type(value) in (bool, int, float, str, type(None)) else _plain(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)


def _plain(value: object) -> object:
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return str(value)


def json_properties(properties: Mapping[str, object]) -> dict[str, object]:
    return {str(k): json_value(v) for k, v in properties.items()}


#: the one encoder of every line (``json.dumps`` with these options would build one per call)
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=str).encode
_encode_text: Callable[[str], str] = getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring


def _flat_object(details: object) -> str | None:
    """``details`` as :func:`dumps` encodes it when it is a dict of text keys and text, int, finite float
    or None values (a connection record's), in a third of the time; None for anything else."""
    if type(details) is not dict:
        return None
    parts = []
    for key, value in details.items():
        kind = type(value)
        if type(key) is not str:
            return None
        if kind is str:
            parts.append(f"{_encode_text(key)}:{_encode_text(value)}")
        elif value is None:
            parts.append(f"{_encode_text(key)}:null")
        elif kind is int or (kind is float and math.isfinite(value)):
            parts.append(f"{_encode_text(key)}:{value!r}")
        else:
            return None
    return "{" + ",".join(parts) + "}"


def dumps(record: Mapping[str, object]) -> str:
    """Serialize one record as a single line."""
    return _encode(record)


class EventLines:
    """The lines of one writer's event records (``schemaVersion``, ``timestamp``, ``timestampMs``,
    ``level``, ``event``, ``node``, ``process``, ``details``): byte for byte what :func:`dumps` makes
    of that record, with everything but the time and the details encoded once per (level, event).
    Connection records come in bursts (a thousand deadlines passing together) on the event loop."""

    __slots__ = ("_node", "_process", "_middles")

    def __init__(self, node: str | None, process: int | None) -> None:
        self._node, self._process = node, process
        self._middles: dict[tuple[str, str], str] = {}

    def line(self, epoch_ms: int, level: str, event: str, details: object) -> str:
        middle = self._middles.get((level, event))
        if middle is None:
            middle = self._middles[(level, event)] = (
                f',"level":{_encode(level)},"event":{_encode(event)},"node":{_encode(self._node)},'
                f'"process":{_encode(self._process)},"details":')
        return (f'{{"schemaVersion":{SCHEMA_VERSION},"timestamp":"{iso_ms(epoch_ms)}","timestampMs":{epoch_ms:d}'
                f"{middle}{_flat_object(details) or _encode(details)}}}")


def parse_line(line: str) -> LogRecord:
    """Parse and validate one log line (version 1 or 2); raises ValueError for a malformed one."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("a log line must be a JSON object")
    version = data.get("schemaVersion")
    if isinstance(version, int) and not isinstance(version, bool) and version not in READABLE_VERSIONS:
        raise ValueError(f"schemaVersion {version} is not readable here (versions {sorted(READABLE_VERSIONS)})")
    return LogRecord.model_validate(data)
