"""An independent oracle for the audit: a node log with planted violations whose exact set is known.

Written from the log schema (:mod:`interchange.ground.logformat`: the record fields, the messageId
``<node>/<process>/<bootMs>/<seq>``, shardSeq numbered per shard from 1 in each process start) and
from the profile's text alone (the C-Roads IP Based Interface Profile's sentences), never from
``spark/``: the bounds below are the spec's words ("in <30ms", "5000 messages ... in <1000ms",
"at least every 9 min", "between 1 per second and 1 per 120 seconds", "1 per second", "SPATEM only
after corresponding MAPEM", "not delivering messages with the same shardId out-of-order"), the
properties those of tables 1-7 as printed. Each planted violation says which (rule, check) must
find it and on which record; each near miss (29 ms, exactly 9 min, a restart) must give nothing.

:class:`OracleLog` builds the log (:meth:`OracleLog.lines`, rotated into files by
:meth:`OracleLog.files`); :data:`HOSTILE_LINES` are lines that are not records, with the reason kind
each must get.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from interchange.ground import logformat

T0 = 1_796_000_000_000  # 2026-11-30T...Z
NODE, OTHER_NODE = "ixc-o", "ixc-q"
BOOT, REBOOT = T0 - 3_600_000, T0 + 7_200_000  # the process's start, and its start again after a restart
QUADTREE = ",120202101232300231,1202021012323,"

#: The expected finding's key: (rule, check, messageId, property) (``second:<ms>`` for a burst: no message).
Finding = tuple[str, str, str, str | None]


def properties(message_type: str, publication: str, publisher_id: str = "NL00001", **extra: object) -> dict[str, object]:
    """A valid property set of ``message_type`` as tables 1-7 print them (mandatory ones and a few optional)."""
    props: dict[str, object] = {"publisherId": publisher_id, "publicationId": f"{publisher_id}:{publication}",
                                "originatingCountry": "NL", "protocolVersion": f"{message_type}:1.3.1",
                                "messageType": message_type, "quadTree": QUADTREE, "longitude": 4.73, "latitude": 51.48}
    match message_type:
        case "DENM":
            props.update(causeCode=1, subCauseCode=4)
        case "IVIM":
            props.update(iviStatus=0, iviType=",1,", iviContainer=",giv,")
        case "SPATEM" | "MAPEM":
            props.update(id=",5-57,", name=",main,")
        case "SREM" | "SSEM":
            props.update(id=",5-57,")
        case "CAM":
            props.update(stationType=5, vehicleRole=0)
        case "CPM":
            props.update(type="RSU")
    props.update(extra)
    return {k: v for k, v in props.items() if v is not None}


@dataclass
class Message:
    """One admitted (or rejected) message: what every record about it repeats."""

    node: str
    process: int
    boot: int
    seq: int
    arrival: int
    props: dict[str, object]
    publisher: str
    body: bytes
    shard_seq: int | None
    size: int

    @property
    def id(self) -> str:
        return logformat.message_id(self.node, self.process, self.boot, self.seq)

    @property
    def shard_key(self) -> str:
        return logformat.shard_key(self.props.get("publicationId"), self.props.get("shardId", 1))


@dataclass
class OracleLog:
    """The log and what an exact audit must find in it."""

    records: list[dict[str, object]] = field(default_factory=list)
    expected: set[Finding] = field(default_factory=set)
    _seq: dict[tuple[str, int, int], int] = field(default_factory=dict)
    _shard: dict[tuple[str, int, int, str], int] = field(default_factory=dict)

    # --- records ---------------------------------------------------------------------------------------
    def _base(self, event: str, node: str, process: int, at: int, level: str = "info") -> dict[str, object]:
        return {"schemaVersion": 2, "timestamp": logformat.iso_ms(at), "timestampMs": at, "level": level,
                "event": event, "node": node, "process": process}

    def _fields(self, m: Message) -> dict[str, object]:
        return {"messageId": m.id, "identity": m.publisher, "publisher": m.publisher,
                "messageType": m.props.get("messageType"), "publicationId": m.props.get("publicationId"),
                "shardId": m.props.get("shardId", 1), "shardKey": m.shard_key, "shardSeq": m.shard_seq,
                "arrivalTime": logformat.iso_ms(m.arrival), "arrivalMs": m.arrival, "size": m.size,
                "bodySha256": hashlib.sha256(m.body).hexdigest(), "expiryMs": m.arrival + 60_000,
                "expirySource": "ttl", "origin": "local", "neighbour": None,
                "applicationProperties": m.props}

    def admit(self, props: dict[str, object], at: int, *, node: str = NODE, process: int = 1, boot: int = BOOT,
              publisher: str = "actor-1", body: bytes | None = None, size: int = 300, skip_shard: int = 0,
              log: bool = True) -> Message:
        """A message admitted at ``at``: the next number of its process, the next shardSeq of its shard
        (``skip_shard`` numbers given to messages not logged first); its received_message when ``log``."""
        seq = self._seq[(node, process, boot)] = self._seq.get((node, process, boot), 0) + 1
        message = Message(node, process, boot, seq, at, props, publisher, body if body is not None else
                          f"body-{node}-{process}-{boot}-{seq}".encode(), None, size)
        key = (node, process, boot, message.shard_key)
        message.shard_seq = self._shard[key] = self._shard.get(key, 0) + 1 + skip_shard
        if log:
            self.received(message)
        return message

    def received(self, m: Message) -> dict[str, object]:
        record = {**self._base("received_message", m.node, m.process, m.arrival), "address": "in", **self._fields(m)}
        self.records.append(record)
        return record

    def sent(self, m: Message, departure: int, consumer: str = "actor-2", source: str = "actor-2-src",
             attempt: int = 1, outcome: str = "accepted", expiry: int | None = None) -> dict[str, object]:
        record = {**self._base("sent_message", m.node, m.process, departure), "address": source, **self._fields(m),
                  "identity": consumer, "consumer": consumer, "source": source, "attempt": attempt,
                  "outcome": outcome, "departureTime": logformat.iso_ms(departure), "departureMs": departure,
                  "settledMs": departure + 1}
        if expiry is not None:
            record["expiryMs"] = expiry
        self.records.append(record)
        return record

    def lost(self, event: str, m: Message, at: int, reason: str | None = None) -> None:
        level = "warning" if event == "dropped_message" else "info"
        record = {**self._base(event, m.node, m.process, at, level), **self._fields(m)}
        if event == "unroutable_message":
            record["address"] = "in"
        else:
            record.update(address="actor-2-src", source="actor-2-src")
        if reason is not None:
            record["reason"] = reason
        self.records.append(record)

    def rejected(self, at: int, reason: str) -> str:
        seq = self._seq[(NODE, 1, BOOT)] = self._seq.get((NODE, 1, BOOT), 0) + 1
        message_id = logformat.message_id(NODE, 1, BOOT, seq)
        self.records.append({**self._base("rejected_message", NODE, 1, at, "warning"), "messageId": message_id,
                             "address": "in", "identity": "actor-9", "publisher": "actor-9", "size": 99,
                             "reason": reason, "details": {"reason": reason}})
        return message_id

    def expect(self, rule: str, check: str, message_id: str, prop: str | None = None) -> None:
        self.expected.add((rule, check, message_id, prop))

    # --- output ----------------------------------------------------------------------------------------
    def lines(self) -> list[str]:
        """The log in time order (as a node writes it), one JSON object per line."""
        ordered = sorted(self.records, key=lambda r: (int(str(r["timestampMs"])), str(r.get("messageId")),
                                                      str(r["event"])))
        return [logformat.dumps(r) for r in ordered]

    def files(self, count: int) -> Iterator[str]:
        """The log cut into ``count`` consecutive rotated files' contents."""
        lines = self.lines()
        size = -(-len(lines) // count)
        for start in range(0, len(lines), size):
            yield "".join(line + "\n" for line in lines[start:start + size])


def build(burst: bool = True) -> OracleLog:
    """The log with one or more planted violations of every rule (and near misses of each)."""
    log = OracleLog()
    _per_record(log)
    _tables(log, T0 + 100_000)
    _shards(log, T0 + 200_000)
    _repetition(log, T0 + 300_000)
    _rates(log, T0 + 1_000_000)
    _intersections(log, T0 + 2_000_000)
    _copies(log, T0 + 2_100_000)
    if burst:
        _bursts(log, T0 + 3_000_000)
    # the newest record, much later: a stream's watermark passes every record above (no finding)
    log.admit(properties("DENM", "last"), T0 + 36_000_000)
    return log


def _per_record(log: OracleLog) -> None:
    at = T0
    log.admit(properties("MAPEM", "map-5-57"), at - 1000)  # the intersection of the Table 4 message below
    # IP_012 "in <30ms": 29 ms passes, 30 ms and 31 ms do not; a message of 500 KB or more is outside it
    for delay, found in ((29, False), (30, True), (31, True)):
        m = log.admit(properties("DENM", f"lat{delay}"), at)
        log.sent(m, at + delay)
        if found:
            log.expect("IP_012", "latency", m.id)
        at += 100
    big = log.admit(properties("DENM", "big"), at, size=600_000)
    log.sent(big, at + 50)
    # a redelivery (attempt 2, 40 ms after arrival) is not IP_012's: the first delivery is (AUDIT, released)
    held = log.admit(properties("DENM", "held"), at + 100)
    log.sent(held, at + 110, outcome="released")
    log.sent(held, at + 140, attempt=2)
    log.expect("AUDIT", "delivery_outcome", held.id)
    log.expect("AUDIT", "redelivery", held.id)
    # IP_033: delivered at the expiry passes, 1 ms after it does not; an expiry undelivered is accounted
    on_time = log.admit(properties("DENM", "exp0"), at + 200)
    log.sent(on_time, at + 205, expiry=at + 205)
    late = log.admit(properties("DENM", "exp1"), at + 300)
    log.sent(late, at + 305, expiry=at + 304)
    log.expect("IP_033", "delivered_after_expiry", late.id)
    gone = log.admit(properties("DENM", "gone"), at + 400)
    log.lost("expired_message", gone, at + 60_400)
    log.expect("IP_033", "expired_undelivered", gone.id)
    # IP_032 is about a full buffer; a loop drop is accounting; nobody's subscription: unroutable
    full = log.admit(properties("DENM", "full"), at + 500)
    log.lost("dropped_message", full, at + 501, "buffer_full")
    log.expect("IP_032", "dropped", full.id)
    looped = log.admit(properties("DENM", "loop"), at + 600)
    log.lost("dropped_message", looped, at + 601, "loop")
    log.expect("AUDIT", "discarded", looped.id)
    nobody = log.admit(properties("DENM", "nobody"), at + 700)
    log.lost("unroutable_message", nobody, at + 700)
    log.expect("AUDIT", "unroutable", nobody.id)
    # IP_016: a malformed message dropped and logged
    log.expect("IP_016", "rejected", log.rejected(at + 800, "quadTree: malformed (IP_037)"))
    # a record logged twice: one finding of its own, and its late delivery found once
    twice = log.admit(properties("DENM", "twice"), at + 900)
    record = log.sent(twice, at + 945)
    log.records.append(dict(record))
    log.expect("AUDIT", "record_logged_twice", twice.id)
    log.expect("IP_012", "latency", twice.id)


def _tables(log: OracleLog, at: int) -> None:
    """One message per table requirement, each breaking exactly one entry (and the property it concerns)."""
    broken = [
        ("IP_022", "originatingCountry", properties("DENM", "t22", originatingCountry="nl")),  # Table 1: ISO 3166 code
        ("IP_026", "causeCode", properties("DENM", "t26", causeCode="1")),  # Table 2: an integer
        ("IP_029", "iviType", properties("IVIM", "t29", iviType="1,2")),  # Table 3 / IP_029: ",1,0,2,"
        ("IP_100", "id", properties("SPATEM", "t100", id="5-57")),  # Table 4: ",5-57,"
        ("IP_103", "id", properties("SREM", "t103", id="5-57")),  # Table 5: ",5-57,"
        ("IP_122", "stationType", properties("CAM", "t122", stationType=None)),  # Table 6: mandatory
        ("IP_123", "vehicleRole", properties("CAM", "t123", vehicleRole="0")),  # Table 6: an integer
        ("IP_135", "type", properties("CPM", "t135", type=7)),  # Table 7: a string
        ("IP_037", "quadTree", properties("DENM", "t37", quadTree=",12a,")),  # digits of a quadtree
        ("IP_038", "quadTree", properties("DENM", "t38", quadTree=",1202021012323,")),  # no tile of zoom 18
        ("IP_131", "acme", properties("DENM", "t131", acme=1)),  # custom-<namespace>-<name>
        ("IP_130", "shardId", properties("DENM", "t130", shardId=3, shardCount=2)),  # shardId <= shardCount
        ("IP_128", "shardId", properties("DENM", "t128", shardId=0)),  # Table 1: "The id starts at 1"
    ]
    for i, (rule, prop, props) in enumerate(broken):
        message = log.admit(props, at + i * 10)
        log.expect(rule, "properties", message.id, prop)
    log.admit(properties("DENM", "fine", **{"custom-nl-note": "x"}), at + 500)  # a custom name as IP_131 words it


def _shards(log: OracleLog, at: int) -> None:
    """IP_128 in one admission sequence; a restart numbers from 1 again (no finding); gaps in the log."""
    shard = properties("SPATEM", "shard", publisher_id="NL00002", id=",9-1,", shardId=2, shardCount=4)
    log.admit(properties("MAPEM", "shard-map", publisher_id="NL00002", id=",9-1,"), at - 50)
    one = log.admit(shard, at)
    two = log.admit(shard, at + 10)
    log.sent(two, at + 15)
    log.sent(one, at + 16)  # 1 after 2 on the same link: out of order
    log.expect("IP_128", "shard_order", one.id)
    log.sent(one, at + 17, consumer="actor-3", source="actor-3-src")  # another link in order: fine
    log.sent(two, at + 18, consumer="actor-3", source="actor-3-src")
    # the process starts again: its numbers start at 1 again, after 2 above: no finding
    again = log.admit(shard, at + 1000, boot=REBOOT)
    log.sent(again, at + 1005)
    # gaps: 3 and 6-8 of the restarted sequence admitted but not logged
    log.admit(shard, at + 1010, boot=REBOOT)
    after_one = log.admit(shard, at + 1020, boot=REBOOT, skip_shard=1)
    log.expect("AUDIT", "shard_gap", after_one.id)
    log.admit(shard, at + 1030, boot=REBOOT)
    after_three = log.admit(shard, at + 1040, boot=REBOOT, skip_shard=3)
    log.expect("AUDIT", "shard_gap", after_three.id)
    # the same shard in another process of the node: its own sequence from 1, no gap
    log.admit(shard, at + 1050, process=2)
    log.admit(shard, at + 1060, process=2)


def _repetition(log: OracleLog, at: int) -> None:
    """IP_048: "repeated at least every 9 min": 9 min exactly passes, 1 ms more does not."""
    nine = 9 * 60_000
    ivim = properties("IVIM", "rep")
    log.admit(ivim, at)
    log.admit(ivim, at + nine)
    late = log.admit(ivim, at + 2 * nine + 1)
    log.expect("IP_048", "repetition", late.id)


def _rates(log: OracleLog, at: int) -> None:
    """IP_124: CAMs "between 1 per second and 1 per 120 seconds"; IP_136: CPMs "1 per second" (+-10 %)."""
    cam = properties("CAM", "cam")
    gaps_cam = [(1000, False), (999, True), (120_000, False), (120_001, True), (1000, False)]
    now = at
    log.admit(cam, now)
    for gap, found in gaps_cam:
        now += gap
        message = log.admit(cam, now)
        if found:
            log.expect("IP_124", "cam_rate", message.id)
    cpm = properties("CPM", "cpm")
    now = at + 500_000
    log.admit(cpm, now)
    for gap, found in ((1000, False), (900, False), (1100, False), (899, True), (1101, True)):
        now += gap
        message = log.admit(cpm, now)
        if found:
            log.expect("IP_136", "cpm_rate", message.id)


def _intersections(log: OracleLog, at: int) -> None:
    """IP_104: a SPATEM of an intersection no MAPEM was published for yet; another publisher's MAPEM counts."""
    early = log.admit(properties("SPATEM", "sp1", id=",7-1,"), at)
    log.expect("IP_104", "spatem_after_mapem", early.id)
    log.admit(properties("MAPEM", "map1", id=",7-1,"), at + 10)
    log.admit(properties("SPATEM", "sp1", id=",7-1,"), at + 20)
    log.admit(properties("MAPEM", "map2", publisher_id="NL00003", id=",7-2,"), at + 30)
    log.admit(properties("SPATEM", "sp2", id=",7-2,"), at + 40)


def _copies(log: OracleLog, at: int) -> None:
    """A message published again (same publication and body, another messageId): accounted; a record logged twice is not that."""
    cam = properties("CAM", "copy")
    log.admit(cam, at, body=b"same-cam")
    copy = log.admit(cam, at + 1000, body=b"same-cam")
    log.expect("AUDIT", "duplicate", copy.id)


def _bursts(log: OracleLog, at: int) -> None:
    """IP_013 "5000 messages ... in <1000ms": the last available 999 ms after the first arrival passes, 1000 ms does not."""
    for second, last in ((at, 999), (at + 10_000, 1000)):
        for i in range(5000):  # the last one arrives late in the second (its own latency under 30 ms)
            arrival = second + last - 25 if i == 4999 else second + i // 10
            message = log.admit(properties("CAM", f"burst{second}-{i}"), arrival, node=OTHER_NODE)
            log.sent(message, second + last if i == 4999 else arrival + 1)
        if last >= 1000:
            log.expect("IP_013", "burst", f"second:{second}")


@dataclass(frozen=True)
class Hostile:
    what: str
    line: bytes
    reason: str | None  #: the reason's kind (its start); None: a record


_OK = ('{"schemaVersion":2,"timestamp":"2026-11-30T00:00:00.000Z","timestampMs":1796000000000,"level":"info",'
       '"event":"connect","node":"ixc-o","process":0')

#: Lines that are not exactly one JSON object of a known schema version, each with the reason's kind
#: (RFC 8259 JSON, the log schema's versions 1 and 2), and two that are records.
HOSTILE_LINES = (
    Hostile("two objects", (_OK + '}{"event":"x"}').encode(), "more than one JSON value"),
    Hostile("two values", (_OK + '},{"event":"x"}').encode(), "more than one JSON value"),
    Hostile("duplicate key", (_OK + ',"event":"disconnect"}').encode(), "a key given twice: event"),
    Hostile("duplicate nested key", (_OK + ',"details":{"a":1,"a":2}}').encode(), "a key given twice: details.a"),
    Hostile("NaN", (_OK + ',"details":{"x":NaN}}').encode(), "NaN or Infinity"),
    Hostile("1e400", (_OK + ',"details":{"x":1e400}}').encode(), "a number out of range"),
    Hostile("lone surrogate", (_OK + ',"details":{"x":"\\ud800"}}').encode(), "a lone UTF-16 surrogate"),
    Hostile("invalid UTF-8", (_OK + ',"details":{"x":"').encode() + b"\xff\xfe" + b'"}}', "not valid UTF-8"),
    Hostile("schema version 3", _OK.replace('"schemaVersion":2', '"schemaVersion":3').encode() + b"}",
            "schemaVersion not readable here"),
    Hostile("an array", b"[1,2]", "not a JSON object"),
    Hostile("truncated", _OK.encode()[:60], "not JSON"),
    Hostile("48 MB", (_OK + ',"details":{"x":"' + "y" * 48_000_000 + '"}}').encode(), "line longer than"),
    Hostile("BOM", b"\xef\xbb\xbf" + _OK.encode() + b"}", None),
    Hostile("a carriage return inside", (_OK + ',\r"details":{}}').encode(), None),
    Hostile("duplicate property", (_OK + ',"applicationProperties":{"a":1,"b":{"a":1,"c":2},"a":2}}').encode(),
            "a key given twice: applicationProperties.a"),
    Hostile("a property's object repeating outer names", (_OK + ',"applicationProperties":{"a":{"b":1,"a":2},"b":1}}').encode(),
            None),
    Hostile("NaN and 1e400 inside strings", (_OK + ',"details":{"x":"ratio:1e400,[NaN]"}}').encode(), None),
)


def hostile_file() -> bytes:
    """The hostile lines, one per line (LF)."""
    return b"".join(h.line + b"\n" for h in HOSTILE_LINES)


def finding_keys(rows: Iterable[Any]) -> set[Finding]:
    """The oracle's key of each finding row of the audit's violations (a burst has no message: its second)."""
    return {(r.rule, r.check, r.messageId if r.messageId is not None else f"second:{r.timestampMs}",
             r.property if r.check == "properties" else None) for r in rows}
