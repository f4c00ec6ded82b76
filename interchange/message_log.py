"""The JSON-lines event and message log, switchable at run time (IP_009/010/016/119/120/121/138).

Records (:mod:`interchange.logformat`, version 2) are formatted on the event loop and written by a
background thread, so logging never blocks the loop on disk I/O. :class:`LogSettings` can be
replaced at any time (e.g. through the admin HTTP endpoint) without a restart.

Rotation (:class:`Rotation`, the ``[log]`` keys ``rotate_bytes`` / ``rotate_seconds``): the writer
closes the active file when it reaches the size or the age limit, at a clean close, and at start
when a previous run left it non-empty, and renames it to an immutable name in the same directory,
``<stem>-<UTC %Y%m%dT%H%M%S%f>-<n>.jsonl`` (:func:`rotated_name`), never written to again. The
active file keeps its configured name, which must not end in ``.jsonl``: a reader of
``<dir>/*.jsonl`` (Spark's file stream only reads new files) then only sees complete files, and
one of those plus the active file sees every record exactly once.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import queue
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from proton import Message
from pydantic import BaseModel, ConfigDict, Field

from interchange import logformat
from interchange.broker.message import BrokerMessage
from interchange.timing import now_ms

#: Facts decoded from a message for its records, kept for this many recent messages (a message is
#: logged once received and once per delivery).
FACTS_CACHE = 1024


class LogSettings(BaseModel):
    """What is logged. IP_138: four levels; IP_119: properties; IP_120: payload; ``raw``: the whole
    encoded message as hex (``rawMessageHex``, for a byte-exact replay)."""

    model_config = ConfigDict(extra="forbid")

    level: logformat.Level = "info"
    properties: bool = False
    payload: bool = False
    raw: bool = False


class Rotation(BaseModel):
    """When the active log file is closed and renamed (None: never, by that measure)."""

    model_config = ConfigDict(extra="forbid")

    rotate_bytes: int | None = Field(default=None, ge=1, description="rotate once the file holds this many bytes")
    rotate_seconds: float | None = Field(default=None, gt=0, description="rotate once the file is this old")

    @property
    def enabled(self) -> bool:
        return self.rotate_bytes is not None or self.rotate_seconds is not None


def rotated_name(active: Path, closed_at: dt.datetime, number: int) -> Path:
    """The immutable name of a rotated log file: ``<stem>-<UTC %Y%m%dT%H%M%S%f>-<n>.jsonl``."""
    stamp = closed_at.astimezone(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    return active.with_name(f"{active.stem}-{stamp}-{number:04d}.jsonl")


class LogWriter:
    """Writes lines to the active file (or a stream) from its own thread and rotates the file.

    One thread owns the file: :meth:`put` only queues a line, so the event loop never waits on
    disk I/O; the thread wakes up at the age limit even when nothing is logged.
    """

    def __init__(self, path: Path | None, stream: TextIO | None, rotation: Rotation | None = None) -> None:
        self.path = path
        self.rotation = rotation or Rotation()
        if path is not None and self.rotation.enabled and path.suffix == ".jsonl":
            raise ValueError(f"log path {path}: the active file must not end in .jsonl when rotating "
                             "(readers of <dir>/*.jsonl would see it before it is complete)")
        self._stream = stream if stream is not None else sys.stderr
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._file: TextIO | None = None
        self._bytes = 0
        self._opened = time.monotonic()
        self._rotated = 0
        self.rotated_files: list[Path] = []  #: files this writer renamed, in order
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if self.rotation.enabled and path.exists() and path.stat().st_size:
                self._rename()  # a previous run's file: complete it first
            self._open()
        self._thread = threading.Thread(target=self._run, name="json-log-writer", daemon=True)
        self._thread.start()

    def put(self, line: str) -> None:
        self._queue.put(line)

    def close(self) -> None:
        """Write what is queued, rotate a non-empty file (when rotating), stop the thread."""
        self._queue.put(None)
        self._thread.join()

    def _open(self) -> None:
        assert self.path is not None
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by _rotate/_run
        self._bytes = self._file.tell()
        self._opened = time.monotonic()

    def _timeout(self) -> float | None:
        seconds = self.rotation.rotate_seconds
        if seconds is None or self._file is None:
            return None
        return max(0.0, self._opened + seconds - time.monotonic())

    def _run(self) -> None:
        while True:
            try:
                line = self._queue.get(timeout=self._timeout())
            except queue.Empty:
                line = ""  # the age limit passed with nothing to write
            if line is None:
                break
            try:
                if line:
                    self._write(line)
                self._rotate_if_due()
            except OSError as exc:  # disk full, directory gone: say so, keep serving (lines may be lost)
                print(f"json log: {exc}", file=sys.stderr)
        if self._file is not None:
            if self.rotation.enabled and self._bytes:
                self._rotate(reopen=False)
            else:
                self._file.close()

    def _write(self, line: str) -> None:
        if self._file is None:
            self._stream.write(line + "\n")
            self._stream.flush()
            return
        data = line + "\n"
        self._file.write(data)
        self._bytes += len(data.encode("utf-8")) if not data.isascii() else len(data)
        if self._queue.empty():
            self._file.flush()

    def _rotate_if_due(self) -> None:
        if self._file is None or not self._bytes:
            return
        limit = self.rotation.rotate_bytes
        seconds = self.rotation.rotate_seconds
        if (limit is not None and self._bytes >= limit) or (
                seconds is not None and time.monotonic() - self._opened >= seconds):
            self._rotate(reopen=True)

    def _rotate(self, reopen: bool) -> None:
        assert self._file is not None
        self._file.close()
        self._file = None
        self._rename()
        if reopen:
            self._open()

    def _rename(self) -> None:
        assert self.path is not None
        self._rotated += 1
        target = rotated_name(self.path, dt.datetime.now(dt.timezone.utc), self._rotated)
        self.path.rename(target)
        self.rotated_files.append(target)


class JsonLog:
    """Writes :mod:`interchange.logformat` records of one broker process to a file or stream."""

    def __init__(self, node: str, path: Path | None = None, stream: TextIO | None = None,
                 settings: LogSettings | None = None, process: int = 0, rotation: Rotation | None = None) -> None:
        self.node = node
        self.process = process  #: the broker process writing (0 = the node process)
        self.boot_ms = now_ms()  #: in message ids, so they stay unique across restarts
        self.settings = settings or LogSettings()
        self._on_change: list[Callable[[], None]] = []
        self._writer = LogWriter(path, stream, rotation)
        self._facts: dict[int, tuple[str | None, str]] = {}

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
        self._writer.put(logformat.dumps(record))

    def _base(self, level: str, event: str) -> dict:
        now = now_ms()
        return {"schemaVersion": logformat.SCHEMA_VERSION, "timestamp": logformat.iso_ms(now), "timestampMs": now,
                "level": level, "event": event, "node": self.node, "process": self.process}

    def message_id(self, seq: int) -> str:
        return logformat.message_id(self.node, self.process, self.boot_ms, seq)

    def event(self, level: str, event: str, fields: dict) -> None:
        """Connection, link and error events (IP_009)."""
        if self._enabled(level):
            record = self._base(level, event)
            record["details"] = fields
            self._write(record)

    def message(self, event: str, message: BrokerMessage, address: str | None, **fields: object) -> None:
        """A message record (IP_010/119/120 and the audit fields of version 2); ``fields`` are the
        event's own. Records of :data:`logformat.ALWAYS_LOGGED_EVENTS` are written whatever the
        switches; the others only while message logging is on."""
        level = _LEVELS.get(event, "info")
        if not self._enabled(level) or not (self.messages_on or event in logformat.ALWAYS_LOGGED_EVENTS):
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
        """IP_016: a dropped malformed message is always logged (as a warning)."""
        if not self._enabled("warning"):
            return
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
        self._writer.close()


_LEVELS = {"rejected_message": "warning", "dropped_message": "warning"}


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


