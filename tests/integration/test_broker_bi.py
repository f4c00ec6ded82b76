"""The Basic Interface broker over real TLS 1.3 sockets with proton clients (IP_008/014/015/016/024/032/033/066)."""
from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import (
    Delivery,
    Message,
    Terminus,
    Timeout,
    byte,
    char,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)
from proton.utils import BlockingConnection, LinkDetached, SendException

from certs import TestPki
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.testing.broker_harness import (
    BrokerUnderTest,
    RawCollector,
    complete_records,
    denm,
    ivim,
    running_broker,
    selector_option,
    send_raw,
    start_broker,
    wait_for_records,
)

TARGETS = [
    TargetSpec(address="in", publishers=frozenset({"actor-1"})),
    TargetSpec(address="in-ivim-only", publishers=frozenset({"actor-1"}), selector="messageType = 'IVIM'"),
]
SOURCES = [
    SourceSpec(address="all", consumers=frozenset({"actor-2", "actor-3"})),
    SourceSpec(address="denm-only", consumers=frozenset({"actor-2"}), selector="messageType = 'DENM'"),
    SourceSpec(address="small", consumers=frozenset({"actor-2"}), max_messages=200),
]


@pytest.fixture
def broker(pki: TestPki, tmp_path: Path) -> Iterator[BrokerUnderTest]:
    with running_broker(pki, tmp_path, TARGETS, SOURCES) as b:
        yield b


def receive(conn: BlockingConnection, address: str, count: int, selector: str | None = None,
            timeout: float = 5.0) -> list[bytes]:
    """Receive ``count`` messages and return their bodies."""
    options = selector_option(selector) if selector else None
    receiver = conn.create_receiver(address, credit=100, options=options)
    got = []
    for _ in range(count):
        got.append(body(receiver.receive(timeout=timeout)))
        receiver.accept()
    receiver.close()
    return got


def body(message: Message) -> bytes:
    """The body as bytes (proton hands out a memoryview into a buffer it reuses)."""
    return bytes(message.body)


def test_filtered_denm_arrives_and_other_does_not(broker: BrokerUnderTest) -> None:
    consumer = broker.connect("actor-2")
    receiver = consumer.create_receiver("all", credit=10, options=selector_option(
        "messageType = 'DENM' AND quadTree LIKE '%,1202021%'"))
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    sender.send(ivim())
    sender.send(denm(quad_tree=",031332213323322232,"))  # DENM elsewhere
    sender.send(denm(body=b"wanted"))
    message = receiver.receive(timeout=5)
    receiver.accept()
    assert body(message) == b"wanted" and message.properties["messageType"] == "DENM"
    with pytest.raises(Timeout):
        receiver.receive(timeout=0.5)
    publisher.close()
    consumer.close()


def test_node_selector_and_link_selector_both_apply(broker: BrokerUnderTest) -> None:
    consumer = broker.connect("actor-2")
    receiver = consumer.create_receiver("denm-only", credit=10, options=selector_option("causeCode = 2"))
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    sender.send(denm(causeCode=1, body=b"c1"))
    sender.send(ivim(causeCode=2))
    sender.send(denm(causeCode=2, body=b"c2"))
    assert body(receiver.receive(timeout=5)) == b"c2"
    receiver.accept()
    publisher.close()
    consumer.close()


def _every_type_message(body: bytes) -> Message:
    props = denm().properties
    props.update({
        "custom-test-ubyte": ubyte(7), "custom-test-ushort": ushort(65535), "custom-test-uint": uint(4294967295),
        "custom-test-ulong": ulong(2**64 - 1), "custom-test-byte": byte(-128), "custom-test-short": short(-32768),
        "custom-test-int": int32(-2**31), "custom-test-long": -2**63, "custom-test-float": float32(1.5),
        "custom-test-double": 2.25, "custom-test-bool": True, "custom-test-null": None,
        "custom-test-char": char("é"), "custom-test-timestamp": timestamp(1_700_000_000_000),
        "custom-test-uuid": uuid.UUID(int=42), "custom-test-binary": b"\x00\xff",
        "custom-test-symbol": symbol("sym"), "custom-test-string": "ünïcødé",
    })
    return Message(body=body, properties=props, inferred=True, ttl=60, durable=True, subject="s",
                   annotations={symbol("x-opt-test"): "annotation"})


def test_departure_logged_with_consumer_identity(broker: BrokerUnderTest) -> None:
    consumer = broker.connect("actor-2")
    receiver = consumer.create_receiver("denm-only", credit=5)
    publisher = broker.connect("actor-1")
    publisher.create_sender("in").send(denm(body=b"logged"))
    receiver.receive(timeout=5)
    receiver.accept()
    publisher.close()
    consumer.close()
    sent = wait_for_records(broker, lambda r: r["event"] == "sent_message" and r["address"] == "denm-only",
                            "departure not logged")
    assert sent[0]["identity"] == "actor-2" and sent[0]["publisher"] == "actor-1"
    assert sent[0]["departureTime"] >= sent[0]["arrivalTime"]
    assert sent[0]["applicationProperties"]["messageType"] == "DENM"


def test_forwarding_is_byte_exact(broker: BrokerUnderTest) -> None:
    bodies = [bytes(range(256)) * 4, b"", b"\x00" * 5000, bytes(reversed(range(256)))]
    payloads = [_every_type_message(body).encode() for body in bodies]
    consumer = broker.connect("actor-3")
    collector = RawCollector()
    receiver = consumer.create_receiver("all", credit=10, handler=collector)  # keep a reference: its __del__ detaches
    publisher = broker.connect("actor-1")
    deliveries = send_raw(publisher, "in", payloads)
    assert all(d.remote_state == Delivery.ACCEPTED for d in deliveries)
    consumer.wait(lambda: len(collector.raw) == len(payloads), timeout=10, msg="not all messages arrived")
    assert collector.raw == payloads
    receiver.close()
    publisher.close()
    consumer.close()


@pytest.mark.parametrize("selector, reason", [
    ("messageType = ", "position"),
    ("quadTree LIKE 5", "position"),
    ("(a = 1", "position"),
])
def test_invalid_selector_refused_with_invalid_field(broker: BrokerUnderTest, selector: str, reason: str) -> None:
    consumer = broker.connect("actor-2")
    with pytest.raises(LinkDetached) as excinfo:
        consumer.create_receiver("all", credit=1, options=selector_option(selector))
    condition = excinfo.value.link.remote_condition
    assert condition.name == "amqp:invalid-field"
    assert reason in condition.description
    assert excinfo.value.link.remote_source.type == Terminus.UNSPECIFIED  # null source: refused (2.6.3)
    consumer.close()


@pytest.mark.parametrize("cn, address, role, condition", [
    ("actor-2", "in", "publisher", "amqp:unauthorized-access"),
    ("actor-1", "all", "consumer", "amqp:unauthorized-access"),
    ("actor-4", "denm-only", "consumer", "amqp:unauthorized-access"),
    ("actor-1", "nowhere", "publisher", "amqp:not-found"),
    ("actor-2", "nowhere", "consumer", "amqp:not-found"),
])
def test_authorization_refusals(broker: BrokerUnderTest, cn: str, address: str, role: str, condition: str) -> None:
    conn = broker.connect(cn)
    with pytest.raises(LinkDetached) as excinfo:
        if role == "publisher":
            conn.create_sender(address)
        else:
            conn.create_receiver(address, credit=1)
    link = excinfo.value.link
    assert link.remote_condition.name == condition
    # AMQP 1.0 2.6.3: the refusing attach carries a null terminus (the broker's source or target)
    refused_terminus = link.remote_target if role == "publisher" else link.remote_source
    assert refused_terminus.type == Terminus.UNSPECIFIED
    conn.close()


@pytest.mark.parametrize("mutate, expected", [
    (lambda p: p.pop("publisherId"), "publisherId"),
    (lambda p: p.update(messageType="FOO"), "messageType"),
    (lambda p: p.update(quadTree="120202130121133020"), "quadTree"),
    (lambda p: p.update(quadTree=",1202021,"), "quadTree"),
    (lambda p: p.update(causeCode="one"), "causeCode"),
    (lambda p: p.update(myProperty=1), "myProperty"),
])
def test_malformed_messages_rejected_and_others_go_on(broker: BrokerUnderTest, mutate, expected: str) -> None:
    consumer = broker.connect("actor-2")
    receiver = consumer.create_receiver("all", credit=10)
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    bad = denm()
    mutate(bad.properties)
    with pytest.raises(SendException) as excinfo:
        sender.send(bad)
    assert excinfo.value.state == Delivery.REJECTED
    sender.send(denm(body=b"good"))
    assert body(receiver.receive(timeout=5)) == b"good"
    receiver.accept()
    publisher.close()
    consumer.close()
    # IP_016: the drop is logged, with the reason.
    rejected = wait_for_records(broker, lambda r: r["event"] == "rejected_message", "rejection was not logged")
    assert expected in rejected[-1]["details"]["reason"]


def test_undecodable_bytes_rejected(broker: BrokerUnderTest) -> None:
    publisher = broker.connect("actor-1")
    deliveries = send_raw(publisher, "in", [b"\x00\x53\x77\xa1\xff", denm().encode()])
    assert deliveries[0].remote_state == Delivery.REJECTED
    assert deliveries[1].remote_state == Delivery.ACCEPTED
    publisher.close()


def test_target_capability_selector_enforced(broker: BrokerUnderTest) -> None:
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in-ivim-only")
    sender.send(ivim())
    with pytest.raises(SendException) as excinfo:
        sender.send(denm())
    assert excinfo.value.state == Delivery.REJECTED
    publisher.close()


def test_expired_message_never_delivered(broker: BrokerUnderTest) -> None:
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    sender.send(_with_ttl(denm(body=b"short-lived"), 0.2))
    sender.send(_with_ttl(denm(body=b"long-lived"), 60))
    time.sleep(0.5)
    consumer = broker.connect("actor-2")
    assert receive(consumer, "all", 1) == [b"long-lived"]
    publisher.close()
    consumer.close()


def _with_ttl(message: Message, seconds: float) -> Message:
    message.ttl = seconds
    return message


def test_absolute_expiry_time_honoured(broker: BrokerUnderTest) -> None:
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    past = denm(body=b"past")
    past.expiry_time = time.time() - 1
    sender.send(past)
    sender.send(denm(body=b"now"))
    consumer = broker.connect("actor-2")
    assert (receive(consumer, "all", 1)) == [b"now"]
    publisher.close()
    consumer.close()


def test_buffer_overflow_drops_oldest_and_counts(broker: BrokerUnderTest) -> None:
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    for i in range(250):
        sender.send(denm(body=f"m{i}".encode()))
    source = broker.call(lambda: broker.node.core.sources["small"])
    assert broker.call(lambda: (source.depth, source.dropped)) == (200, 50)
    consumer = broker.connect("actor-2")
    assert receive(consumer, "small", 200) == [f"m{i}".encode() for i in range(50, 250)]
    publisher.close()
    consumer.close()


def test_shard_order_kept_with_two_consumers(broker: BrokerUnderTest) -> None:
    consumer_a = broker.connect("actor-2")
    consumer_b = broker.connect("actor-3")
    rx_a = consumer_a.create_receiver("all", credit=1000)
    rx_b = consumer_b.create_receiver("all", credit=1000)
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    sent = []
    for i in range(60):
        shard = 1 + i % 3
        sender.send(denm(body=f"{shard}:{i}".encode(), shardId=shard, shardCount=3))
        sent.append((shard, i))
    received: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
    for name, rx in (("a", rx_a), ("b", rx_b)):
        while True:
            try:
                message = rx.receive(timeout=1)
            except Exception:
                break
            rx.accept()
            shard, i = body(message).decode().split(":")
            received[name].append((int(shard), int(i)))
    assert sorted(received["a"] + received["b"]) == sorted(sent)
    for name in ("a", "b"):
        shards = {s for s, _ in received[name]}
        for shard in shards:
            seq = [i for s, i in received[name] if s == shard]
            assert seq == sorted(seq)
    # each shard went to exactly one consumer (shard affinity)
    assert not ({s for s, _ in received["a"]} & {s for s, _ in received["b"]})
    publisher.close()
    consumer_a.close()
    consumer_b.close()


def test_slow_consumer_does_not_block_others(broker: BrokerUnderTest) -> None:
    slow = broker.connect("actor-3")
    slow_rx = slow.create_receiver("all", credit=1)  # takes one message, never more
    fast = broker.connect("actor-2")
    fast_rx = fast.create_receiver("denm-only", credit=500)
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    for i in range(300):
        sender.send(denm(body=f"{i}".encode()))
    got = [body(fast_rx.receive(timeout=5)) for _ in range(300)]
    fast_rx.accept()
    assert got == [f"{i}".encode() for i in range(300)]
    assert broker.call(lambda: broker.node.core.sources["all"].depth) == 299  # buffered for the slow one
    slow_rx.close()
    publisher.close()
    fast.close()
    slow.close()


def test_unsettled_message_requeued_when_consumer_leaves(broker: BrokerUnderTest) -> None:
    publisher = broker.connect("actor-1")
    publisher.create_sender("in").send(denm(body=b"once"))
    first = broker.connect("actor-2")
    rx = first.create_receiver("all", credit=1)
    assert body(rx.receive(timeout=5)) == b"once"  # received but never accepted
    first.close()
    second = broker.connect("actor-2")
    assert (receive(second, "all", 1)) == [b"once"]
    publisher.close()
    second.close()


def test_metrics_and_log_switching(pki: TestPki, tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    b = start_broker(pki, tmp_path, TARGETS, SOURCES)
    try:
        from interchange.app.admin import start_admin

        runner, port = b.run(start_admin("127.0.0.1", 0, b.node.core, b.node.server, b.node.log))
        publisher = b.connect("actor-1")
        sender = publisher.create_sender("in")
        sender.send(denm())
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "interchange_messages_received_total 1.0" in text
        assert 'interchange_source_depth{source="all"} 1.0' in text
        assert "interchange_connections 1.0" in text
        steps = re.search(r"^interchange_handshake_steps_total (\S+)$", text, re.M)
        assert steps is not None and float(steps[1]) >= 2  # the ClientHello, then the client's certificate flight
        assert "interchange_handshakes_waiting 0.0" in text and "interchange_handshakes_waiting_max 1.0" in text
        assert "process_cpu_seconds_total" in text
        request = urllib.request.Request(f"http://127.0.0.1:{port}/log", method="PUT",
                                         data=json.dumps({"properties": False, "payload": False}).encode())
        settings = json.loads(urllib.request.urlopen(request, timeout=5).read())
        assert settings == {"level": "debug", "properties": False, "payload": False, "raw": False}
        bad = urllib.request.Request(f"http://127.0.0.1:{port}/log", method="PUT", data=b'{"level": "loud"}')
        with pytest.raises(urllib.error.HTTPError) as excinfo:
            urllib.request.urlopen(bad, timeout=5)
        assert excinfo.value.code == 400 and "level" in json.loads(excinfo.value.read())["error"]
        with pytest.raises(urllib.error.HTTPError) as excinfo:  # a full gc on the loop: only with [admin] debug
            urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/heap", timeout=5)
        assert excinfo.value.code == 404 and "debug = true" in json.loads(excinfo.value.read())["error"]
        consumer = b.connect("actor-2")
        rx = consumer.create_receiver("denm-only", credit=5)
        sender.send(denm(body=b"unlogged"))
        assert [body(rx.receive(timeout=5)) for _ in range(2)] == [b"\x01\x02denm", b"unlogged"]
        rx.accept()
        consumer.close()
        publisher.close()
        b.run(runner.cleanup())
    finally:
        b.stop()
    records = complete_records(b.log_path)
    received = [r for r in records if r["event"] == "received_message"]
    assert len(received) == 1  # the second message came after properties/payload logging was switched off
    assert received[0]["applicationProperties"]["messageType"] == "DENM"
    assert received[0]["bodyContentHex"] == b"\x01\x02denm".hex()
    assert received[0]["arrivalTime"].endswith("Z")
    sent = [r for r in records if r["event"] == "sent_message"]
    assert sent == []  # the only consumer read after message logging was switched off
    assert any(r["event"] == "connect" for r in records)
    assert any(r["event"] == "link_attach" and r["details"].get("address") == "in" for r in records)


def test_oversized_message_closes_the_link_with_a_clear_error(pki: TestPki, tmp_path: Path) -> None:
    from interchange.app.config import LimitsConfig

    b = start_broker(pki, tmp_path, TARGETS, SOURCES, limits=LimitsConfig(max_message_size=64 * 1024))
    try:
        publisher = b.connect("actor-1")
        sender = publisher.create_sender("in")
        sender.send(denm(body=bytes(32 * 1024)))  # within the limit
        with pytest.raises((LinkDetached, SendException)) as excinfo:
            sender.send(denm(body=bytes(200 * 1024)))
        condition = sender.link.remote_condition
        assert condition is not None and condition.name == "amqp:link:message-size-exceeded", excinfo.value
        publisher.close()
    finally:
        b.stop()


def test_message_size_limit_is_exact(pki: TestPki, tmp_path: Path) -> None:
    """The limit holds to the byte, also when only the last transfer frame crosses it (found with rhea)."""
    from interchange.app.config import LimitsConfig

    limit = 64 * 1024
    b = start_broker(pki, tmp_path, TARGETS, SOURCES, limits=LimitsConfig(max_message_size=limit))
    try:
        overhead = len(denm(body=b"").encode())

        def sized(size: int) -> bytes:
            for pad in range(size - overhead, size - overhead - 8, -1):  # the body's length prefix varies
                raw = denm(body=bytes(pad)).encode()
                if len(raw) == size:
                    return raw
            raise AssertionError(size)

        publisher = b.connect("actor-1")
        link = publisher.create_sender("in").link
        at_limit = link.delivery(b"at")
        link.send(sized(limit))
        link.advance()
        publisher.wait(lambda: bool(at_limit.remote_state), timeout=10, msg="no disposition")
        assert at_limit.remote_state == Delivery.ACCEPTED
        delivery = link.delivery(b"over")
        link.send(sized(limit + 1))  # two frames; only the second crosses the limit
        link.advance()
        with pytest.raises(LinkDetached):
            publisher.wait(lambda: False, timeout=10, msg="link not closed")
        assert link.remote_condition.name == "amqp:link:message-size-exceeded"
        assert delivery.remote_state != Delivery.ACCEPTED
        publisher.close()
    finally:
        b.stop()


def test_consumer_that_stops_reading_its_socket_is_back_pressured(broker: BrokerUnderTest) -> None:
    """A consumer with plenty of credit that stops reading: the broker stops writing to it (its
    connection is paused), buffers in the source instead of in socket buffers, and everyone else
    goes on."""
    stuck = broker.connect("actor-3")
    stuck_rx = stuck.create_receiver("all", credit=100_000)  # never received from below
    fast = broker.connect("actor-2")
    fast_rx = fast.create_receiver("denm-only", credit=1000)
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    for i in range(150):
        sender.send(denm(body=bytes([i % 256]) * 100_000))
    got = [body(fast_rx.receive(timeout=10))[0] for _ in range(150)]
    fast_rx.accept()
    assert got == [i % 256 for i in range(150)]

    def stuck_state() -> tuple[bool, int]:
        engines = [c.engine for c in broker.node.server.connections if c.identity == "actor-3"]
        return engines[0].paused, broker.node.core.sources["all"].depth

    paused, depth = broker.call(stuck_state)
    assert paused and depth > 0
    stuck_rx.close()
    stuck.close()
    publisher.close()
    fast.close()


def test_released_message_is_redelivered(broker: BrokerUnderTest) -> None:
    publisher = broker.connect("actor-1")
    publisher.create_sender("in").send(denm(body=b"again"))
    first = broker.connect("actor-2")
    rx = first.create_receiver("all", credit=1)  # proton's fetcher keeps one credit topped up
    assert body(rx.receive(timeout=5)) == b"again"
    rx.release()  # "not processed": the broker offers it again on the same, still attached link
    assert body(rx.receive(timeout=5)) == b"again"
    rx.accept()
    assert broker.call(lambda: broker.node.core.sources["all"].depth) == 0
    publisher.close()
    first.close()


def test_presettled_consumer_link_gets_settled_deliveries(broker: BrokerUnderTest) -> None:
    from proton.reactor import AtMostOnce

    consumer = broker.connect("actor-2")
    receiver = consumer.create_receiver("denm-only", credit=50, options=AtMostOnce())
    publisher = broker.connect("actor-1")
    sender = publisher.create_sender("in")
    for i in range(20):
        sender.send(denm(body=f"p{i}".encode()))
    assert [body(receiver.receive(timeout=5)) for _ in range(20)] == [f"p{i}".encode() for i in range(20)]
    links = broker.call(lambda: [(link.presettled, len(link.unsettled)) for link in broker.node.core.sources["denm-only"].links])
    assert links == [(True, 0)]
    publisher.close()
    consumer.close()
