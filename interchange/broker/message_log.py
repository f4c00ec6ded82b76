"""The broker's JSON-lines event and message log, switchable at run time (IP_009/010/016/119/120/121/138).

Records (:mod:`interchange.ground.logformat`, version 2) are formatted on the event loop from the
broker's messages and handed to a :class:`~interchange.ground.logfile.LogWriter`, whose thread
writes (and rotates) the file. On the event loop they are handed over together every
:data:`HAND_OVER_S`, not one by one: each hand-over wakes the writer thread, which then takes the
interpreter's lock from the loop, and on a busy machine a thread preempted while holding it stalls
the loop for milliseconds (a burst of connection records did so per record). Connection and error
events come in bursts too (a thousand stage deadlines passing within seconds): their lines are put
together from parts encoded once (:class:`~interchange.ground.logformat.EventLines`), a third of the
loop's time of formatting each record whole, and every record is still written, in order.
:class:`~interchange.ground.logfile.LogSettings` can be replaced at any time (e.g. through the admin
HTTP endpoint) without a restart.
"""
from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from proton import Message

from interchange.broker.message import BrokerMessage
from interchange.ground import logformat
from interchange.ground.logfile import LogSettings, LogWriter, Rotation
from interchange.ground.timing import now_ms

#: Facts decoded from a message for its records, kept for this many recent messages (a message is
#: logged once received and once per delivery).
FACTS_CACHE = 1024
#: On an event loop, records wait this long (seconds) to be handed to the writer thread together.
HAND_OVER_S = 0.005


class JsonLog:
    """Writes :mod:`interchange.ground.logformat` records of one broker process to a file or stream."""

    def __init__(self, node: str, path: Path | None = None, stream: TextIO | None = None,
                 settings: LogSettings | None = None, process: int = 0, rotation: Rotation | None = None) -> None:
        self.node = node
        self.process = process  #: the broker process writing (0 = the node process)
        self.boot_ms = now_ms()  #: in message ids, so they stay unique across restarts
        self.settings = settings or LogSettings()
        self._on_change: list[Callable[[], None]] = []
        self._writer = LogWriter(path, stream, rotation)
        self._event_lines = logformat.EventLines(node, process)
        #: lines formatted on the event loop, not yet handed to the writer (see HAND_OVER_S)
        self._pending: list[str] = []
        self._pending_lock = threading.Lock()  # records may come from other threads too
        self._hand_over_by = 0.0  #: when the pending lines are due (monotonic seconds)
        self._facts: dict[int, tuple[str | None, str]] = {}
        #: (level, event) -> records raised at warning or error level, counted whatever the level
        #: written (IP_137/138: an operator monitors errors and warnings; /metrics exports these)
        self.counts: dict[tuple[str, str], int] = {}

    @property
    def messages_on(self) -> bool:
        """True when message events are logged at all (properties, payload or raw switched on)."""
        settings = self.settings
        return settings.properties or settings.payload or settings.raw

    @property
    def rotated_files(self) -> list[Path]:
        return self._writer.rotated_files

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
        self._append(logformat.dumps(record))

    def _append(self, line: str) -> None:
        now = time.monotonic()
        with self._pending_lock:
            self._pending.append(line)
            first = len(self._pending) == 1
            if first:
                self._hand_over_by = now + HAND_OVER_S
        if first:
            try:
                asyncio.get_running_loop().call_later(HAND_OVER_S, self.hand_over)
            except RuntimeError:  # no event loop in this thread: at once
                self.hand_over()
        elif now > self._hand_over_by + 0.1:  # the loop that was to hand them over is gone
            self.hand_over()

    def hand_over(self) -> None:
        """Give the writer thread every line formatted so far (in one piece)."""
        with self._pending_lock:
            lines, self._pending = self._pending, []
        if lines:
            self._writer.put("\n".join(lines))

    def _base(self, level: str, event: str) -> dict:
        now = now_ms()
        return {"schemaVersion": logformat.SCHEMA_VERSION, "timestamp": logformat.iso_ms(now), "timestampMs": now,
                "level": level, "event": event, "node": self.node, "process": self.process}

    def message_id(self, seq: int) -> str:
        return logformat.message_id(self.node, self.process, self.boot_ms, seq)

    def _count(self, level: str, event: str) -> None:
        if level in COUNTED_LEVELS:
            key = (level, event)
            self.counts[key] = self.counts.get(key, 0) + 1

    def event(self, level: str, event: str, fields: dict) -> None:
        """Connection, link and error events (IP_009)."""
        self._count(level, event)
        if self._enabled(level):
            self._append(self._event_lines.line(now_ms(), level, event, fields))

    def message(self, event: str, message: BrokerMessage, address: str | None, **fields: object) -> None:
        """A message record (IP_010/119/120 and the audit fields of version 2); ``fields`` are the
        event's own. Records of :data:`logformat.ALWAYS_LOGGED_EVENTS` (the audit trail: rejections,
        drops, expiries, unroutable messages) are written whatever the switches and the level
        (IP_016, IP_138); the others only while message logging is on and their level is."""
        level = _LEVELS.get(event, "info")
        self._count(level, event)
        if event not in logformat.ALWAYS_LOGGED_EVENTS and not (self.messages_on and self._enabled(level)):
            return
        record = self._base(level, event)
        record["address"] = address
        record["identity"] = message.publisher
        self._message_fields(record, message)
        departure = fields.get("departureMs")
        if isinstance(departure, int):
            record["departureTime"] = logformat.iso_ms(departure)
        record.update(fields)
        self._write(record)

    def _message_fields(self, record: dict, message: BrokerMessage) -> None:
        properties = message.properties
        publication_id, shard_id = message.shard_key
        amqp_id, sha = self._decoded(message)
        federated = message.federated
        record.update(
            messageId=self.message_id(message.seq) if message.seq else None, amqpMessageId=amqp_id,
            publisher=message.publisher, messageType=_text(properties.get("messageType")),
            publicationId=_text(publication_id), shardId=shard_id,
            shardKey=logformat.shard_key(publication_id, shard_id) if publication_id is not None else None,
            shardSeq=message.shard_seq or None,
            arrivalTime=logformat.iso_ms(message.arrival_ms), arrivalMs=message.arrival_ms, size=message.size,
            bodySha256=sha, expiryMs=message.expiry_ms, expirySource=message.expiry_source,
            origin="federated" if federated else "local", neighbour=message.publisher if federated else None)
        self._switched_fields(record, message.raw, properties)

    def _switched_fields(self, record: dict, raw: bytes | bytearray, properties: dict | None) -> None:
        settings = self.settings
        if settings.properties and properties is not None:
            record["applicationProperties"] = logformat.json_properties(properties)
        if settings.payload:
            record["bodyContentHex"] = application_data(raw)[1].hex()
        if settings.raw:
            record["rawMessageHex"] = raw.hex()

    def _decoded(self, message: BrokerMessage) -> tuple[str | None, str]:
        """(amqpMessageId, bodySha256) of a message, decoded once for its several records."""
        facts = self._facts.get(message.seq) if message.seq else None
        if facts is None:
            amqp_id, body = application_data(message.raw)
            facts = (amqp_id, hashlib.sha256(body).hexdigest())
            if message.seq:
                if len(self._facts) >= FACTS_CACHE:
                    self._facts.clear()
                self._facts[message.seq] = facts
        return facts

    def rejected(self, identity: str, address: str, raw: bytes | bytearray, reason: str, seq: int,
                 federated: bool = False, message: BrokerMessage | None = None) -> None:
        """IP_016: a dropped malformed message is always logged (as a warning), whatever the level."""
        self._count("warning", "rejected_message")
        record = self._base("warning", "rejected_message")
        record["address"] = address
        record["identity"] = identity
        if message is not None:
            self._message_fields(record, message)
        else:
            amqp_id, body = application_data(raw)
            record.update(publisher=identity, amqpMessageId=amqp_id, size=len(raw),
                          bodySha256=hashlib.sha256(body).hexdigest(),
                          origin="federated" if federated else "local", neighbour=identity if federated else None)
            self._switched_fields(record, raw, None)
        record["messageId"] = self.message_id(seq)
        record["reason"] = reason
        record["details"] = {"reason": reason}
        self._write(record)

    def close(self) -> None:
        self.hand_over()
        self._writer.close()


_LEVELS = {"rejected_message": "warning", "dropped_message": "warning"}
#: the levels whose records are counted for the metrics
COUNTED_LEVELS = frozenset({"warning", "error"})


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def application_data(raw: bytes | bytearray) -> tuple[str | None, bytes]:
    """(AMQP message-id as text or None, the message's application data): the body's bytes for a
    data or a string body, else the whole message (also when it cannot be decoded)."""
    message = Message()
    try:
        message.decode(raw)  # type: ignore[arg-type]  # proton says bytes; ffi.from_buffer takes any buffer
    except Exception:  # noqa: BLE001 - an undecodable message is logged whole
        return None, bytes(raw)
    amqp_id = message.id
    if isinstance(amqp_id, (bytes, bytearray)):
        amqp_id = bytes(amqp_id).hex()
    body = message.body
    if isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)
    elif isinstance(body, str):
        data = body.encode("utf-8")
    else:
        data = bytes(raw)
    return (None if amqp_id is None else str(amqp_id)), data


