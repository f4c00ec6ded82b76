"""The JSON-lines event and message log, switchable at run time (IP_009/010/119/120/121/138).

Records are formatted on the event loop and written by a background thread (a queue listener),
so logging never blocks the loop on disk I/O. :class:`LogSettings` can be replaced at any time
(e.g. through the admin HTTP endpoint) without a restart.
"""
from __future__ import annotations

import logging
import logging.handlers
import queue
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict

from interchange import logformat
from interchange.broker.message import BrokerMessage
from interchange.timing import now_ms


class LogSettings(BaseModel):
    """What is logged. IP_138: four levels; IP_119: properties; IP_120: payload."""

    model_config = ConfigDict(extra="forbid")

    level: logformat.Level = "info"
    properties: bool = False
    payload: bool = False


class JsonLog:
    """Writes :mod:`interchange.logformat` records to a file or stream."""

    def __init__(self, node: str, path: Path | None = None, stream: TextIO | None = None,
                 settings: LogSettings | None = None, process: int = 0) -> None:
        self.node = node
        self.process = process  #: the broker process writing (0 = the node process)
        self.settings = settings or LogSettings()
        self._on_change: list[Callable[[], None]] = []
        self._queue: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler: logging.Handler = logging.FileHandler(path, encoding="utf-8")
        else:
            handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._handler = handler
        self._listener = logging.handlers.QueueListener(self._queue, handler)
        self._listener.start()

    @property
    def messages_on(self) -> bool:
        """True when message events are logged at all (properties or payload switched on)."""
        return self.settings.properties or self.settings.payload

    def update(self, settings: LogSettings) -> None:
        """Switch logging at run time (no restart)."""
        self.settings = settings
        for callback in self._on_change:
            callback()

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every :meth:`update` (e.g. to switch per-message hooks)."""
        self._on_change.append(callback)

    def _enabled(self, level: str) -> bool:
        return logformat.LEVELS[level] >= logformat.LEVELS[self.settings.level]

    def _write(self, record: dict) -> None:
        self._queue.put(logging.makeLogRecord({"msg": logformat.dumps(record), "levelno": logging.INFO}))

    def _base(self, level: str, event: str) -> dict:
        now = now_ms()
        return {"schemaVersion": logformat.SCHEMA_VERSION, "timestamp": logformat.iso_ms(now), "timestampMs": now,
                "level": level, "event": event, "node": self.node, "process": self.process}

    def event(self, level: str, event: str, fields: dict) -> None:
        """Connection, link and error events (IP_009)."""
        if self._enabled(level):
            record = self._base(level, event)
            record["details"] = fields
            self._write(record)

    def message(self, event: str, message: BrokerMessage, address: str, departure_ms: int | None = None,
                identity: str | None = None) -> None:
        """A received or sent message with timestamps (IP_010), properties and payload (IP_119/120)."""
        if not self._enabled("info") or not self.messages_on:
            return
        record = self._base("info", event)
        record["address"] = address
        record["identity"] = identity or message.publisher
        record["publisher"] = message.publisher
        record["arrivalTime"] = logformat.iso_ms(message.arrival_ms)
        if departure_ms is not None:
            record["departureTime"] = logformat.iso_ms(departure_ms)
        record["size"] = message.size
        if self.settings.properties:
            record["applicationProperties"] = logformat.json_properties(message.properties)
        if self.settings.payload:
            record["bodyContentHex"] = body_hex(message.raw)
        self._write(record)

    def rejected(self, identity: str, address: str, raw: bytes | bytearray, reason: str) -> None:
        """IP_016: a dropped malformed message is always logged (as a warning)."""
        if not self._enabled("warning"):
            return
        record = self._base("warning", "rejected_message")
        record["address"] = address
        record["identity"] = identity
        record["size"] = len(raw)
        record["details"] = {"reason": reason}
        if self.settings.payload:
            record["bodyContentHex"] = raw.hex()
        self._write(record)

    def close(self) -> None:
        self._listener.stop()
        self._handler.close()


def body_hex(raw: bytes | bytearray) -> str:
    """Hex of the message's application data (appendix F ``bodyContentHex``)."""
    from proton import Message

    message = Message()
    try:
        message.decode(raw)  # type: ignore[arg-type]  # proton says bytes; ffi.from_buffer takes any buffer
    except Exception:  # noqa: BLE001 - an undecodable message is logged whole
        return raw.hex()
    body = message.body
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body).hex()
    if isinstance(body, str):
        return body.encode("utf-8").hex()
    return raw.hex()
