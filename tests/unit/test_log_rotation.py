"""Log rotation: size and age limits, immutable time-stamped *.jsonl files, rotation at a clean close;
a reader of <dir>/*.jsonl plus the active file sees every record exactly once."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from interchange.app.config import LogConfig
from interchange.broker.message_log import JsonLog
from interchange.ground import logformat
from interchange.ground.logfile import Rotation


def lines_of(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), f"{path.name} ends in a partial line"
    return [json.loads(line) for line in text.splitlines()]


def numbers(records: list[dict]) -> list[int]:
    return [r["details"]["n"] for r in records if r["event"] == "tick"]


def everything(directory: Path, active: Path) -> list[dict]:
    """What a reader sees: every file rotated from ``active`` (in name order), then the active file."""
    seen: list[dict] = []
    for path in sorted(directory.glob(f"{active.stem}-*.jsonl")):
        seen += lines_of(path)
    if active.exists():
        seen += lines_of(active)
    return seen


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_size_rotation_writes_complete_immutable_files_in_time_order(tmp_path: Path) -> None:
    active = tmp_path / "node.log"
    log = JsonLog("ixc-a", path=active, rotation=Rotation(rotate_bytes=2_000))
    for n in range(100):
        log.event("info", "tick", {"n": n, "text": "é" * 10})  # non-ASCII: the limit counts bytes
    wait_until(lambda: len(list(tmp_path.glob("*.jsonl"))) >= 3)
    frozen = {path: path.read_bytes() for path in tmp_path.glob("*.jsonl")}
    for n in range(100, 200):
        log.event("info", "tick", {"n": n, "text": "é" * 10})
    log.close()
    for path, content in frozen.items():
        assert path.read_bytes() == content, f"{path.name} was written to after its rotation"
    rotated = sorted(tmp_path.glob("*.jsonl"))
    assert rotated == log.rotated_files  # names sort in the order the files were closed
    assert not active.exists()  # a clean close rotates the last, non-empty file too
    assert numbers(everything(tmp_path, active)) == list(range(200))
    for path in rotated[:-1]:
        assert path.stat().st_size >= 2_000
        assert path.name.startswith("node-") and len(path.name) == len("node-20261123T211500123456-0001.jsonl")
    for record in everything(tmp_path, active):
        logformat.parse_line(json.dumps(record))


def test_a_close_right_after_a_rotation_leaves_no_empty_active_file(tmp_path: Path) -> None:
    """The last lines reach the size limit: the rotation opens a new, empty active file, which the
    close removes (a clean close leaves only complete *.jsonl files)."""
    active = tmp_path / "node.log"
    log = JsonLog("ixc-a", path=active, rotation=Rotation(rotate_bytes=1))  # every line rotates
    for n in range(3):
        log.event("info", "tick", {"n": n})
    log.close()
    assert not active.exists()
    assert len(log.rotated_files) >= 1 and numbers(everything(tmp_path, active)) == [0, 1, 2]


def test_age_rotation_happens_without_new_records_and_readers_see_each_once(tmp_path: Path) -> None:
    active = tmp_path / "node.log"
    log = JsonLog("ixc-a", path=active, rotation=Rotation(rotate_seconds=0.5))
    try:
        log.event("info", "tick", {"n": 0})
        wait_until(lambda: len(list(tmp_path.glob("*.jsonl"))) == 1)  # the writer woke up by itself
        assert numbers(everything(tmp_path, active)) == [0]
        log.event("info", "tick", {"n": 1})
        wait_until(lambda: active.exists() and active.stat().st_size > 0)
        assert numbers(everything(tmp_path, active)) == [0, 1]  # rotated + active: each once
        wait_until(lambda: len(list(tmp_path.glob("*.jsonl"))) == 2)
        time.sleep(0.7)  # an empty active file is not rotated
        assert len(list(tmp_path.glob("*.jsonl"))) == 2
    finally:
        log.close()
    assert numbers(everything(tmp_path, active)) == [0, 1]


def test_a_previous_runs_file_is_rotated_at_start(tmp_path: Path) -> None:
    active = tmp_path / "node.log"
    active.write_text('{"schemaVersion":1,"timestamp":"2021-07-15T12:30:23.317Z","level":"info","event":"x"}\n')
    log = JsonLog("ixc-a", path=active, rotation=Rotation(rotate_bytes=1_000_000))
    log.close()
    [old] = tmp_path.glob("*.jsonl")
    assert lines_of(old)[0]["schemaVersion"] == 1 and active.read_text() == ""  # a fresh, empty active file


def test_without_rotation_the_file_is_appended_to(tmp_path: Path) -> None:
    active = tmp_path / "node.log"
    for n in range(2):
        log = JsonLog("ixc-a", path=active)
        log.event("info", "tick", {"n": n})
        log.close()
    assert numbers(lines_of(active)) == [0, 1] and not list(tmp_path.glob("*.jsonl"))


def test_config_refuses_a_jsonl_active_file_when_rotating(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="must not end in .jsonl"):
        LogConfig(path=tmp_path / "node.jsonl", rotate_seconds=60)
    LogConfig(path=tmp_path / "node.jsonl")  # without rotation it is only a name
    with pytest.raises(ValidationError):
        LogConfig(rotate_bytes=0)
    config = LogConfig(path=tmp_path / "node.log", rotate_bytes=10, rotate_seconds=1.5, raw=True)
    assert config.rotation() == Rotation(rotate_bytes=10, rotate_seconds=1.5) and config.settings().raw
