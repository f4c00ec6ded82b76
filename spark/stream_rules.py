"""The rules comparing records, for the stream: each key's records in event-time order, with state.

:mod:`spark.rules` states these rules over the whole log (window functions in a batch); a stream
sees the log a file at a time, so here each rule keeps, per key, what it needs of the records
before (a running highest shardSeq, the last arrival of a publication, the first MAPEM of each
intersection, ...) and compares each new record with it. The record rows reach :func:`advance`
grouped by (kind, bucket of keys) through Spark's ``applyInPandasWithState`` (:mod:`spark.stream`;
a bucket holds many keys, so that a call of the Python function handles many rows): the rows
wait in the state until the watermark has passed their event time (no record still to come can
be earlier), are then taken in the batch rules' order, and give the same findings, with the same
texts, as the batch rules (``tests/test_spark_stream.py`` holds the two together row for row).

Kinds (each a frame of :mod:`spark.rules`): ``order`` (IP_128, per link, shard and admission
sequence), ``gap`` (AUDIT shard_gap, per shard and admission sequence), ``pub`` (IP_048/124/136 and
re-published copies, per publication), ``ix`` (IP_104, per node), ``sec`` (IP_013, per node and
second of arrival: released once the watermark is :data:`spark.stream.LATENESS_MS` past the
second, so deliveries up to then count).

Pure Python (no pyspark): the state is a JSON text, a record a mapping of the row's columns.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The identity columns of a finding (:data:`spark.rules.IDENTITY`) and the finding's own.
IDENTITY = ("node", "process", "event", "timestampMs", "messageId", "publicationId", "messageType",
            "publisher", "consumer", "file")
FINDING = ("rule", "check", "severity", "property", "observed", "expected")
#: How long the stream remembers a publication's bodies to number re-published copies (the batch
#: compares all of them): a copy of a body last seen longer ago than this is not recognised.
BODY_MEMORY_MS = 3_600_000

Row = Mapping[str, Any]
Finding = dict[str, Any]


@dataclass(frozen=True)
class Gap:
    """A gap check (:data:`spark.rules.GAPS`): rule, severity, types, bounds, expected text."""

    check: str
    rule: str
    severity: str
    types: tuple[str, ...]
    low_ms: int
    high_ms: int
    expected: str


@dataclass(frozen=True)
class Settings:
    """What the rules need from :mod:`spark.rules` (handed in: this module imports no Spark)."""

    gaps: tuple[Gap, ...]
    repeated_types: tuple[str, ...]
    burst_messages: int
    burst_limit_ms: int
    lateness_ms: int


def _finding(row: Row, rule: str, check: str, severity: str, observed: str, expected: str) -> Finding:
    found = {name: row.get(name) for name in IDENTITY}
    found.update(rule=rule, check=check, severity=severity, property=None, observed=observed, expected=expected)
    return found


def _clean(value: Any) -> Any:
    """A value from pandas as the JVM had it (a missing number is NaN there, a whole one a float)."""
    if isinstance(value, float):
        if value != value:
            return None
        if value.is_integer():
            return int(value)
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return value.tolist()
    return value


def clean_rows(rows: Iterable[Row]) -> list[dict[str, Any]]:
    return [{k: _clean(v) for k, v in row.items()} for row in rows]


# --- each kind: (state, released rows in order) -> findings -------------------------------------------

def _order(state: dict[str, Any], rows: list[Row], settings: Settings) -> Iterator[Finding]:
    """IP_128: a first delivery with a lower shardSeq than one delivered strictly earlier on its link."""
    highest = state.get("max")
    for _departure, group in _groups(rows, "departureMs"):
        for row in group:
            if highest is not None and row["shardSeq"] < highest:
                yield _finding(row, "IP_128", "shard_order", "error",
                               f"shardSeq {row['shardSeq']} after {highest} on {row['shardKey']}",
                               "increasing shardSeq per shard and consumer")
        group_max = max(row["shardSeq"] for row in group)
        highest = group_max if highest is None else max(highest, group_max)
    state["max"] = highest


def _gap(state: dict[str, Any], rows: list[Row], settings: Settings) -> Iterator[Finding]:
    """AUDIT shard_gap: shardSeq numbers skipped in a shard's logged admission sequence."""
    highest = state.get("max")
    for seq, group in _groups(sorted(rows, key=lambda r: r["shardSeq"]), "shardSeq"):
        if highest is not None and seq - highest > 1:
            low, high = highest + 1, seq - 1
            missing = seq - highest - 1
            span = str(low) if low == high else f"{low}-{high}"
            for row in group:
                yield _finding(row, "AUDIT", "shard_gap", "warning",
                               f"shardSeq {span} of {row['shardKey']} missing ({missing} admitted, not logged; "
                               f"in {row['admission']})", f"shardSeq {low} next")
        highest = seq if highest is None else max(highest, seq)
    state["max"] = highest


def _once_per_message(rows: list[Row]) -> list[Row]:
    """Each message once (a record logged twice: the copy from the first file), in (arrival, messageId) order."""
    kept: dict[Any, Row] = {}
    for row in sorted(rows, key=lambda r: (str(r.get("file")), r.get("timestampMs") or 0)):
        key = row.get("messageId") if row.get("messageId") is not None else id(row)
        kept.setdefault(key, row)
    return sorted(kept.values(), key=lambda r: (r.get("arrivalMs") is not None, r.get("arrivalMs") or 0,
                                                r.get("messageId") or ""))


def _pub(state: dict[str, Any], rows: list[Row], settings: Settings) -> Iterator[Finding]:
    """IP_048/IP_124/IP_136 (the gap since the previous arrival of the types) and re-published copies."""
    last: dict[str, int] = state.setdefault("last", {})
    bodies: dict[str, list[Any]] = state.setdefault("bodies", {})
    for row in _once_per_message(rows):
        arrival, message_type = row.get("arrivalMs"), row.get("messageType")
        for gap in settings.gaps:
            previous = last.get(gap.check)
            if message_type in gap.types and arrival is not None and previous is not None:
                took = arrival - previous
                if took < gap.low_ms or took > gap.high_ms:
                    yield _finding(row, gap.rule, gap.check, gap.severity, f"{took} ms since the previous one",
                                   gap.expected)
        body = row.get("bodySha256")
        if body is not None:
            seen = bodies.get(body)
            copy, first = (1, arrival) if seen is None else (seen[0] + 1, seen[1])
            bodies[body] = [copy, first, arrival if arrival is not None else 0]
            if copy > 1:
                severity = "info" if message_type in settings.repeated_types else "warning"
                yield _finding(row, "AUDIT", "duplicate", severity,
                               f"copy {copy} (another messageId), first arrived at {first}", "one copy per body")
        for gap in settings.gaps:
            if message_type in gap.types and arrival is not None:
                last[gap.check] = arrival
    newest = max((r.get("arrivalMs") or 0 for r in rows), default=0)
    for body in [b for b, (_, _, at) in bodies.items() if at < newest - BODY_MEMORY_MS]:
        del bodies[body]


def _ix(state: dict[str, Any], rows: list[Row], settings: Settings) -> Iterator[Finding]:
    """IP_104: a SPATEM of an intersection no MAPEM had arrived for yet (a MAPEM of the same ms counts)."""
    mapems: dict[str, int] = state.setdefault("mapems", {})
    ordered = sorted(rows, key=lambda r: (r["arrivalMs"], r["messageType"] != "MAPEM"))
    for row in ordered:
        intersections = [i for i in (row.get("intersections") or []) if i]
        if row["messageType"] == "MAPEM":
            for intersection in intersections:
                mapems.setdefault(intersection, row["arrivalMs"])
        else:
            early = [i for i in intersections if i not in mapems]
            if early:
                yield _finding(row, "IP_104", "spatem_after_mapem", "error",
                               f"SPATEM before any MAPEM of intersection '{min(early)}'",
                               "a MAPEM of the same intersection earlier")


def _sec(state: dict[str, Any], rows: list[Row], settings: Settings) -> Iterator[Finding]:
    """Adds a second's rows to its counts (the finding is made when the second is released)."""
    arrived: list[Any] = state.setdefault("arrived", [])
    seen = set(arrived)
    for row in rows:
        if row["event"] == "received_message":
            key = row.get("messageKey")
            if key not in seen:
                seen.add(key)
                arrived.append(key)
            if state.get("firstMs") is None or row["arrivalMs"] < state["firstMs"]:
                state["firstMs"] = row["arrivalMs"]
        elif row.get("departureMs") is not None:
            state["lastMs"] = max(state.get("lastMs") or row["departureMs"], row["departureMs"])
        state["node"] = row["node"]
    return iter(())


def burst_finding(state: Mapping[str, Any], settings: Settings) -> Finding | None:
    """IP_013's finding of a released second, or None."""
    arrived, first, last = len(state.get("arrived", [])), state.get("firstMs"), state.get("lastMs")
    if arrived < settings.burst_messages or first is None or last is None or last - first < settings.burst_limit_ms:
        return None
    found: Finding = dict.fromkeys(IDENTITY)
    found.update(node=state["node"], timestampMs=first, rule="IP_013", check="burst", severity="error", property=None,
                 observed=f"{arrived} messages arrived in this second, the last available {last - first} ms "
                          "after the first",
                 expected=f"< {settings.burst_limit_ms} ms for {settings.burst_messages} messages")
    return found


KINDS = {"order": _order, "gap": _gap, "pub": _pub, "ix": _ix, "sec": _sec}


def _groups(rows: list[Row], column: str) -> Iterator[tuple[Any, list[Row]]]:
    """Consecutive rows of ``rows`` (sorted by ``column``) with the same value of it."""
    ordered = sorted(rows, key=lambda r: r[column])
    start = 0
    for index in range(1, len(ordered) + 1):
        if index == len(ordered) or ordered[index][column] != ordered[start][column]:
            yield ordered[start][column], ordered[start:index]
            start = index


@dataclass
class Step:
    """What one call for a key gives: findings, the state to keep (None: remove it), and when to be
    called again (the event time the watermark must pass; None: only with new rows)."""

    findings: list[Finding]
    state: dict[str, Any] | None
    timeout_ms: int | None


def once(findings: list[Finding]) -> list[Finding]:
    """Each finding once: those of a record logged twice (equal but for the file) are one, from the first file."""
    kept: dict[tuple[Any, ...], Finding] = {}
    for found in sorted(findings, key=lambda f: str(f.get("file"))):
        kept.setdefault(tuple(json.dumps(found.get(c)) for c in (*IDENTITY, *FINDING) if c != "file"), found)
    return list(kept.values())


def advance(kind: str, key: str, state_json: str | None, new_rows: Sequence[Row], watermark_ms: int,
            settings: Settings) -> Step:
    """One call for (kind, key): take the new rows, release those the watermark has passed, in order.

    A key of the kinds but ``sec`` is a bucket of the real keys (each row's ``sub``): the state keeps
    each real key's own part (``subs``) and the rows still waiting (``pending``).
    """
    state: dict[str, Any] = json.loads(state_json) if state_json else {}
    if kind == "sec":
        return _advance_second(key, state, new_rows, watermark_ms, settings)
    pending = state.pop("pending", []) + list(new_rows)
    ready = [row for row in pending if row["eventMs"] <= watermark_ms]
    waiting = [row for row in pending if row["eventMs"] > watermark_ms]
    subs: dict[str, dict[str, Any]] = state.setdefault("subs", {})
    by_sub: dict[str, list[Row]] = {}
    for row in ready:
        by_sub.setdefault(row["sub"], []).append(row)
    findings = [found for sub, rows in by_sub.items() for found in KINDS[kind](subs.setdefault(sub, {}), rows, settings)]
    state["pending"] = waiting
    return Step(once(findings), state, min((row["eventMs"] for row in waiting), default=None))


def _advance_second(key: str, state: dict[str, Any], rows: Sequence[Row], watermark_ms: int,
                    settings: Settings) -> Step:
    second_end = (int(key.rsplit("|", 1)[1]) + 1) * 1000
    release = second_end + settings.lateness_ms
    if state.get("done"):  # released: stragglers are not counted; forget the second once they are past
        return Step([], None, None) if watermark_ms >= state["done"] else Step([], state, state["done"])
    list(_sec(state, list(rows), settings))
    if watermark_ms < release:
        return Step([], state, release)
    found = burst_finding(state, settings)
    return Step([found] if found else [], {"done": watermark_ms + settings.lateness_ms}, watermark_ms + settings.lateness_ms)
