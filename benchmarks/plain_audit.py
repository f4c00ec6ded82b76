"""The audit rules of spark/rules.py in plain single-process Python: the peer of the Spark benchmark.

Same rules, same definitions (see spark/rules.py), over JSON lines read with ``json.loads``; the
table checks call interchange/broker/validation.py itself, the gap checks take their types and
bounds from spark.rules.GAPS (the profile's repetitions). Returns {(rule, check): [checked, violations]}
so the benchmark can show both implementations agree before comparing their speed.
"""
from __future__ import annotations

import json
import resource
import time
from collections import defaultdict
from collections.abc import Iterable
from itertools import groupby
from pathlib import Path
from typing import Any

from interchange.broker.validation import validate_application_properties
from spark.rules import BURST_LIMIT_MS, BURST_MESSAGES, BUFFER_FULL, GAPS, LATENCY_LIMIT_MS, PAYLOAD_LIMIT

Metrics = dict[tuple[str, str], list[int]]


def _count(metrics: Metrics, rule: str, check: str, counted: bool, violated: bool) -> None:
    cell = metrics[(rule, check)]
    cell[0] += counted
    cell[1] += violated


def _received(r: dict[str, Any], metrics: Metrics, state: dict[str, Any]) -> None:
    props = r.get("applicationProperties")
    if props is not None:
        state["properties"] += 1
        for problem in validate_application_properties(props):
            _count(metrics, problem.requirement, "properties", False, True)
    for check in ("expired_undelivered", "dropped", "discarded", "unroutable", "rejected"):
        _count(metrics, _ACCOUNT[check], check, True, False)
    state["received"].append(r)


_ACCOUNT = {"expired_undelivered": "IP_033", "dropped": "IP_032", "discarded": "AUDIT", "unroutable": "AUDIT",
            "rejected": "IP_016"}


def _small(r: dict[str, Any]) -> bool:
    return r.get("size") is None or r["size"] < PAYLOAD_LIMIT
_LOST = {"expired_message": "expired_undelivered", "dropped_message": "dropped", "unroutable_message": "unroutable"}


def _sent(r: dict[str, Any], metrics: Metrics, state: dict[str, Any]) -> None:
    attempt = r.get("attempt") or 1
    arrival, departure = r.get("arrivalMs"), r.get("departureMs")
    if attempt == 1 and arrival is not None and departure is not None and _small(r):
        _count(metrics, "IP_012", "latency", True, departure - arrival >= LATENCY_LIMIT_MS)
    if attempt == 1 and arrival is not None and departure is not None:
        state["first_deliveries"].append(r)
    if r.get("expiryMs") is not None and departure is not None:
        _count(metrics, "IP_033", "delivered_after_expiry", True, departure > r["expiryMs"])
    _count(metrics, "AUDIT", "redelivery", True, attempt > 1)
    if r.get("outcome") is not None:
        _count(metrics, "AUDIT", "delivery_outcome", True, r["outcome"] not in ("accepted", "presettled"))


def _record(r: dict[str, Any], metrics: Metrics, state: dict[str, Any]) -> None:
    if r.get("messageId") is not None:  # records logged twice: the same record key
        key = tuple(r.get(c) for c in ("node", "messageId", "event", "source", "consumer", "attempt", "timestampMs",
                                       "publicationId", "shardKey", "shardSeq", "arrivalMs", "departureMs"))
        state["keys"][key] = state["keys"].get(key, 0) + 1
    match r.get("event"):
        case "received_message":
            _received(r, metrics, state)
        case "sent_message":
            _sent(r, metrics, state)
        case "rejected_message":
            _count(metrics, "IP_016", "rejected", True, True)
        case "expired_message" | "dropped_message" | "unroutable_message" as event:
            check = _LOST[event]
            if event == "dropped_message" and r.get("reason") != BUFFER_FULL:
                check = "discarded"
            _count(metrics, _ACCOUNT[check], check, False, True)


#: messageType -> the gap check sequencing it (IP_048 repetition, IP_124 CAM rate, IP_136 CPM rate)
_GAP_RULES = {message_type: check for check, (_, _, types, _, _, _) in GAPS.items() for message_type in types}


def _gap_violated(check: str, gap: int) -> tuple[str, bool]:
    rule, _, _, low, high, _ = GAPS[check]
    return rule, gap < low or gap > high


def _gaps(received: list[dict[str, Any]], metrics: Metrics) -> None:
    """IP_048/124/136: each rule sequences the publications of its own message types."""
    sequences: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in received:
        check = _GAP_RULES.get(r.get("messageType") or "")
        if check and r.get("publicationId") is not None and r.get("arrivalMs") is not None:
            sequences[(check, r["node"], r["publicationId"])].append(r)
    for (check, _, _), rows in sequences.items():
        rows.sort(key=lambda r: (r["arrivalMs"], r.get("messageId") or ""))
        for previous, r in zip(rows, rows[1:]):
            rule, violated = _gap_violated(check, r["arrivalMs"] - previous["arrivalMs"])
            _count(metrics, rule, check, True, violated)


def _admission(r: dict[str, Any]) -> str | None:
    """``<node>/<process>/<bootMs>`` of the messageId (the broker numbers shards from 1 at each start)."""
    message_id = r.get("messageId")
    return message_id.rsplit("/", 1)[0] if message_id and "/" in message_id else None


def _shard_order(first_deliveries: list[dict[str, Any]], metrics: Metrics) -> None:
    links: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in first_deliveries:
        if r.get("shardSeq") is not None:
            links[(r["node"], _admission(r), r.get("source"), r.get("consumer"), r.get("shardKey"))].append(r)
    for rows in links.values():
        rows.sort(key=lambda r: r["departureMs"])
        highest = None
        for _, group in groupby(rows, key=lambda r: r["departureMs"]):  # one millisecond: compared with earlier ones only
            same = list(group)
            for r in same:
                _count(metrics, "IP_128", "shard_order", True, highest is not None and r["shardSeq"] < highest)
            top = max(r["shardSeq"] for r in same)
            highest = top if highest is None else max(highest, top)


def _shard_gaps(received: list[dict[str, Any]], metrics: Metrics) -> None:
    shards: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for r in received:
        if r.get("shardSeq") is not None and r.get("messageId") is not None and r.get("shardKey") is not None:
            shards[(r["node"], _admission(r), r["shardKey"])].append(r["shardSeq"])
    for numbers in shards.values():
        numbers.sort()
        _count(metrics, "AUDIT", "shard_gap", True, False)
        for before, seq in zip(numbers, numbers[1:]):
            _count(metrics, "AUDIT", "shard_gap", True, seq - before > 1)


def _duplicates(received: list[dict[str, Any]], metrics: Metrics) -> None:
    seen: set[tuple[str, str, str]] = set()
    for r in sorted(received, key=lambda r: (r.get("arrivalMs") or 0, r.get("messageId") or "")):
        if r.get("bodySha256") is None or r.get("publicationId") is None:
            continue
        key = (r["node"], r["publicationId"], r["bodySha256"])
        _count(metrics, "AUDIT", "duplicate", True, key in seen)
        seen.add(key)


def _logged_twice(keys: dict[tuple[Any, ...], int], metrics: Metrics) -> None:
    for copies in keys.values():
        _count(metrics, "AUDIT", "record_logged_twice", True, copies > 1)


def _intersections(r: dict[str, Any]) -> list[str]:
    value = str((r.get("applicationProperties") or {}).get("id") or "")
    return [i for i in value.removeprefix(",").removesuffix(",").split(",") if i]


def _spatem_after_mapem(received: list[dict[str, Any]], metrics: Metrics) -> None:
    """IP_104: a SPATEM's intersections each had a MAPEM (any publisher) at the node before it."""
    first_mapem: dict[tuple[str, str], int] = {}
    for r in received:
        if r.get("messageType") == "MAPEM" and r.get("arrivalMs") is not None:
            for key in ((r["node"], i) for i in _intersections(r)):
                first_mapem[key] = min(first_mapem.get(key, r["arrivalMs"]), r["arrivalMs"])
    for r in received:
        if r.get("messageType") == "SPATEM" and r.get("arrivalMs") is not None:
            early = any(first_mapem.get((r["node"], i), r["arrivalMs"] + 1) > r["arrivalMs"]
                        for i in _intersections(r))
            _count(metrics, "IP_104", "spatem_after_mapem", True, early)


def _bursts(received: list[dict[str, Any]], first_deliveries: list[dict[str, Any]], metrics: Metrics) -> None:
    arrived: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 2**63])
    for r in received:
        if r.get("arrivalMs") is not None and _small(r):
            cell = arrived[(r["node"], r["arrivalMs"] // 1000)]
            cell[0] += 1
            cell[1] = min(cell[1], r["arrivalMs"])
    last: dict[tuple[str, int], int] = {}
    for r in first_deliveries:
        if _small(r):
            key = (r["node"], r["arrivalMs"] // 1000)
            last[key] = max(last.get(key, 0), r["departureMs"])
    for key, (count, first) in arrived.items():
        if count >= BURST_MESSAGES:
            _count(metrics, "IP_013", "burst", True, key in last and last[key] - first >= BURST_LIMIT_MS)


def audit(lines: Iterable[str]) -> tuple[Metrics, int, int]:
    """(metrics, lines read, corrupt lines) of a log's lines."""
    metrics: Metrics = defaultdict(lambda: [0, 0])
    state: dict[str, Any] = {"properties": 0, "received": [], "first_deliveries": [], "keys": {}}
    read = corrupt = 0
    for line in lines:
        read += 1
        try:
            record = json.loads(line)
        except ValueError:
            corrupt += 1
            continue
        if isinstance(record, dict):
            _record(record, metrics, state)
    _gaps(state["received"], metrics)
    _shard_order(state["first_deliveries"], metrics)
    _shard_gaps(state["received"], metrics)
    _logged_twice(state["keys"], metrics)
    _duplicates(state["received"], metrics)
    _spatem_after_mapem(state["received"], metrics)
    _bursts(state["received"], state["first_deliveries"], metrics)
    metrics[("properties", "checked")] = [state["properties"], 0]
    return dict(metrics), read, corrupt


def audit_file(path: Path) -> tuple[Metrics, int, float, float]:
    """(metrics, lines read, seconds, peak resident MB of this process) of the log at ``path``.

    The benchmark runs it in a process of its own: the peak is the plain pass's alone (it keeps every
    received message and first delivery as a dict for the rules comparing records), and the Spark
    driver's peak is then its own."""
    start = time.perf_counter()
    with path.open(encoding="utf-8") as handle:
        metrics, read, _ = audit(handle)
    return metrics, read, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
