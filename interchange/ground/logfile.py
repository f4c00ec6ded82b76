"""The JSON-lines log's file: what is logged, when it rotates, the thread that writes it (IP_009/010/119/120/138).

:class:`LogSettings` says what is logged, :class:`Rotation` when the file rotates, and
:class:`LogWriter` writes it: :meth:`LogWriter.put` only queues a finished line (formatted by
:mod:`interchange.broker.message_log`), so the event loop never waits on disk I/O. A rotated file
gets an immutable ``<stem>-<UTC time>-<n>.jsonl`` name (:func:`rotated_name`) and is never written
again; the active file's name must not end in ``.jsonl``, so a reader of ``<dir>/*.jsonl`` sees only
complete files. When it rotates and why: docs/log-format.md ("The file and its rotation").
"""
from __future__ import annotations

import datetime as dt
import queue
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict, Field

from interchange.ground import logformat


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
        self._reopened = False  #: the active file is one a rotation opened
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
                print(f"json log: {exc}", file=sys.stderr)  # noqa: T201 (the log itself cannot be written)
        if self._file is not None:
            if self.rotation.enabled and self._bytes:
                self._rotate(reopen=False)
            else:
                self._file.close()
                if self._reopened and self.path is not None:
                    # the empty file a rotation opened: a clean close leaves no active file behind it
                    self.path.unlink(missing_ok=True)

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
            self._reopened = True

    def _rename(self) -> None:
        assert self.path is not None
        self._rotated += 1
        target = rotated_name(self.path, dt.datetime.now(dt.timezone.utc), self._rotated)
        self.path.rename(target)
        self.rotated_files.append(target)
