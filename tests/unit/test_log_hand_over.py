"""Records formatted on an event loop reach the writer thread together, in order, within
HAND_OVER_S; without a loop at once; and never stay behind when their loop is gone
(interchange.broker.message_log)."""
from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from interchange.broker import message_log
from interchange.broker.message_log import HAND_OVER_S, JsonLog
from interchange.ground import logformat


class Puts:
    """Stands for the writer: what was handed over, one string per hand-over."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def put(self, line: str) -> None:
        self.items.append(line)

    def close(self) -> None:
        pass


def events(item: str) -> list[str]:
    return [json.loads(line)["details"]["n"] for line in item.split("\n")]


def test_records_on_a_loop_are_handed_over_together_in_order() -> None:
    log = JsonLog("node", stream=io.StringIO())
    log._writer.close()
    puts = log._writer = Puts()  # type: ignore[assignment]

    async def main() -> None:
        for n in range(5):
            log.event("info", "connect", {"n": n})
        assert puts.items == []  # not one by one
        await asyncio.sleep(HAND_OVER_S * 3)
        assert [events(item) for item in puts.items] == [[0, 1, 2, 3, 4]]
        log.event("info", "connect", {"n": 5})
        await asyncio.sleep(HAND_OVER_S * 3)

    asyncio.run(main())
    assert [events(item) for item in puts.items] == [[0, 1, 2, 3, 4], [5]]
    log.event("info", "connect", {"n": 6})  # no loop in this thread: at once
    assert events(puts.items[-1]) == [6]


def test_records_left_by_a_stopped_loop_go_with_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    log = JsonLog("node", stream=io.StringIO())
    log._writer.close()
    puts = log._writer = Puts()  # type: ignore[assignment]
    clock = [100.0]
    monkeypatch.setattr(message_log.time, "monotonic", lambda: clock[0])

    async def short_lived() -> None:  # its hand-over never runs
        log.event("info", "connect", {"n": 0})

    asyncio.run(short_lived())
    assert puts.items == []

    async def later() -> None:
        clock[0] += 1.0
        log.event("info", "connect", {"n": 1})

    asyncio.run(later())
    assert [events(item) for item in puts.items] == [[0, 1]]


def test_close_hands_over_what_waits(tmp_path: Path) -> None:
    path = tmp_path / "node.log"

    async def main() -> None:
        log = JsonLog("node", path=path)
        log.event("info", "connect", {"n": 0})
        log.close()

    asyncio.run(main())
    assert [json.loads(line)["details"]["n"] for line in path.read_text().splitlines()] == [0]


def test_a_thousand_deadline_closes_keep_every_record_in_order(tmp_path: Path) -> None:
    """A thousand connections' deadlines pass in bursts (fifty to a loop turn): each one's time-out
    record, then its disconnect record, all in the file, each a well-formed line."""
    path = tmp_path / "node.log"
    peers = [f"127.0.0.1:{40000 + n}" for n in range(1000)]

    async def main() -> None:
        log = JsonLog("node", path=path)
        for start in range(0, len(peers), 50):
            for peer in peers[start:start + 50]:
                log.event("warning", "preamble_timeout", {"interface": "bi", "peer": peer, "stage": "AMQP header",
                                                          "timeout_s": 4.0, "reason": "AMQP header not complete"})
            for peer in peers[start:start + 50]:
                log.event("info", "disconnect", {"peer": peer, "identity": None, "error": None})
            await asyncio.sleep(0)
        await asyncio.sleep(HAND_OVER_S * 3)
        log.close()

    asyncio.run(main())
    records = [logformat.parse_line(line) for line in path.read_text().splitlines()]
    assert len(records) == 2 * len(peers)
    seen: dict[str, list[str]] = {}
    for record in records:
        assert record.node == "node" and record.details is not None
        seen.setdefault(record.details["peer"], []).append(record.event)
    assert seen == {peer: ["preamble_timeout", "disconnect"] for peer in peers}
    assert [r.timestampMs for r in records] == sorted(r.timestampMs or 0 for r in records)
