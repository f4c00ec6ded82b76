"""The replay plan: which logged messages are published again, as which bytes, in which order, when.

Pure Python (no Spark, no I/O): :mod:`spark.replay` selects the slice with Spark and hands the
rows here as :class:`LoggedMessage`; :mod:`spark.replay_publish` sends the plan.

- Bytes: byte-exact from ``rawMessageHex`` when the log has it (the ``raw`` log switch, log
  schema v2); otherwise rebuilt from ``applicationProperties`` (typed by their JSON kinds) and
  ``bodyContentHex`` as one data section, with the header ttl taken from the logged expiry when
  it came from a ttl (IP_033). A rebuilt message is counted as such; one with neither is skipped
  with its reason.
- Order: admission order at the node, i.e. arrival time, then the process's admission counter
  (the last part of ``messageId``), so every shard (publicationId, shardId) keeps its order
  (IP_128-130) when the plan is sent on one link per target.
- IP_104 (SPATEM only after the corresponding MAPEM): a SPATEM whose intersection (publisherId and
  an id of its ``id`` list) has had no MAPEM yet in the plan gets one first: the first later MAPEM
  of the slice is moved up, or else the latest MAPEM logged before the slice is added.
- Timing: the logged inter-arrival times divided by ``speed`` (2.0 = twice as fast), or none
  (as fast as possible, ``speed=None``).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from proton import Message

#: How a planned message's bytes were obtained.
EXACT, REBUILT = "exact", "rebuilt"


class Unreplayable(ValueError):
    """A logged message that cannot be published again (the reason says why)."""


@dataclass(frozen=True)
class LoggedMessage:
    """One ``received_message`` record, as much of it as the replay needs."""

    message_id: str | None
    node: str
    arrival_ms: int
    address: str | None = None
    process: int | None = None
    publisher: str | None = None
    message_type: str | None = None
    publication_id: str | None = None
    shard_key: str | None = None
    raw_hex: str | None = None
    properties: Mapping[str, str] | None = None  #: values as text (spark.tables.MESSAGES)
    kinds: Mapping[str, str] | None = None  #: JSON kind of each value
    body_hex: str | None = None
    expiry_ms: int | None = None
    expiry_source: str | None = None

    def admission_key(self) -> tuple[int, str, int, int, str]:
        """Arrival, then the admission counter of ``<node>/<process>/<bootMs>/<seq>``."""
        parts = (self.message_id or "").rsplit("/", 2)
        boot, seq = (int(parts[1]), int(parts[2])) if len(parts) == 3 and parts[1].isdigit() \
            and parts[2].isdigit() else (0, 0)
        return self.arrival_ms, self.node, boot, seq, self.message_id or ""


@dataclass(frozen=True)
class PlannedMessage:
    """A message to publish: its bytes, target address, and when (seconds after the start)."""

    logged: LoggedMessage
    raw: bytes
    how: str  #: EXACT or REBUILT
    address: str
    due_s: float = 0.0
    note: str | None = None  #: why it is here out of its logged order (IP_104), if it is


@dataclass
class Plan:
    messages: list[PlannedMessage] = field(default_factory=list)
    skipped: list[tuple[str | None, str]] = field(default_factory=list)  #: (messageId, reason)
    mapem_moved: int = 0
    mapem_added: int = 0
    spatem_without_mapem: int = 0


# --- bytes ------------------------------------------------------------------------------------

def _typed(value: str | None, kind: str | None) -> object:
    match kind:
        case "integer":
            return int(value) if value is not None else None
        case "float":
            return float(value) if value is not None else None
        case "boolean":
            return value == "true"
        case "null":
            return None
        case _:
            return value


def rebuild(logged: LoggedMessage) -> bytes:
    """The message re-encoded from its logged properties and body (not byte-exact)."""
    if logged.properties is None:
        raise Unreplayable("neither rawMessageHex nor applicationProperties logged (property logging was off)")
    if logged.body_hex is None:
        raise Unreplayable("neither rawMessageHex nor bodyContentHex logged (payload logging was off)")
    kinds = logged.kinds or {}
    properties = {name: _typed(value, kinds.get(name)) for name, value in logged.properties.items()}
    message = Message(body=bytes.fromhex(logged.body_hex), properties=properties, inferred=True)
    if logged.expiry_source == "ttl" and logged.expiry_ms is not None and logged.expiry_ms > logged.arrival_ms:
        message.ttl = (logged.expiry_ms - logged.arrival_ms) / 1000
    return bytes(message.encode())


def message_bytes(logged: LoggedMessage) -> tuple[bytes, str]:
    """(bytes, EXACT) from rawMessageHex, else (bytes, REBUILT); raises :class:`Unreplayable`."""
    if logged.raw_hex:
        try:
            return bytes.fromhex(logged.raw_hex), EXACT
        except ValueError:
            raise Unreplayable("rawMessageHex is not hexadecimal") from None
    try:
        return rebuild(logged), REBUILT
    except (ValueError, TypeError) as exc:
        raise Unreplayable(f"cannot rebuild from the logged properties and body: {exc}") from None


def _properties(planned: PlannedMessage) -> Mapping[str, Any]:
    if planned.logged.properties is not None:
        return planned.logged.properties
    message = Message()
    message.decode(planned.raw)
    properties: Mapping[Any, Any] = message.properties or {}
    return {str(name): value for name, value in properties.items()}


# --- order and IP_104 -------------------------------------------------------------------------

def _intersections(planned: PlannedMessage) -> set[tuple[str, str]]:
    """(publisherId, intersection id) pairs of a SPATEM or MAPEM (Table 4 ``id``: ",5-57,5-59,")."""
    props = _properties(planned)
    publisher_id = str(props.get("publisherId") or "")
    return {(publisher_id, part) for part in str(props.get("id") or "").split(",") if part}


def _kind(planned: PlannedMessage) -> str | None:
    return planned.logged.message_type


def mapem_first(messages: Sequence[PlannedMessage], earlier_mapems: Sequence[PlannedMessage], plan: Plan) -> list[PlannedMessage]:
    """``messages`` with a MAPEM ahead of every SPATEM of an intersection not yet mapped (IP_104)."""
    pending = list(messages)
    out: list[PlannedMessage] = []
    mapped: set[tuple[str, str]] = set()
    context = {key: mapem for mapem in earlier_mapems for key in _intersections(mapem)}
    while pending:
        current = pending.pop(0)
        if _kind(current) == "SPATEM":
            for key in sorted(_intersections(current) - mapped):
                if key in mapped:
                    continue
                ahead = _take_mapem(pending, key, plan)
                if ahead is None and key in context:
                    plan.mapem_added += 1
                    ahead = replace(context.pop(key), note="IP_104: latest MAPEM logged before the slice")
                if ahead is None:
                    plan.spatem_without_mapem += 1
                    continue
                ahead = replace(ahead, due_s=current.due_s)
                mapped |= _intersections(ahead)
                out.append(ahead)
        if _kind(current) == "MAPEM":
            mapped |= _intersections(current)
        out.append(current)
    return out


def _take_mapem(pending: list[PlannedMessage], key: tuple[str, str], plan: Plan) -> PlannedMessage | None:
    for index, candidate in enumerate(pending):
        if _kind(candidate) == "MAPEM" and key in _intersections(candidate):
            plan.mapem_moved += 1
            return replace(pending.pop(index), note="IP_104: moved ahead of its SPATEM")
    return None


# --- the plan ---------------------------------------------------------------------------------

def _planned(logged: LoggedMessage, target: str | None, plan: Plan) -> PlannedMessage | None:
    address = target or logged.address
    if not address:
        plan.skipped.append((logged.message_id, "no target address logged (give --target)"))
        return None
    try:
        raw, how = message_bytes(logged)
    except Unreplayable as exc:
        plan.skipped.append((logged.message_id, str(exc)))
        return None
    return PlannedMessage(logged, raw, how, address)


def build_plan(slice_: Iterable[LoggedMessage], speed: float | None = 1.0, target: str | None = None,
               earlier_mapems: Iterable[LoggedMessage] = ()) -> Plan:
    """The messages of ``slice_`` to publish, in admission order, timed, MAPEM before SPATEM."""
    if speed is not None and speed <= 0:
        raise ValueError("speed must be positive (or None: as fast as possible)")
    plan = Plan()
    ordered = sorted(slice_, key=LoggedMessage.admission_key)
    start = ordered[0].arrival_ms if ordered else 0
    messages = []
    for logged in ordered:
        planned = _planned(logged, target, plan)
        if planned is not None:
            due = 0.0 if speed is None else (logged.arrival_ms - start) / 1000 / speed
            messages.append(replace(planned, due_s=due))
    context = [planned for logged in earlier_mapems if (planned := _planned(logged, target, Plan())) is not None]
    plan.messages = mapem_first(messages, context, plan)
    return plan


def describe(planned: PlannedMessage) -> dict[str, object]:
    """One line of a dry run's listing (JSON-friendly)."""
    logged = planned.logged
    return {"dueS": round(planned.due_s, 3), "messageId": logged.message_id, "address": planned.address,
            "messageType": logged.message_type, "publicationId": logged.publication_id,
            "shardKey": logged.shard_key, "bytes": len(planned.raw), "how": planned.how,
            **({"note": planned.note} if planned.note else {})}


def describe_json(planned: PlannedMessage) -> str:
    return json.dumps(describe(planned), separators=(",", ":"))
