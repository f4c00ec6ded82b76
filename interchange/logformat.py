"""The node's JSON-lines log format: one shared, versioned schema (appendix F, IP_009/010/119/120/121).

Writers (the broker, the II) and readers (the Spark audit pipeline) both use this module.
Each line is one JSON object::

    {"schemaVersion": 1, "timestamp": "2021-07-15T12:30:23.317Z", "level": "info",
     "event": "received_message", "node": "ixc-a", "address": "denm-in", "identity": "actor-1",
     "publisher": "actor-1",
     "arrivalTime": "2021-07-15T12:30:23.317Z", "size": 204,
     "applicationProperties": {...}, "bodyContentHex": "2040..."}

``identity`` is the connection's CN (the publisher for ``received_message``, the consumer for
``sent_message``, which also carries ``departureTime``); ``publisher`` is the publisher's CN.
``applicationProperties`` and ``bodyContentHex`` are the two fields of appendix F; they are present
only while property / payload logging is switched on (IP_119/120). Arrival and departure times
have millisecond precision (IP_010). Non-message events (connect, disconnect, link_attach,
link_detach, link_refused, sasl_failed, transport_error, rejected_message, ...) carry their
fields in ``details``.
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Level = Literal["debug", "info", "warning", "error"]
LEVELS: dict[str, int] = {"debug": 10, "info": 20, "warning": 30, "error": 40}

MESSAGE_EVENTS = frozenset({"received_message", "sent_message", "rejected_message"})


class LogRecord(BaseModel):
    """One log line, as read back by consumers of the log (e.g. the Spark pipeline)."""

    model_config = ConfigDict(extra="allow")

    schemaVersion: int = Field(ge=1)
    timestamp: str
    level: Level
    event: str
    node: str | None = None
    address: str | None = None
    identity: str | None = None
    publisher: str | None = None
    arrivalTime: str | None = None
    departureTime: str | None = None
    size: int | None = None
    applicationProperties: dict[str, Any] | None = None
    bodyContentHex: str | None = None
    details: dict[str, Any] | None = None


def iso_ms(epoch_ms: int) -> str:
    """Milliseconds since the epoch as ISO-8601 UTC with ms precision (IP_010)."""
    seconds, ms = divmod(int(epoch_ms), 1000)
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms:03d}Z"


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
    """Parse and validate one log line; raises ValueError for a malformed one."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("a log line must be a JSON object")
    return LogRecord.model_validate(data)
