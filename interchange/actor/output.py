"""How the command line shows things: tables, JSON lines, saved messages, a progress line."""
from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from interchange.actor.amqp import Received

__all__ = ["MESSAGE_COLUMNS", "Progress", "message_json", "message_line", "message_row", "save_message", "table"]

MESSAGE_COLUMNS = ("#", "TYPE", "PUBLICATION", "QUADTREE", "TTL", "BYTES", "BODY")
#: Widths of the message table's columns (rows are printed as they come, so they cannot be measured).
MESSAGE_WIDTHS = (5, 8, 24, 24, 10, 6, 0)


def message_line(cells: Sequence[str]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, MESSAGE_WIDTHS)).rstrip()


def table(rows: Sequence[Sequence[object]], out: TextIO | None = None) -> None:
    """Columns padded to their widest cell; the first row is the header."""
    out = out or sys.stdout
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip(), file=out)


def _preview(body: bytes, width: int = 40) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + body[: width // 2].hex() + ("..." if len(body) > width // 2 else "")
    text = text.replace("\n", "\\n")
    return repr(text[:width] + ("..." if len(text) > width else ""))


def message_row(index: int, message: Received) -> list[str]:
    props = message.properties
    tiles = str(props.get("quadTree", ""))
    return [str(index), str(props.get("messageType", "?")), str(props.get("publicationId", "")),
            tiles if len(tiles) <= 24 else tiles[:21] + "...", f"{message.ttl_ms} ms" if message.ttl_ms else "-",
            str(len(message.body)), _preview(message.body)]


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def message_json(message: Received) -> dict[str, Any]:
    """One message as a JSON object: properties, TTL, durability and the body (text when it is
    UTF-8, else base64)."""
    entry: dict[str, Any] = {"properties": {k: _jsonable(v) for k, v in message.properties.items()},
                             "ttl_ms": message.ttl_ms, "durable": message.durable, "bytes": len(message.body)}
    try:
        entry["body"] = message.body.decode("utf-8")
    except UnicodeDecodeError:
        entry["body_base64"] = base64.b64encode(message.body).decode()
    return entry


def save_message(directory: Path, index: int, message: Received) -> Path:
    """``<n>-<messageType>.bin`` (the body as received) and ``<n>-<messageType>.json`` (the rest)."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"{index:06d}-{message.properties.get('messageType', 'unknown')}"
    (directory / f"{stem}.bin").write_bytes(message.body)
    entry = message_json(message)
    entry.pop("body", None)
    entry.pop("body_base64", None)
    (directory / f"{stem}.json").write_text(json.dumps(entry, indent=2) + "\n", encoding="utf-8")
    return directory / f"{stem}.bin"


class Progress:
    """A line on stderr every ``every_s`` of a long run: how many so far, and the rate."""

    def __init__(self, every_s: float, out: TextIO | None = None) -> None:
        self.every_s, self.out = every_s, out or sys.stderr
        self.started = self._last = time.monotonic()

    def tick(self, count: int, what: str = "messages") -> None:
        now = time.monotonic()
        if self.every_s > 0 and now - self._last >= self.every_s:
            self._last = now
            elapsed = now - self.started
            print(f"... {count} {what} in {elapsed:.0f} s ({count / elapsed:.1f}/s)", file=self.out, flush=True)
