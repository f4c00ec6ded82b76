"""The node's JSON-lines log format: one shared, versioned schema (appendix F, IP_009/010/016/119/120/121/128).

Writers (the broker, the II) and readers (the Spark audit pipeline) both use this module. Each
line is one JSON object. Schema version 2 (this one) adds what an audit needs to account for every
message; readers accept version 1 lines too (:func:`parse_line`; v1 lacks the v2 fields, which
then read as null). Example (a received DENM, property logging on)::

    {"schemaVersion": 2, "timestamp": "2021-07-15T12:30:23.317Z", "timestampMs": 1626352223317,
     "level": "info", "event": "received_message", "node": "ixc-a", "process": 0,
     "messageId": "ixc-a/0/1626350000000/17", "amqpMessageId": "m-42", "address": "denm-in",
     "identity": "actor-1", "publisher": "actor-1", "messageType": "DENM",
     "publicationId": "NL00001:1", "shardId": 1, "shardKey": "NL00001:1#1", "shardSeq": 5,
     "arrivalTime": "2021-07-15T12:30:23.317Z", "arrivalMs": 1626352223317, "size": 204,
     "bodySha256": "9f86...", "expiryMs": 1626352223917, "expirySource": "default",
     "origin": "local", "neighbour": null, "applicationProperties": {...}}

Fields of every record
    ``schemaVersion`` (int): 2 (1 for old lines). ``timestamp`` (str): when the record was
    written, ISO-8601 UTC with ms precision (IP_010). ``timestampMs`` (int): the same in ms since
    the epoch. ``level`` (str): debug/info/warning/error (IP_138). ``event`` (str): the record
    kind. ``node`` (str): the node's name. ``process`` (int): the broker process that wrote it
    (0 = the node process, k = broker worker k; ``interchange.broker.processes``).
    ``details`` (object): the fields of non-message events (connect, disconnect, link_attach,
    link_detach, link_refused, sasl_failed, tls_refused, transport_error, the II's ii_* events,
    ...), as in version 1; ``rejected_message`` keeps its v1 ``details.reason`` too.

Fields of message records (events in :data:`MESSAGE_EVENTS`; null when not known)
    ``messageId`` (str): node-unique id assigned at admission, ``<node>/<process>/<bootMs>/<seq>``
    (:func:`message_id`): bootMs is the process's start in ms since the epoch (ids stay unique
    across restarts), seq a per-process counter from 1; rejected messages take one from the same
    counter. Every record about one message repeats its id.
    ``amqpMessageId`` (str): the AMQP properties message-id as a string, when the publisher set it.
    ``address`` (str): the target for received/rejected/unroutable (and expired-on-arrival)
    records; the source for sent/dropped/expired records. ``identity`` (str): the CN of the
    connection the record is about (the publisher, or the consumer of ``sent_message``).
    ``publisher`` (str): the publisher's CN (the neighbour's for federated data).
    ``messageType``, ``publicationId`` (str), ``shardId`` (int, 1 when absent: IP_128): from the
    application properties, always present when known, even with property logging off.
    ``shardKey`` (str): ``<publicationId>#<shardId>`` (:func:`shard_key`). ``shardSeq`` (int):
    1, 2, 3, ... per shardKey in admission order within the process (IP_128-130 order audits);
    assigned to messages that passed validation only.
    ``arrivalTime`` (str, ISO ms) / ``arrivalMs`` (int): admission time (IP_010).
    ``size`` (int): bytes of the encoded message. ``bodySha256`` (str): hex sha256 of the
    application data (the body bytes as delivered; the whole message when it has no binary or
    text body). ``expiryMs`` (int): when it expires (IP_033). ``expirySource`` (str): what set it,
    one of :data:`EXPIRY_SOURCES` (header ttl, properties absolute-expiry-time, or the
    messageType's default). ``origin`` (str): ``local`` or ``federated``; ``neighbour`` (str):
    the CN of the neighbour interchange federated data came from, else null.
    ``applicationProperties`` (object) and ``bodyContentHex`` (str): the two fields of appendix F,
    present only while property (IP_119) / payload (IP_120) logging is on.
    ``rawMessageHex`` (str): the whole encoded AMQP message (header, properties, application
    properties, body, ...) as hex, present only while the ``raw`` log switch is on (byte-exact
    replay).

Per event
    ``received_message`` (info): written while message logging is on (properties, payload or raw).
    ``sent_message`` (info, while message logging is on): one per delivery attempt, written when
    the delivery is settled: ``consumer`` (CN), ``source`` (address), ``attempt`` (1-based
    delivery attempt of this message on this source), ``departureTime``/``departureMs`` (IP_010),
    ``settledMs``, ``outcome`` (one of :data:`OUTCOMES`: the consumer's outcome; ``presettled``
    for a pre-settled link; ``settled`` when the consumer settled without an outcome;
    ``link_lost`` when the link or connection went away first, and the message went back to
    its source).
    ``rejected_message`` (warning, always; IP_016): ``reason`` (also in ``details.reason``).
    ``dropped_message`` (warning, always): ``source``, ``reason`` (one of :data:`DROP_REASONS`:
    ``buffer_full``, the source's bounded buffer evicted its oldest message, IP_032;
    ``source_deleted``, the source was deleted, e.g. a subscription withdrawn, with it buffered;
    ``loop`` and ``hop_limit``, an imported message whose hop trace names this interchange or
    that went over its hop limit, :mod:`interchange.broker.hop_trace`: ``source`` is null and
    ``trace`` lists the interchanges it passed; ``duplicate``, an imported message that source
    got over another route lately, multi-hop route changes,
    :mod:`interchange.broker.import_duplicates`).
    ``expired_message`` (info, always): ``source`` (null when it had expired on arrival), the
    message expired before it was delivered there (IP_033).
    ``unroutable_message`` (info, always): no source took the message.
    The always-on records carry the same identifying fields as ``received_message``, so an
    audit can account for every message whatever the switches.

:data:`FIELDS` lists every field with its Python type and nullability, in a fixed order, for
readers that build an explicit schema (e.g. ``spark.tables``).
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import types
import typing
import uuid
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 2
#: Versions :func:`parse_line` accepts.
READABLE_VERSIONS = frozenset({1, 2})

Level = Literal["debug", "info", "warning", "error"]
LEVELS: dict[str, int] = {"debug": 10, "info": 20, "warning": 30, "error": 40}

MESSAGE_EVENTS = frozenset({"received_message", "sent_message", "rejected_message", "dropped_message",
                            "expired_message", "unroutable_message"})
#: Message records written whatever the property/payload/raw switches (an audit accounts for every message).
ALWAYS_LOGGED_EVENTS = frozenset({"rejected_message", "dropped_message", "expired_message", "unroutable_message"})

Outcome = Literal["accepted", "released", "modified", "rejected", "presettled", "settled", "link_lost"]
OUTCOMES: tuple[str, ...] = typing.get_args(Outcome)
ExpirySource = Literal["ttl", "absolute-expiry-time", "default"]
EXPIRY_SOURCES: tuple[str, ...] = typing.get_args(ExpirySource)
Origin = Literal["local", "federated"]
DropReason = Literal["buffer_full", "source_deleted", "loop", "hop_limit", "duplicate"]
DROP_REASONS: tuple[str, ...] = typing.get_args(DropReason)


class LogRecord(BaseModel):
    """One log line, as read back by consumers of the log (e.g. the Spark pipeline); fields as in
    the module docstring, in the order of :data:`FIELDS`."""

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


def iso_ms(epoch_ms: int) -> str:
    """Milliseconds since the epoch as ISO-8601 UTC with ms precision (IP_010)."""
    seconds, ms = divmod(int(epoch_ms), 1000)
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms:03d}Z"


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


def dumps(record: Mapping[str, object]) -> str:
    """Serialize one record as a single line."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=str)


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
