"""The control channel between the node process and its extra broker processes (sans-I/O).

The node process owns the :class:`~interchange.broker.addresses.AddressBook`; every broker process
mirrors it through this channel: one JSON object per line over the worker's stdin, answers over
its stdout. :class:`ControlCodec` turns bytes into messages and back; the asyncio code in
:mod:`interchange.app.processes` and :mod:`interchange.app.worker` only moves them. Parent ->
worker: ``start``, ``put_target``, ``put_source``, ``remove``, ``log`` (IP_138), ``reload_tls``;
worker -> parent: ``ready`` or ``failed``; ``start`` carries the CPUs the worker places itself on
first. Each message's content: docs/broker.md ("Several broker processes").
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.ground.logfile import LogSettings

__all__ = ["ControlCodec", "ControlError", "ControlMessage", "Failed", "LogChange", "PutSource", "PutTarget",
           "Ready", "ReloadTls", "Remove", "Start"]

#: A longer line is a broken peer. The longest real ones are delivery targets: ~230 bytes per
#: capability they cover whose tiles differ (a TLEX bridge's), so over a million capabilities.
MAX_LINE = 256 * 1024 * 1024


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Ready(_Message):
    op: Literal["ready"] = "ready"
    amqps_port: int | None = None
    amqp_port: int | None = None
    admin_port: int | None = None


class Start(_Message):
    op: Literal["start"] = "start"
    index: int = Field(ge=1)
    processes: int = Field(ge=2)
    config: dict[str, Any]  #: a NodeConfig, paths resolved (validated by the worker)
    ports: Ready | None = None  #: listen exactly here (a restarted worker keeps its endpoints)
    #: the CPUs the worker places itself on before anything else (its ``[broker] process_cpus`` entry, else the
    #: node's CPUs as process 0 had them at start, so that a worker started from a confined thread does not
    #: inherit its narrowed set); None: as inherited
    cpus: list[int] | None = Field(default=None, min_length=1)


class PutTarget(_Message):
    op: Literal["put_target"] = "put_target"
    spec: TargetSpec


class PutSource(_Message):
    op: Literal["put_source"] = "put_source"
    spec: SourceSpec


class Remove(_Message):
    op: Literal["remove"] = "remove"
    address: str


class LogChange(_Message):
    op: Literal["log"] = "log"
    settings: LogSettings


class ReloadTls(_Message):
    op: Literal["reload_tls"] = "reload_tls"


class Failed(_Message):
    op: Literal["failed"] = "failed"
    reason: str


ControlMessage = Annotated[Start | PutTarget | PutSource | Remove | LogChange | ReloadTls | Ready | Failed,
                           Field(discriminator="op")]
_ADAPTER: TypeAdapter[ControlMessage] = TypeAdapter(ControlMessage)


class ControlError(ValueError):
    """A line on the control channel that is not a valid control message."""


class ControlCodec:
    """Line framing and (de)serialisation of control messages; fed bytes, returns messages."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._buffer = bytearray()
        self._max_line = max_line

    @staticmethod
    def encode(message: _Message) -> bytes:
        return message.model_dump_json().encode() + b"\n"

    def feed(self, data: bytes) -> list[Any]:
        """The complete messages in ``data`` (plus what was buffered); raise ControlError for a bad line."""
        self._buffer += data
        messages = []
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[:end + 1]
            if line.strip():
                messages.append(self._decode(line))
        if len(self._buffer) > self._max_line:
            raise ControlError(f"control line longer than {self._max_line} bytes")
        return messages

    @staticmethod
    def _decode(line: bytes) -> Any:
        try:
            return _ADAPTER.validate_python(json.loads(line))
        except (json.JSONDecodeError, UnicodeDecodeError, ValidationError) as exc:
            raise ControlError(f"invalid control message {line[:200]!r}: {exc}") from None
