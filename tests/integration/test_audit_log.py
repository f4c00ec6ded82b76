"""The auditable log (interchange.ground.logformat version 2) on real traffic: a real broker over
TLS 1.3 with proton clients; ids, shard sequence numbers, digests, expiry, raw messages, delivery
outcomes, drops, expiries, unroutable and rejected messages, processes and federated data."""
from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Message
from proton.reactor import AtMostOnce

from certs import TestPki
from certs.tls import TlsFiles, client_context
from ii_api.peers.federation import Federation, RemoteEndpoint
from interchange.broker.addresses import Scope, SourceSpec, TargetSpec
from interchange.ground import logformat
from interchange.ground.logfile import LogSettings
from interchange.testing.broker_harness import (
    BROKER_CN,
    BrokerUnderTest,
    client_connection,
    complete_records,
    denm,
    ivim,
    make_pki,
    running_broker,
    send_raw,
    start_broker,
    wait_for_records,
)

TARGETS = [TargetSpec(address="in", publishers=frozenset({"actor-1"}))]
SOURCES = [SourceSpec(address="all", consumers=frozenset({"actor-2", "actor-3"}))]
ID = re.compile(rf"^{re.escape(BROKER_CN)}/(\d+)/(\d+)/(\d+)$")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return make_pki(tmp_path_factory.mktemp("audit-pki"))


@pytest.fixture
def broker(pki: TestPki, tmp_path: Path) -> Iterator[BrokerUnderTest]:
    with running_broker(pki, tmp_path, TARGETS, SOURCES) as b:
        yield b


def records(path: Path, event: str | None = None) -> list[dict[str, Any]]:
    lines = complete_records(path)
    return [r for r in lines if event is None or r["event"] == event]


def wait_count(broker: BrokerUnderTest, event: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    found = wait_for_records(broker, lambda r: r["event"] == event, f"no {event} logged", timeout)
    deadline = time.monotonic() + timeout
    while len(found) < count and time.monotonic() < deadline:
        time.sleep(0.05)
        found = records(broker.log_path, event)
    assert len(found) == count, found
    return found


def encoded(message: Message) -> bytes:
    return bytes(message.encode())


def test_received_and_sent_records_carry_the_audit_fields(broker: BrokerUnderTest) -> None:
    broker.call(lambda: broker.node.log.update(LogSettings(level="debug", raw=True)))  # raw alone: no properties
    first = denm(body=b"a-1")
    first.id = "amqp-id-1"
    first.ttl = 30.0
    messages = [first, denm(body=b"a-2"), denm(body=b"b-1", publicationId="NO00001:denm-2"), denm(body=b"a-3")]
    payloads = [encoded(m) for m in messages]
    publisher = broker.connect("actor-1")
    assert [d.remote_state for d in send_raw(publisher, "in", payloads)] == [Delivery.ACCEPTED] * 4
    consumer = broker.connect("actor-2")
    receiver = consumer.create_receiver("all", credit=10)
    for _ in payloads:
        receiver.receive(timeout=5)
        receiver.accept()
    consumer.close()  # the blocking client sends the dispositions while it closes
    publisher.close()
    received = wait_count(broker, "received_message", 4)
    sent = wait_count(broker, "sent_message", 4)

    ids = [r["messageId"] for r in received]
    assert len(set(ids)) == 4
    parsed = [ID.match(i) for i in ids]
    assert all(parsed) and {m.group(1) for m in parsed if m} == {"0"}
    assert [int(m.group(3)) for m in parsed if m] == sorted(int(m.group(3)) for m in parsed if m)
    assert [r["shardKey"] for r in received] == ["NO00001:denm-1#1", "NO00001:denm-1#1", "NO00001:denm-2#1",
                                                 "NO00001:denm-1#1"]
    assert [r["shardSeq"] for r in received] == [1, 2, 1, 3]
    assert [r["amqpMessageId"] for r in received] == ["amqp-id-1", None, None, None]
    assert [r["bodySha256"] for r in received] == [hashlib.sha256(m.body).hexdigest() for m in messages]
    assert [bytes.fromhex(r["rawMessageHex"]) for r in received] == payloads  # byte-exact replay source
    assert received[0]["expirySource"] == "ttl" and received[0]["expiryMs"] == received[0]["arrivalMs"] + 30_000
    assert received[1]["expirySource"] == "default"
    for r in received:
        assert r["schemaVersion"] == 2 and r["process"] == 0 and r["node"] == BROKER_CN
        assert r["messageType"] == "DENM" and r["publicationId"].startswith("NO00001:") and r["shardId"] == 1
        assert r["origin"] == "local" and r["neighbour"] is None and r["publisher"] == "actor-1"
        assert r["address"] == "in" and r["size"] == len(payloads[ids.index(r["messageId"])])
        assert "applicationProperties" not in r and "bodyContentHex" not in r  # those switches are off
        assert abs(r["timestampMs"] - r["arrivalMs"]) < 5_000
        logformat.parse_line(json.dumps(r))
    by_id = {r["messageId"]: r for r in received}
    for s in sent:
        assert s["consumer"] == s["identity"] == "actor-2" and s["source"] == s["address"] == "all"
        assert s["attempt"] == 1 and s["outcome"] == "accepted"
        assert by_id[s["messageId"]]["shardSeq"] == s["shardSeq"]
        assert by_id[s["messageId"]]["arrivalMs"] <= s["departureMs"] <= s["settledMs"]
        assert s["departureTime"] == logformat.iso_ms(s["departureMs"])
    assert [s["messageId"] for s in sent] == ids


def body(message: Message) -> bytes:
    """The body as bytes (proton hands out a memoryview into a buffer it reuses)."""
    return bytes(message.body)


def test_sent_message_outcomes_and_attempts(broker: BrokerUnderTest) -> None:
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    consumer = broker.connect("actor-2")
    rx = consumer.create_receiver("all", credit=1)
    settle = {"accept": rx.accept, "release": lambda: rx.release(delivered=False),
              "modify": lambda: rx.release(delivered=True), "reject": rx.reject}
    # what the consumer does with each delivery of a message, in turn (released ones come back)
    plans = {b"accepted": ["accept"], b"released": ["release", "accept"], b"modified": ["modify", "accept"],
             b"rejected": ["reject"]}
    for name in plans:
        sender.send(denm(body=name))
    for _ in range(6):
        settle[plans[body(rx.receive(timeout=5))].pop(0)]()
    assert all(not steps for steps in plans.values())
    sender.send(denm(body=b"lost"))
    assert body(rx.receive(timeout=5)) == b"lost"  # never settled: the connection goes away
    consumer.close()
    other = broker.connect("actor-3")
    presettled = other.create_receiver("all", credit=5, options=AtMostOnce())
    assert body(presettled.receive(timeout=5)) == b"lost"
    other.close()
    publisher.close()

    sent = wait_count(broker, "sent_message", 8)
    bodies = {r["messageId"]: bytes.fromhex(r["bodyContentHex"]).decode() for r in records(broker.log_path,
                                                                                          "received_message")}
    seen = sorted((bodies[s["messageId"]], s["attempt"], s["outcome"], s["consumer"]) for s in sent)
    assert seen == [("accepted", 1, "accepted", "actor-2"), ("lost", 1, "link_lost", "actor-2"),
                    ("lost", 2, "presettled", "actor-3"), ("modified", 1, "modified", "actor-2"),
                    ("modified", 2, "accepted", "actor-2"), ("rejected", 1, "rejected", "actor-2"),
                    ("released", 1, "released", "actor-2"), ("released", 2, "accepted", "actor-2")]
    presettled_record = [s for s in sent if s["outcome"] == "presettled"][0]
    assert presettled_record["departureMs"] == presettled_record["settledMs"]
    assert all(s["departureMs"] <= s["settledMs"] for s in sent)


def test_losses_are_logged_with_every_switch_off(pki: TestPki, tmp_path: Path) -> None:
    sources = [SourceSpec(address="small", consumers=frozenset({"actor-2"}), max_messages=200,
                          selector="messageType = 'DENM'")]
    b = start_broker(pki, tmp_path, TARGETS, sources)
    try:
        b.call(lambda: b.node.log.update(LogSettings(level="info")))  # properties, payload and raw off
        publisher = b.connect("actor-1")
        payloads = [encoded(denm(body=f"{i}".encode())) for i in range(203)]
        send_raw(publisher, "in", payloads)  # 3 too many for the source: its 3 oldest are evicted
        stale = denm(body=b"stale")
        stale.expiry_time = time.time() - 60  # absolute-expiry-time in the past
        short = denm(body=b"short")
        short.ttl = 0.2
        bad = denm(body=b"bad")
        del bad.properties["messageType"]
        deliveries = send_raw(publisher, "in", [encoded(m) for m in (ivim(), stale, short, bad)], name="second")
        assert [d.remote_state for d in deliveries] == [Delivery.ACCEPTED] * 3 + [Delivery.REJECTED]
        dropped = wait_count(b, "dropped_message", 4)  # "short" evicts a fourth
        expired = wait_count(b, "expired_message", 2)  # on arrival; then in the source (housekeeping)
        unroutable = wait_count(b, "unroutable_message", 1)
        rejected = wait_count(b, "rejected_message", 1)
        publisher.close()
        b.call(lambda: b.node.addresses.remove("small"))  # e.g. a subscription withdrawn: its buffer goes
        deleted = [r for r in wait_count(b, "dropped_message", 4 + 199) if r["reason"] == "source_deleted"]
    finally:
        b.stop()
    assert records(b.log_path, "received_message") == [] and records(b.log_path, "sent_message") == []
    assert [d["reason"] for d in dropped] == ["buffer_full"] * 4 and all(d["level"] == "warning" for d in dropped)
    # 204 DENMs offered, 4 evicted, "short" expired: 199 still buffered when the source went
    assert [bytes.fromhex(d["bodySha256"]) for d in deleted] == [hashlib.sha256(f"{i}".encode()).digest()
                                                                  for i in range(4, 203)]
    assert [d["bodySha256"] for d in dropped] == [hashlib.sha256(f"{i}".encode()).hexdigest() for i in range(4)]
    assert [d["shardSeq"] for d in dropped] == [1, 2, 3, 4] and {d["source"] for d in dropped} == {"small"}
    ids = [int(d["messageId"].rsplit("/", 1)[1]) for d in dropped]
    assert ids == [ids[0] + i for i in range(4)]
    on_arrival, in_source = expired
    assert on_arrival["source"] is None and on_arrival["address"] == "in"
    assert on_arrival["expirySource"] == "absolute-expiry-time" and on_arrival["expiryMs"] < on_arrival["arrivalMs"]
    assert in_source["source"] == "small" and in_source["expirySource"] == "ttl"
    assert in_source["expiryMs"] == in_source["arrivalMs"] + 200 <= in_source["timestampMs"]
    assert unroutable[0]["messageType"] == "IVIM" and unroutable[0]["address"] == "in"
    assert rejected[0]["reason"] == rejected[0]["details"]["reason"] and "messageType" in rejected[0]["reason"]
    assert rejected[0]["bodySha256"] == hashlib.sha256(b"bad").hexdigest()
    every = [*dropped, *deleted, *expired, *unroutable, *rejected]
    assert len({r["messageId"] for r in every}) == len(every)
    for r in every:
        assert "applicationProperties" not in r and "rawMessageHex" not in r
        logformat.parse_line(json.dumps(r))


def test_worker_records_carry_their_process_index(pki: TestPki, tmp_path: Path) -> None:
    b = start_broker(pki, tmp_path,
                     targets=[TargetSpec(address="in-1", publishers=frozenset({"actor-1"}), process=1)],
                     sources=[SourceSpec(address="all", consumers=frozenset({"actor-2"}))], processes=2)
    try:
        worker_port = b.node.amqps_ports[1]
        publisher = client_connection(pki, "actor-1", worker_port)
        publisher.create_sender("in-1").send(denm(body=b"p1"))
        publisher.close()
        consumer = client_connection(pki, "actor-2", worker_port)
        rx = consumer.create_receiver("all", credit=1)
        assert body(rx.receive(timeout=10)) == b"p1"
        rx.accept()
        consumer.close()
        worker_log = tmp_path / "node.p1.log"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not records(worker_log, "sent_message"):
            time.sleep(0.05)
    finally:
        b.stop()
    [received] = records(worker_log, "received_message")
    [sent] = records(worker_log, "sent_message")
    assert {r["process"] for r in records(worker_log)} == {1}
    assert ID.match(received["messageId"]) and received["messageId"].split("/")[1] == "1"
    assert sent["messageId"] == received["messageId"] and sent["outcome"] == "accepted"
    assert {r["process"] for r in records(b.log_path)} == {0}


def test_federated_records_name_the_neighbour(tmp_path: Path) -> None:
    local_name = "neighbour.interchange.test"
    pki = make_pki(tmp_path / "pki")
    remote = start_broker(pki, tmp_path / "remote", TARGETS,
                          [SourceSpec(address="sub-1", consumers=frozenset({local_name}), scope=Scope.LOCAL)])
    local = start_broker(pki, tmp_path / "local", [], [SourceSpec(address="all", consumers=frozenset({"actor-2"}))])
    files = TlsFiles.from_pki(pki.directory, local_name)
    federation = local.call(lambda: Federation(local.node.core, lambda: client_context(files), local_name,
                                               min_backoff=0.05))
    try:
        local.call(lambda: federation.pull("s1", [RemoteEndpoint(BROKER_CN, "127.0.0.1", remote.port, "sub-1")]))
        publisher = remote.connect("actor-1")
        publisher.create_sender("in").send(denm(body=b"imported"))
        publisher.close()
        consumer = local.connect("actor-2")
        rx = consumer.create_receiver("all", credit=1)
        assert body(rx.receive(timeout=10)) == b"imported"
        rx.accept()
        consumer.close()
        [received] = wait_count(local, "received_message", 1)
        [sent] = wait_count(local, "sent_message", 1)
    finally:
        local.run(federation.close())
        local.stop()
        remote.stop()
    for r in (received, sent):
        assert r["origin"] == "federated" and r["neighbour"] == BROKER_CN and r["publisher"] == BROKER_CN
    assert received["address"] == f"federation:{BROKER_CN}" and sent["messageId"] == received["messageId"]
    [remote_received] = records(remote.log_path, "received_message")
    assert remote_received["origin"] == "local" and remote_received["neighbour"] is None
    assert remote_received["bodySha256"] == received["bodySha256"]
