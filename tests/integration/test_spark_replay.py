"""`audit replay`: a log slice published again into a running node (real broker, TLS 1.3, SASL EXTERNAL)
and received by a consumer byte for byte; the plan's order and timing; refusals as clear errors."""
from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Message
from pyspark.sql import SparkSession

from certs import TestPki
from certs.tls import TlsFiles, client_context
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.client import ClientConnection
from interchange.testing.broker_harness import (
    BROKER_CN,
    BrokerUnderTest,
    make_pki,
    receive_from_every_process,
    start_broker,
    wait_for_records,
)
from spark import loggen
from spark.cli import main
from spark.replay_plan import EXACT, REBUILT, LoggedMessage, build_plan, rebuild

T0 = 1_795_000_000_000
NODE = "ixc-a"


@pytest.fixture
def broker(pki: TestPki, tmp_path: Path) -> Iterator[BrokerUnderTest]:
    node = start_broker(pki, tmp_path / "node", [TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                        [SourceSpec(address="all", consumers=frozenset({"actor-2"}))])
    yield node
    node.stop()


def _encoded(message_type: str, local_id: str, body: bytes, **extra: object) -> tuple[dict[str, object], bytes]:
    props = loggen.properties(message_type, "NL00001", local_id, **extra)
    message = Message(body=body, properties=props, inferred=True, ttl=60.0, id=f"amqp-{local_id}")
    return props, bytes(message.encode())


def _record(seq: int, at_ms: int, props: dict[str, object], raw: bytes | None, body: bytes,
            publisher: str = "actor-1", log_properties: bool = True) -> dict[str, object]:
    extra: dict[str, object] = {"rawMessageHex": raw.hex() if raw is not None else None}
    if not log_properties:
        extra["applicationProperties"] = None
    else:
        extra["bodyContentHex"] = body.hex()
    message = loggen.Message(NODE, seq, at_ms, props, publisher=publisher, address="in", body=body,
                             expiry_ms=at_ms + 30_000, extra=extra)
    return loggen.received(message)


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    shuffled = list(records)
    random.Random(4).shuffle(shuffled)  # file order is not admission order
    path.write_text(loggen.lines(shuffled))
    return path


def _scenario_log(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A DENM shard (raw, then rebuilt-only), a SPATEM logged before its MAPEM, an invalid DENM,
    another publisher's DENM (filtered out) and a DENM logged without properties or body (skipped)."""
    first_props, first = _encoded("DENM", "d", b"\x01denm-1")
    second_props = dict(first_props)
    spatem_props, spatem = _encoded("SPATEM", "s", b"\x02spat", id=",7,")
    mapem_props, mapem = _encoded("MAPEM", "m", b"\x03map", id=",7,")
    bad_props, bad = _encoded("DENM", "x", b"\x04bad", originatingCountry="nl")
    other_props, other = _encoded("DENM", "o", b"\x05other")
    records = [
        _record(2, T0, second_props, None, b"\x01denm-2"),  # same ms as seq 1: admission counter orders them
        _record(1, T0, first_props, first, b"\x01denm-1", log_properties=False),
        _record(3, T0 + 10, spatem_props, spatem, b"\x02spat", log_properties=False),
        _record(4, T0 + 20, mapem_props, mapem, b"\x03map", log_properties=False),
        _record(5, T0 + 30, bad_props, bad, b"\x04bad"),
        _record(6, T0 + 40, other_props, other, b"\x05other", publisher="actor-3"),
        {**_record(7, T0 + 50, first_props, None, b""), "applicationProperties": None, "bodyContentHex": None},
    ]
    rebuilt = rebuild(LoggedMessage(None, NODE, T0, properties={k: json.dumps(v) if isinstance(v, bool) else str(v)
                                                                  for k, v in second_props.items()},
                                    kinds={k: _kind(v) for k, v in second_props.items()},
                                    body_hex=b"\x01denm-2".hex(), expiry_ms=T0 + 30_000, expiry_source="ttl"))
    return _write(tmp_path / "node.jsonl", records), {"first": first, "rebuilt": rebuilt, "spatem": spatem,
                                                     "mapem": mapem}


def _kind(value: object) -> str:
    return {bool: "boolean", int: "integer", float: "float"}.get(type(value), "string")


def _consume(broker: BrokerUnderTest, pki: TestPki, wanted: int) -> list[bytes]:
    """What actor-2 receives from source "all" (raw bytes, as the node forwards them)."""
    received: list[bytes] = []

    async def consume() -> None:
        context = client_context(TlsFiles.from_pki(pki.directory, "actor-2", with_crls=False))
        conn = await ClientConnection.open("127.0.0.1", broker.port, context, BROKER_CN, "consumer")
        conn.open_receiver("all", lambda raw: received.append(raw))
        for _ in range(200):
            if len(received) >= wanted:
                break
            await asyncio.sleep(0.025)
        await asyncio.sleep(0.2)  # nothing more should come
        await conn.close()

    asyncio.run(consume())
    return received


def _replay_args(log: Path, broker: BrokerUnderTest, pki: TestPki, *extra: str) -> list[str]:
    return ["replay", "--input", str(log), "--broker", f"127.0.0.1:{broker.port}", "--server-name", BROKER_CN,
            "--pki", str(pki.directory), "--cn", "actor-1", "--timeout", "5", *extra]


def test_replay_into_a_running_node_is_received_byte_for_byte(
        spark: SparkSession, broker: BrokerUnderTest, pki: TestPki, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    log, expected = _scenario_log(tmp_path)
    summary_file = tmp_path / "summary.json"
    status = main(_replay_args(log, broker, pki, "--publisher", "actor-1", "--fast", "--json",
                               "--output", str(summary_file)))
    summary = json.loads(capsys.readouterr().out)
    assert status == 1  # one rejected, one skipped
    assert summary == json.loads(summary_file.read_text())
    counts = {k: summary[k] for k in ("selected", "planned", "byteExact", "rebuilt", "skipped", "mapemMoved",
                                      "sent", "accepted", "rejected", "notSent", "unsettled")}
    assert counts == {"selected": 6, "planned": 5, "byteExact": 4, "rebuilt": 1, "skipped": 1, "mapemMoved": 1,
                      "sent": 5, "accepted": 4, "rejected": 1, "notSent": 0, "unsettled": 0}
    problems = {p["messageId"]: (p["outcome"], p["error"]) for p in summary["problems"]}
    assert problems[loggen.message_id(NODE, 7)][0] == "skipped"
    assert "property logging was off" in problems[loggen.message_id(NODE, 7)][1]
    outcome, error = problems[loggen.message_id(NODE, 5)]
    assert outcome == "rejected" and error.startswith("amqp:") and "originatingCountry" in error

    received = _consume(broker, pki, 4)
    # shard order kept (seq 1 before seq 2), the MAPEM moved ahead of its SPATEM (IP_104)
    assert [received[0], received[2], received[3]] == [expected["first"], expected["mapem"], expected["spatem"]]
    rebuilt, wanted = Message(), Message()  # rebuilt: the same properties, body and ttl (not byte-exact)
    rebuilt.decode(received[1])
    wanted.decode(expected["rebuilt"])
    assert (rebuilt.properties, rebuilt.body, rebuilt.ttl) == (wanted.properties, wanted.body, 30.0)


def test_dry_run_lists_the_plan_without_a_node(spark: SparkSession, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    log, _ = _scenario_log(tmp_path)
    status = main(["replay", "--input", str(log), "--dry-run", "--message-type", "SPATEM", "--speed", "2"])
    out = capsys.readouterr().out
    assert status == 0
    listing = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(item["messageType"], item["how"]) for item in listing] == [("SPATEM", EXACT)]
    assert "1 messages selected, 1 planned" in out
    assert "0 MAPEM moved" in out and "1 SPATEM intersections without any MAPEM" in out


def test_refusals_are_clear_errors(spark: SparkSession, broker: BrokerUnderTest, pki: TestPki, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    log, _ = _scenario_log(tmp_path)
    one = ["--publisher", "actor-1", "--message-type", "MAPEM", "--fast"]
    assert main(_replay_args(log, broker, pki, *one, "--target", "no-such-target")) == 1
    out = capsys.readouterr().out
    assert "not sent 1" in out and "target 'no-such-target' refused: amqp:not-found" in out

    stranger = make_pki(tmp_path / "other-pki")  # a certificate the node does not trust
    args = _replay_args(log, broker, pki, *one)
    args[args.index("--pki") + 1] = str(stranger.directory)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "audit replay: error: replay:" in err and ("TLS" in err or "refused" in err)

    args = _replay_args(log, broker, pki, *one, "--server-name", "other.interchange.test")
    assert main(args) == 2
    assert "not trusted as 'other.interchange.test'" in capsys.readouterr().err

    args = _replay_args(log, broker, pki, *one)
    args[args.index("--broker") + 1] = "127.0.0.1:1"
    assert main(args) == 2
    assert "cannot connect to 127.0.0.1:1" in capsys.readouterr().err

    assert main(["replay", "--input", str(log)]) == 2
    assert "--dry-run" in capsys.readouterr().err
    assert main(["replay", "--input", str(tmp_path / "nothing-here*"), "--dry-run"]) == 2
    assert "no log files" in capsys.readouterr().err


def test_the_logged_timing_is_kept_scaled_by_the_speed(spark: SparkSession, broker: BrokerUnderTest,
                                                       pki: TestPki, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    records = []
    for seq in range(3):
        props, raw = _encoded("DENM", "t", b"t%d" % seq)
        records.append(_record(seq + 1, T0 + 400 * seq, props, raw, b""))
    log = _write(tmp_path / "timed.jsonl", records)
    assert main(_replay_args(log, broker, pki, "--speed", "2", "--json")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["accepted"] == 3 and summary["durationS"] >= 0.4  # 800 ms of log at speed 2
    assert len(_consume(broker, pki, 3)) == 3


def _logged(seq: int, at_ms: int, message_type: str, ids: str = ",1,", publication: str = "p") -> LoggedMessage:
    props = {k: str(v) for k, v in loggen.properties(message_type, "NL00001", publication, id=ids).items()}
    kinds = {k: _kind(v) for k, v in loggen.properties(message_type, "NL00001", publication).items()}
    return LoggedMessage(loggen.message_id(NODE, seq), NODE, at_ms, "in", message_type=message_type,
                         properties=props, kinds=kinds | {"id": "string"}, body_hex="00")


def test_plan_order_timing_and_mapem_before_spatem() -> None:
    slice_ = [_logged(3, T0 + 1000, "SPATEM", ",1,2,"), _logged(1, T0, "DENM"), _logged(2, T0, "DENM"),
              _logged(4, T0 + 3000, "MAPEM", ",2,"), _logged(5, T0 + 4000, "SPATEM", ",2,")]
    earlier = [_logged(0, T0 - 5000, "MAPEM", ",1,")]
    plan = build_plan(slice_, speed=2.0, earlier_mapems=earlier)
    assert [(p.logged.message_id.rsplit("/", 1)[1], p.due_s) for p in plan.messages] == [
        ("1", 0.0), ("2", 0.0), ("0", 0.5), ("4", 0.5), ("3", 0.5), ("5", 2.0)]
    assert (plan.mapem_added, plan.mapem_moved, plan.spatem_without_mapem) == (1, 1, 0)
    assert {p.how for p in plan.messages} == {REBUILT}
    fast = build_plan(slice_, speed=None)
    assert {p.due_s for p in fast.messages} == {0.0} and fast.spatem_without_mapem == 1
    with pytest.raises(ValueError):
        build_plan(slice_, speed=0)


def test_rebuilt_message_keeps_typed_properties_and_ttl() -> None:
    logged = LoggedMessage("x", NODE, T0, properties={"causeCode": "3", "latitude": "51.5", "flag": "true",
                                                      "messageType": "DENM"},
                           kinds={"causeCode": "integer", "latitude": "float", "flag": "boolean",
                                  "messageType": "string"},
                           body_hex="0102", expiry_ms=T0 + 1500, expiry_source="ttl")
    message = Message()
    message.decode(rebuild(logged))
    assert message.properties == {"causeCode": 3, "latitude": 51.5, "flag": True, "messageType": "DENM"}
    assert message.body == b"\x01\x02" and message.ttl == 1.5


def test_a_nodes_own_raw_log_replayed_into_another_node_arrives_byte_for_byte(
        spark: SparkSession, broker: BrokerUnderTest, pki: TestPki, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Node A logs what actor-1 published with the raw switch on; its log, replayed into node B, reaches
    B's consumer as exactly the bytes actor-1 sent to A (header, properties and all)."""
    first = start_broker(pki, tmp_path / "a", [TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                         log_options={"raw": True})
    sent = [Message(body=b"\x01%d" % n, properties=loggen.properties("DENM", "NL00001", "own"), inferred=True,
                    ttl=60.0, id=f"own-{n}", durable=n % 2 == 0) for n in range(3)]
    try:
        connection = first.connect("actor-1")
        sender = connection.create_sender("in")
        for message in sent:
            sender.send(message)
        connection.close()
        wait_for_records(first, lambda r: r["event"] == "received_message" and r.get("rawMessageHex")
                         and r["amqpMessageId"] == "own-2", "node A did not log the raw messages")
    finally:
        first.stop()
    assert main(_replay_args(first.log_path, broker, pki, "--fast", "--json")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["byteExact"], summary["accepted"], summary["rebuilt"]) == (3, 3, 0)
    assert _consume(broker, pki, 3) == [bytes(message.encode()) for message in sent]


def test_replay_into_a_node_of_two_broker_processes_keeps_each_shards_order(
        spark: SparkSession, pki: TestPki, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two shards admitted by two broker processes (targets in-0 on process 0, in-1 on process 1), all
    in the same millisecond and logged shuffled: replayed to each process's listener, each shard
    reaches the consumer in its admission order (the process's admission counter in messageId)."""
    node = start_broker(pki, tmp_path / "node",
                        [TargetSpec(address=f"in-{p}", publishers=frozenset({"actor-1"}), process=p) for p in (0, 1)],
                        [SourceSpec(address="all", consumers=frozenset({"actor-2"}))], processes=2)
    try:
        records, expected = [], {}
        for process, shard in ((0, "a"), (1, "b")):
            props = loggen.properties("DENM", "NL00001", shard)
            bodies = [b"%s%d" % (shard.encode(), n) for n in range(1, 6)]
            expected[shard] = bodies
            for n, body in enumerate(bodies, start=1):  # admission counters 11, 12, ... in one millisecond
                message = loggen.Message(NODE, 10 + n, T0, props, address=f"in-{process}", body=body,
                                         process=process, shard_seq=n,
                                         extra={"bodyContentHex": body.hex(), "rawMessageHex": None})
                records.append(loggen.received(message))
        log = _write(tmp_path / "two-processes.jsonl", records)
        ports = node.node.amqps_ports
        for process, shard in ((0, "a"), (1, "b")):
            args = _replay_args(log, node, pki, "--fast", "--json", "--publication-id", f"NL00001:{shard}")
            args[args.index("--broker") + 1] = f"127.0.0.1:{ports[process]}"
            assert main(args) == 0
            summary = json.loads(capsys.readouterr().out)
            assert (summary["planned"], summary["accepted"], summary["rebuilt"]) == (5, 5, 5)
        received = receive_from_every_process(pki, ports, "all", 10)
        for shard, bodies in expected.items():
            assert [body for body in received if body[:1] == shard.encode()] == bodies
    finally:
        node.stop()




def test_an_empty_or_contradictory_slice_is_refused(spark: SparkSession, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """--from after --until is refused before Spark reads anything; a slice that selects nothing exits 2
    and says what was searched and what the log holds, without connecting (the broker is unreachable)."""
    log, _ = _scenario_log(tmp_path)
    nowhere = ["--broker", "127.0.0.1:1", "--pki", str(tmp_path), "--cn", "actor-1"]
    assert main(["replay", "--input", str(tmp_path / "no-such-log"), "--from", "2026-11-23T10:05:00Z",
                 "--until", "2026-11-23T10:00:00Z", "--dry-run"]) == 2  # refused before the input is looked at
    assert "--from 2026-11-23T10:05:00.000Z is not before --until 2026-11-23T10:00:00.000Z" in capsys.readouterr().err
    assert main(["replay", "--input", str(log), "--node", "ixc-nowhere", *nowhere]) == 2
    err = capsys.readouterr().err
    assert "no message selected by --node ixc-nowhere" in err and f"nodes {NODE}" in err
    assert "cannot connect" not in err and "received messages from 2026-11-18T" in err
    assert main(["replay", "--input", str(log), "--publisher", "actor-nobody", "--dry-run"]) == 2
    assert "no message selected by --publisher actor-nobody" in capsys.readouterr().err
