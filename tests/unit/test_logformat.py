"""The log schema module (interchange.ground.logformat, version 2): fields documented and listed, v1 still read."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from interchange.ground import logformat
from interchange.testing.paths import REPO_ROOT

V1_RECEIVED = ('{"schemaVersion":1,"timestamp":"2021-07-15T12:30:23.317Z","level":"info","event":"received_message",'
               '"node":"ixc-a","address":"denm-in","identity":"actor-1","publisher":"actor-1",'
               '"arrivalTime":"2021-07-15T12:30:23.317Z","size":204,"applicationProperties":{"messageType":"DENM"},'
               '"bodyContentHex":"2040"}')
V1_REJECTED = ('{"schemaVersion":1,"timestamp":"2021-07-15T12:30:23.317Z","level":"warning","event":"rejected_message",'
               '"node":"ixc-a","address":"denm-in","identity":"actor-1","size":12,"details":{"reason":"bad"}}')


def test_every_field_is_documented_and_listed() -> None:
    doc = (REPO_ROOT / "docs" / "log-format.md").read_text(encoding="utf-8")
    names = [field.name for field in logformat.FIELDS]
    assert names == list(logformat.LogRecord.model_fields)
    for name in names:
        assert f"``{name}``" in doc, name
    kinds = {field.name: (field.type, field.nullable) for field in logformat.FIELDS}
    assert kinds["schemaVersion"] == (int, False) and kinds["event"] == (str, False)
    assert kinds["shardSeq"] == (int, True) and kinds["outcome"] == (str, True)
    assert kinds["applicationProperties"] == (dict, True) and kinds["details"] == (dict, True)
    assert {field.type for field in logformat.FIELDS} == {str, int, dict}


def test_version_1_lines_still_parse() -> None:
    record = logformat.parse_line(V1_RECEIVED)
    assert record.schemaVersion == 1 and record.address == "denm-in" and record.size == 204
    assert record.messageId is None and record.timestampMs is None
    assert logformat.parse_line(V1_REJECTED).details == {"reason": "bad"}


def test_version_2_line_round_trips() -> None:
    record = {"schemaVersion": logformat.SCHEMA_VERSION, "timestamp": logformat.iso_ms(1_626_352_223_317),
              "timestampMs": 1_626_352_223_317, "level": "info", "event": "sent_message", "node": "ixc-a",
              "process": 1, "messageId": logformat.message_id("ixc-a", 1, 1_626_350_000_000, 17),
              "shardKey": logformat.shard_key("NL00001:1", 1), "shardSeq": 5, "outcome": "released",
              "attempt": 2, "expirySource": "ttl", "origin": "federated", "neighbour": "ixc-b"}
    parsed = logformat.parse_line(logformat.dumps(record))
    assert parsed.model_dump(exclude_none=True) == record
    assert parsed.messageId == "ixc-a/1/1626350000000/17" and parsed.shardKey == "NL00001:1#1"
    assert record["timestamp"] == "2021-07-15T12:30:23.317Z"


@pytest.mark.parametrize("line, problem", [
    ("{", "not JSON"), ("[1]", "JSON object"),
    (json.dumps({"schemaVersion": 3, "timestamp": "t", "level": "info", "event": "x"}), "schemaVersion 3"),
    (json.dumps({"schemaVersion": 2, "timestamp": "t", "level": "info", "event": "sent_message",
                 "outcome": "lost"}), "outcome"),
])
def test_malformed_lines_are_refused_with_a_reason(line: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        logformat.parse_line(line)


@pytest.mark.parametrize("details", [
    {"peer": "127.0.0.1:40000", "identity": None, "error": None},
    {"interface": "bi", "peer": "127.0.0.1:40001", "stage": "AMQP header", "timeout_s": 4.0, "n": 3,
     "reason": "AMQP header not complete within 4 s"},
    {"reason": 'quote " backslash \\ newline \n tab \t control \x01 non-ASCII é ✓'},
    {"ok": True, "nested": {"a": [1, 2.5, None]}, "big": 2**70, "tiny": 1e-300},  # not flat: the encoder's
    {1: "a non-text key"}, {}, None, ["a", "list"], "text",
])
def test_event_lines_are_what_dumps_makes_of_the_record(details: object) -> None:
    lines = logformat.EventLines("ixc-a", 0)
    for epoch_ms in (1_795_000_000_000, 1_795_000_000_999, 1_795_000_001_000, 1_795_000_000_001):
        for level, event in (("info", "disconnect"), ("warning", "preamble_timeout"), ("info", "disconnect")):
            record = {"schemaVersion": logformat.SCHEMA_VERSION, "timestamp": logformat.iso_ms(epoch_ms),
                      "timestampMs": epoch_ms, "level": level, "event": event, "node": "ixc-a", "process": 0,
                      "details": details}
            line = lines.line(epoch_ms, level, event, details)
            assert line == logformat.dumps(record)
            if isinstance(details, dict):
                assert logformat.parse_line(line).details == json.loads(logformat.dumps(details))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_event_lines_refuse_what_dumps_refuses(bad: float) -> None:
    with pytest.raises(ValueError):
        logformat.dumps({"x": bad})
    with pytest.raises(ValueError):
        logformat.EventLines("ixc-a", 0).line(1_795_000_000_000, "info", "x", {"x": bad})


def test_iso_ms_across_seconds_and_days() -> None:
    for epoch_ms in [0, 999, 1000, 1_795_000_000_000, 1_795_000_000_999, 1_795_000_001_000, 1_794_959_999_999,
                     1_794_960_000_000, 1_000, 0]:  # the cached second changes and comes back
        moment = dt.datetime.fromtimestamp(epoch_ms / 1000, dt.timezone.utc)
        assert logformat.iso_ms(epoch_ms) == moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"
