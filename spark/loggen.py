"""Synthetic node logs (interchange.ground.logformat version 2) for the pipeline's tests and benchmarks.

:func:`received` / :func:`sent` / :func:`event_record` build single records; :func:`traffic`
generates a large, mostly conforming log with a known share of faults of each kind (~1 % of the
messages each: invalid properties, rejections, drops, expiries, late deliveries, and of the SPATEMs
one of an intersection no MAPEM describes; CAMs and CPMs a little early or late by drift).
Pure Python (no pyspark), so the plain-Python audit of the benchmark shares it.
"""
from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from interchange.ground import logformat

QUADTREE = ",120202101232300231,"


def denm_properties(publisher_id: str = "NL00001", local_id: str = "1", **extra: object) -> dict[str, object]:
    props: dict[str, object] = {
        "publisherId": publisher_id, "publicationId": f"{publisher_id}:{local_id}", "originatingCountry": "NL",
        "protocolVersion": "DENM:1.2.2", "messageType": "DENM", "quadTree": QUADTREE,
        "causeCode": 3, "subCauseCode": 0, "longitude": 4.73, "latitude": 51.48,
    }
    props.update(extra)
    return props


def properties(message_type: str, publisher_id: str = "NL00001", local_id: str = "1", **extra: object) -> dict[str, object]:
    """Valid application properties of ``message_type`` (tables 1-7), with ``extra`` on top."""
    props = denm_properties(publisher_id, local_id)
    for name in ("causeCode", "subCauseCode"):
        del props[name]
    props["messageType"] = message_type
    props["protocolVersion"] = f"{message_type}:2"
    match message_type:
        case "DENM":
            props = denm_properties(publisher_id, local_id)
        case "CAM":
            props["stationType"] = 5
        case "CPM":
            props["type"] = "RSU"
        case "SPATEM" | "MAPEM":
            props["id"] = ",1,"
    props.update(extra)
    return props


def _common(event: str, node: str, process: int, at_ms: int, level: str = "info") -> dict[str, object]:
    return {"schemaVersion": 2, "timestamp": logformat.iso_ms(at_ms), "timestampMs": at_ms, "level": level,
            "event": event, "node": node, "process": process}


def message_id(node: str, seq: int, process: int = 1, boot_ms: int = 1_700_000_000_000) -> str:
    return f"{node}/{process}/{boot_ms}/{seq}"


@dataclass
class Message:
    """A message admitted by a node: what every record about it repeats."""

    node: str
    seq: int
    arrival_ms: int
    props: Mapping[str, object]
    publisher: str = "actor-1"
    address: str = "denm-in"
    body: bytes = b"payload"
    process: int = 1
    shard_seq: int = 1
    expiry_ms: int | None = None
    origin: str = "local"
    neighbour: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return message_id(self.node, self.seq, self.process)

    def fields(self) -> dict[str, object]:
        props = self.props
        publication_id = props.get("publicationId")
        shard_id = props.get("shardId", 1) if isinstance(props.get("shardId", 1), int) else None
        return {
            "messageId": self.id, "amqpMessageId": None, "identity": self.publisher, "publisher": self.publisher,
            "messageType": props.get("messageType"), "publicationId": publication_id, "shardId": shard_id,
            "shardKey": f"{publication_id}#{shard_id}", "shardSeq": self.shard_seq,
            "arrivalTime": logformat.iso_ms(self.arrival_ms), "arrivalMs": self.arrival_ms, "size": len(self.body) + 100,
            "bodySha256": hashlib.sha256(self.body).hexdigest(),
            "expiryMs": self.expiry_ms if self.expiry_ms is not None else self.arrival_ms + 60_000,
            "expirySource": "ttl", "origin": self.origin, "neighbour": self.neighbour,
            "applicationProperties": logformat.json_properties(props), **self.extra,
        }


def received(message: Message) -> dict[str, object]:
    return {**_common("received_message", message.node, message.process, message.arrival_ms),
            "address": message.address, **message.fields()}


def sent(message: Message, departure_ms: int, consumer: str = "actor-2", source: str = "actor-2-src",
         attempt: int = 1, outcome: str = "accepted") -> dict[str, object]:
    record = {**_common("sent_message", message.node, message.process, departure_ms),
              "address": source, **message.fields()}
    record.update(identity=consumer, consumer=consumer, source=source, attempt=attempt, outcome=outcome,
                  departureTime=logformat.iso_ms(departure_ms), departureMs=departure_ms, settledMs=departure_ms + 1)
    return record


def lost(event: str, message: Message, at_ms: int, source: str = "actor-2-src") -> dict[str, object]:
    """A dropped_message (buffer full) or expired_message in ``source``, or an unroutable_message."""
    level = "warning" if event == "dropped_message" else "info"
    record = {**_common(event, message.node, message.process, at_ms, level), **message.fields()}
    if event == "unroutable_message":
        record["address"] = message.address
    else:
        record.update(address=source, source=source)
    if event == "dropped_message":
        record["reason"] = "buffer_full"
    return record


def rejected(node: str, seq: int, at_ms: int, reason: str, publisher: str = "actor-1") -> dict[str, object]:
    return {**_common("rejected_message", node, 1, at_ms, "warning"), "messageId": message_id(node, seq),
            "address": "denm-in", "identity": publisher, "publisher": publisher, "size": 120, "reason": reason,
            "details": {"reason": reason}}


def event_record(event: str, node: str, at_ms: int, **details: object) -> dict[str, object]:
    return {**_common(event, node, 0, at_ms), "details": details}


def lines(records: list[dict[str, object]]) -> str:
    return "".join(logformat.dumps(record) + "\n" for record in records)


# --- a large log with known fault rates ----------------------------------------------------------

#: publications of the generated traffic: (messageType, interval between messages in ms)
_STREAMS = (("CAM", 1000), ("CPM", 1000), ("DENM", 60_000), ("IVIM", 120_000), ("MAPEM", 60_000),
            ("SPATEM", 1000))
#: Rounds (every publication once) start this far apart: a CAM 1 s to 120 s after the previous one
#: (IP_124) and a CPM 0.9 s to 1.1 s (IP_136), but for the drift of a publication within its round.
ROUND_MS = 1050


def traffic(lines_wanted: int, seed: int = 8, node: str = "ixc-a", start_ms: int = 1_795_000_000_000,
            publications: int = 400) -> Iterator[str]:
    """About ``lines_wanted`` log lines: each message received and delivered once, ~1 % of each fault."""
    rng = random.Random(seed)  # noqa: S311 (a synthetic log, not a secret)
    streams = [(_STREAMS[i % len(_STREAMS)], _publisher(i), str(i)) for i in range(publications)]
    seq, written, round_start = 0, 0, start_ms
    admitted = [0] * len(streams)  # per publication (one shard each): its shardSeq, as the broker numbers it
    while written < lines_wanted:
        now = round_start
        for index, ((message_type, _interval), publisher_id, local_id) in enumerate(streams):
            seq += 1
            now += 1 + rng.randrange(3)
            fault = rng.randrange(100)
            if fault != REJECTED:  # a rejected message gets no shardSeq
                admitted[index] += 1
            yield from _one_message(rng, node, seq, now, message_type, publisher_id, local_id, fault, admitted[index])
            written += 2
        round_start = max(round_start + ROUND_MS, now + 1)


def _publisher(stream: int) -> str:
    """The publisherId of a stream; a SPATEM stream's is that of the MAPEM stream before it (IP_104)."""
    if _STREAMS[stream % len(_STREAMS)][0] == "SPATEM":  # never stream 0: SPATEM is the sixth type
        stream -= 1
    return f"NL{stream % 16000:05d}"


#: The fault number of a rejected message (IP_016).
REJECTED = 1


def _one_message(rng: random.Random, node: str, seq: int, at_ms: int, message_type: str,
                 publisher_id: str, local_id: str, fault: int, shard_seq: int) -> Iterator[str]:
    props = properties(message_type, publisher_id, local_id)
    if fault == 0:
        props["originatingCountry"] = "nl"  # IP_022
    if fault == 5 and message_type == "SPATEM":
        props["id"] = ",2,"  # IP_104: an intersection no MAPEM describes (theirs is ",1,")
    if fault == REJECTED:
        yield logformat.dumps(rejected(node, seq, at_ms, "quadTree: malformed (IP_037)"))
        return
    message = Message(node, seq, at_ms, props, body=f"{message_type}-{seq}".encode(), shard_seq=shard_seq)
    yield logformat.dumps(received(message))
    match fault:
        case 2:
            yield logformat.dumps(lost("dropped_message", message, at_ms + 5))
        case 3:
            yield logformat.dumps(lost("expired_message", message, at_ms + 60_001))
        case 4:
            yield logformat.dumps(sent(message, at_ms + 30 + rng.randrange(100)))  # IP_012: 30 ms or more
        case _:
            yield logformat.dumps(sent(message, at_ms + rng.randrange(20)))  # under 30 ms
