"""The profile's floors hold under every setting.

IP_032: no byte limit may hold fewer than 200 messages of the largest accepted size (a configuration
that would is refused at start, with the reason), and a source at that limit really keeps 200 such
messages. IP_016/IP_138: the audit records (rejections, drops, expiries, unroutable messages) are
written at every log level; every other record only at its level and above.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from interchange.testing.broker_harness import BrokerUnderTest, complete_records, denm, running_broker
from certs import TestPki
from interchange.app.config import BrokerConfig, LimitsConfig, MemoryConfig, load_config
from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import Admission
from interchange.broker.engine import Rejected
from interchange.broker.message_log import JsonLog
from interchange.broker.memory import IP_032_FLOOR, message_cost
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.ttl_policy import TtlPolicy
from interchange.ground import logformat
from interchange.ground.errors import CliError
from interchange.ground.logfile import LogSettings

KIB = 1024
MIB = 1024 * KIB


# ------------------------------------------------------------------ IP_032: the floor of 200 messages
def test_default_limits_hold_200_messages_of_the_largest_size() -> None:
    config = BrokerConfig()
    limits = config.buffer_limits()
    assert limits.problems([]) == []
    assert limits.source_max_bytes >= IP_032_FLOOR * message_cost(config.limits.max_message_size)


@pytest.mark.parametrize("broker, reason", [
    ({"sources": [{"address": "big", "max_bytes": 64 * MIB}]},
     "source 'big': max_bytes 67108864 is too small: 200 messages of max_message_size 1048576 bytes need"),
    ({"limits": {"max_message_size": 4 * MIB}},
     "the default max_bytes of sources ([broker.memory] source_max_bytes) 268435456 is too small: 200 messages "
     "of max_message_size 4194304 bytes need"),
    ({"memory": {"source_max_bytes": 100 * MIB}},
     "the default max_bytes of sources ([broker.memory] source_max_bytes) 104857600 is too small"),
    ({"memory": {"node_max_bytes": 150 * MIB}},
     "the node's budget ([broker.memory] node_max_bytes, per broker process) 157286400 is too small"),
    ({"processes": 4, "memory": {"node_max_bytes": 512 * MIB}},
     "the node's budget ([broker.memory] node_max_bytes, per broker process) 134217728 is too small"),
], ids=["source-max-bytes", "max-message-size", "default-source-bytes", "node-budget", "node-budget-shared"])
def test_limits_below_the_floor_refused_at_start(tmp_path: Path, broker: dict, reason: str) -> None:
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"name": "n", "broker": broker}))
    with pytest.raises(CliError) as excinfo:
        load_config(path)
    assert reason in str(excinfo.value) and "(IP_032)" in str(excinfo.value)


def test_raised_limits_with_raised_message_size_accepted() -> None:
    config = BrokerConfig(limits=LimitsConfig(max_message_size=4 * MIB), memory=MemoryConfig(source_max_bytes=900 * MIB))
    assert config.buffer_limits().problems(config.sources) == []


MAX_SIZE = 256 * KIB  #: the broker's largest accepted message in the filling test
FLOOR = IP_032_FLOOR * message_cost(MAX_SIZE)


def largest(i: int) -> bytes:
    """A valid DENM of exactly MAX_SIZE encoded bytes."""
    publication = f"NO00001:big-{i:03d}"
    base = len(denm(body=b"x" * 1000, publicationId=publication).encode()) - 1000
    raw = bytes(denm(body=bytes([i % 256]) * (MAX_SIZE - base), publicationId=publication).encode())
    assert len(raw) == MAX_SIZE
    return raw


@pytest.fixture
def floor_broker(pki: TestPki, tmp_path: Path) -> Iterator[BrokerUnderTest]:
    targets = [TargetSpec(address="in", publishers=frozenset({"actor-1"}))]
    sources = [SourceSpec(address="held", consumers=frozenset({"actor-2"}), max_messages=IP_032_FLOOR,
                          max_bytes=FLOOR)]
    with running_broker(pki, tmp_path, targets, sources, limits=LimitsConfig(max_message_size=MAX_SIZE),
                        log_options={"properties": False, "payload": False}) as b:
        yield b


def test_source_at_the_floor_keeps_200_messages_of_the_largest_size(floor_broker: BrokerUnderTest) -> None:
    publisher = floor_broker.connect("actor-1")
    sender = publisher.create_sender("in")
    for i in range(IP_032_FLOOR + 1):  # nobody consumes: one more than the floor
        delivery = sender.link.delivery(f"m{i}")
        sender.link.send(largest(i))
        sender.link.advance()
        publisher.wait(lambda delivery=delivery: bool(delivery.remote_state), timeout=10, msg="no disposition")
        assert delivery.remote_state == delivery.ACCEPTED
    publisher.close()
    consumer = floor_broker.connect("actor-2")
    receiver = consumer.create_receiver("held", credit=50)
    got = []
    while len(got) < IP_032_FLOOR:
        message = receiver.receive(timeout=10)
        receiver.accept()
        got.append(message.properties["publicationId"])
    consumer.close()
    assert got == [f"NO00001:big-{i:03d}" for i in range(1, IP_032_FLOOR + 1)]  # the oldest went, 200 stayed
    drops = [r for r in complete_records(floor_broker.log_path) if r["event"] == "dropped_message"]
    assert [(r["publicationId"], r["reason"]) for r in drops] == [("NO00001:big-000", "buffer_full")]


# ------------------------------------------------------------------ IP_016/IP_138: the audit trail at every level
AUDIT = {"rejected_message", "dropped_message", "expired_message", "unroutable_message"}
PROBES = {("debug", "probe_debug"), ("info", "probe_info"), ("warning", "probe_warning"), ("error", "probe_error")}
#: every other record of the scenario, with its level: the probes, and the core's own
OTHERS = PROBES | {("info", "link_attach"), ("info", "received_message")}


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
@pytest.mark.parametrize("messages_on", [False, True], ids=["messages-off", "messages-on"])
def test_audit_records_at_every_level(tmp_path: Path, level: str, messages_on: bool) -> None:
    now = [1_000_000]
    log = JsonLog("n", path=tmp_path / "n.log", settings=LogSettings(level=level, properties=messages_on))
    addresses = AddressBook()
    addresses.load([TargetSpec(address="in", publishers=frozenset({"a"}))],
                   [SourceSpec(address="denm", selector="messageType = 'DENM'", max_messages=IP_032_FLOOR)])
    core = BrokerCore(addresses, Admission(TtlPolicy(), accelerated=False), BrokerObserver(log),
                      clock_ms=lambda: now[0])
    publisher = core.attach_publisher("a", "in")
    with pytest.raises(Rejected):
        core.publish(publisher, bytes(denm(causeCode="not a number").encode()))  # rejected (IP_016)
    for i in range(IP_032_FLOOR + 1):
        core.publish(publisher, bytes(denm(body=b"%d" % i).encode()))  # the first is dropped (IP_032)
    ivim = denm(messageType="IVIM", protocolVersion="IVIM:1.2.1")
    for key in ("causeCode", "subCauseCode"):
        del ivim.properties[key]
    core.publish(publisher, bytes(ivim.encode()))  # unroutable: no source takes IVIM
    now[0] += 24 * 3600 * 1000
    core.expire()  # the 200 buffered expire (IP_033)
    for record_level, event in PROBES:
        log.event(record_level, event, {})
    log.close()
    written = [(r["level"], r["event"]) for r in complete_records(tmp_path / "n.log")]
    events = {event for _, event in written}
    assert AUDIT <= events, f"level {level}: audit records missing: {AUDIT - events}"
    expected = {event for record_level, event in OTHERS if logformat.LEVELS[record_level] >= logformat.LEVELS[level]
                and (event != "received_message" or messages_on)}
    assert events - AUDIT == expected
    assert sum(1 for _, event in written if event == "expired_message") == IP_032_FLOOR
