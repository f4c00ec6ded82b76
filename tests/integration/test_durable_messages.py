"""Durable messages in real nodes over TLS 1.3 that are SIGKILLed (the whole node, or one broker
worker) and give back every durable message they accepted, in order, within its TTL; memory-only and
expired ones do not come back, settled ones are not delivered again, and a truncated store file is
repaired, not refused (the journal's records and recovery: tests/unit/test_durable_journal.py)."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from proton import ConnectionException, Delivery, Message
from proton.utils import SendException

from certs import TestPki
from interchange.app.config import BrokerConfig, LogConfig, NodeConfig, TlsConfig
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.metrics import broker_registry
from interchange.testing.broker_harness import (
    BROKER_CN,
    BrokerUnderTest,
    client_connection,
    complete_records,
    denm,
    running_broker,
    start_node_process,
    terminate,
    wait_for_records,
)

WAIT_S = 30.0
PUBLISHER, CONSUMER = "actor-1", "actor-2"
TARGETS = [TargetSpec(address="in-0", publishers=frozenset({PUBLISHER}), process=0),
           TargetSpec(address="in-1", publishers=frozenset({PUBLISHER}), process=1)]
SOURCES = [SourceSpec(address="denm", consumers=frozenset({CONSUMER}), selector="messageType = 'DENM'")]


# ------------------------------------------------------------------------------ sans-I/O journal


# ------------------------------------------------------------------------------ real nodes
def _config(pki: TestPki, directory: Path, processes: int = 2, sources: list[SourceSpec] = SOURCES) -> NodeConfig:
    identity = pki.identity(BROKER_CN)
    return NodeConfig(
        name=BROKER_CN, data_dir=directory,
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle, crls=list(pki.crls)),
        broker=BrokerConfig(host="127.0.0.1", port=0, processes=processes, targets=TARGETS[:processes],
                            sources=sources),
        log=LogConfig(path=directory / "node.log", level="debug"))


class NodeProcess:
    """A node run as operators run it (``python -m interchange broker``), so that it can be SIGKILLed."""

    def __init__(self, config_path: Path) -> None:
        self.process, line = start_node_process(config_path)
        found = re.search(r"AMQPS port ([\d, ]+?), plain", line)
        assert found is not None, line
        self.ports = [int(p) for p in found.group(1).split(",")]

    def kill(self) -> None:
        """SIGKILL the node; its workers see their control channel close and stop (waited for: a
        restarted node must not share a store directory with a worker still going)."""
        workers = _children(self.process.pid)
        self.process.kill()
        self.process.wait()
        deadline = time.monotonic() + WAIT_S
        while any(_alive(pid) for pid in workers):
            assert time.monotonic() < deadline, "the killed node's workers did not stop"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            terminate(self.process, WAIT_S)


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _alive(pid: int) -> bool:
    """Running (a zombie left for its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _write_config(pki: TestPki, directory: Path, processes: int, sources: list[SourceSpec] = SOURCES) -> Path:
    path = directory / "node.json"
    path.write_text(_config(pki, directory, processes, sources).model_dump_json(), encoding="utf-8")
    return path


@pytest.fixture
def node_config(pki: TestPki, tmp_path: Path) -> Path:
    """A node with two broker processes."""
    return _write_config(pki, tmp_path, 2)


@pytest.fixture
def single_config(pki: TestPki, tmp_path: Path) -> Path:
    """A node with one broker process (starts faster)."""
    return _write_config(pki, tmp_path, 1)


def _message(body: str, durable: bool, ttl_s: float = 120.0, shard: str = "denm-1") -> Message:
    message = denm(body=body.encode(), publicationId=f"NO00001:{shard}")
    message.durable = durable
    message.ttl = ttl_s
    return message


def _publish(pki: TestPki, port: int, target: str, messages: list[Message]) -> None:
    """Send each message and wait for its disposition (BlockingSender raises unless accepted)."""
    connection = client_connection(pki, PUBLISHER, port)
    try:
        sender = connection.create_sender(target)
        for message in messages:
            sender.send(message)
    finally:
        connection.close()


def _consume(pki: TestPki, port: int, count: int | None, settle: bool = True, quiet_s: float = 1.5) -> list[str]:
    """Read from source ``denm`` on one broker process until ``count`` arrived (or, with None, until
    ``quiet_s`` passes without one); accept them (or leave them unsettled)."""
    connection = client_connection(pki, CONSUMER, port)
    got: list[str] = []
    try:
        receiver = connection.create_receiver("denm", credit=500)
        deadline = time.monotonic() + WAIT_S
        while (count is None or len(got) < count) and time.monotonic() < deadline:
            try:
                message = receiver.receive(timeout=quiet_s if count is None else 0.5)
            except Exception:  # proton.Timeout
                if count is None:
                    break
                continue
            got.append(bytes(message.body).decode())
            if settle:
                receiver.accept()
        return got
    finally:
        connection.close()


def _exactly(pki: TestPki, port: int, expected: list[str]) -> list[str]:
    """As many messages as ``expected`` (accepted), and whatever else arrives within 0.3 s after them."""
    return _consume(pki, port, len(expected)) + _consume(pki, port, None, quiet_s=0.3)


def _killed_with(pki: TestPki, config: Path, messages: list[Message]) -> NodeProcess:
    """A node that accepted ``messages`` on ``in-0`` and was SIGKILLed, started again."""
    node = NodeProcess(config)
    try:
        _publish(pki, node.ports[0], "in-0", messages)
    finally:
        node.kill()
    return NodeProcess(config)


def test_durable_messages_survive_sigkill_of_the_node(pki: TestPki, tmp_path: Path, node_config: Path) -> None:
    node = NodeProcess(node_config)
    try:
        assert len(node.ports) == 2
        for process, port in enumerate(node.ports):
            messages = []
            for i in range(40):
                messages.append(_message(f"p{process}-d{i}", durable=True, shard=f"s{i % 2}"))
                if i % 4 == 0:
                    messages.append(_message(f"p{process}-m{i}", durable=False))
            messages.append(_message(f"p{process}-short", durable=True, ttl_s=0.3))
            _publish(pki, port, f"in-{process}", messages)
        node.kill()
        time.sleep(0.4)  # the short-lived ones expire while the node is down
        node = NodeProcess(node_config)
        for process, port in enumerate(node.ports):
            expected = [f"p{process}-d{i}" for i in range(40)]
            got = _exactly(pki, port, expected)
            # every durable one, in order (two shards interleaved as published); memory-only and expired ones are gone
            assert got == expected, got
        recovered = [r for r in complete_records(tmp_path / "node.log") if r["event"] == "store_recovered"]
        assert recovered[-1]["details"]["messages"] == 40 and recovered[-1]["details"]["per_source"] == {"denm": 40}
        # settled messages are not delivered again, after another SIGKILL
        node.kill()
        node = NodeProcess(node_config)
        assert _consume(pki, node.ports[0], None, quiet_s=1.0) == []
    finally:
        node.stop()


def test_unsettled_messages_come_back_and_settled_ones_do_not(pki: TestPki, single_config: Path) -> None:
    node = NodeProcess(single_config)
    try:
        _publish(pki, node.ports[0], "in-0", [_message(f"d{i}", durable=True) for i in range(10)])
        assert _consume(pki, node.ports[0], 4) == ["d0", "d1", "d2", "d3"]  # accepted
        assert _consume(pki, node.ports[0], 3, settle=False) == ["d4", "d5", "d6"]  # never settled: back in front
        node.kill()
        node = NodeProcess(single_config)
        assert _exactly(pki, node.ports[0], [f"d{i}" for i in range(4, 10)]) == [f"d{i}" for i in range(4, 10)]
    finally:
        node.stop()


def test_a_truncated_store_file_is_recovered_up_to_the_last_intact_record(
        pki: TestPki, tmp_path: Path, single_config: Path) -> None:
    node = NodeProcess(single_config)
    try:
        _publish(pki, node.ports[0], "in-0", [_message(f"d{i}", durable=True) for i in range(10)])
        node.kill()
        [segment] = sorted((tmp_path / "store" / "p0").glob("*.seg"))
        data = segment.read_bytes()
        end = len(data.rstrip(b"\0"))  # the segment is preallocated with zeros after its last record
        segment.write_bytes(data[:end - 30] + bytes(len(data) - end + 30))  # a torn write of the last record
        node = NodeProcess(single_config)
        repaired_size = segment.stat().st_size
        assert _exactly(pki, node.ports[0], [f"d{i}" for i in range(9)]) == [f"d{i}" for i in range(9)]
        records = [r for r in complete_records(tmp_path / "node.log") if r["event"] == "store_repaired"]
        assert len(records) == 1 and records[0]["level"] == "warning"
        assert records[0]["details"]["file"] == str(segment) and "CRC mismatch" in records[0]["details"]["reason"]
        assert repaired_size == records[0]["details"]["kept_bytes"] < len(data)
        deadline = time.monotonic() + WAIT_S
        while segment.exists():  # every message settled: the segment is deleted (in the background)
            assert time.monotonic() < deadline, "the settled segment was never deleted"
            time.sleep(0.1)
    finally:
        node.stop()


@pytest.fixture
def two_processes(pki: TestPki, tmp_path: Path) -> Iterator[BrokerUnderTest]:
    with running_broker(pki, tmp_path, TARGETS, SOURCES, processes=2) as broker:
        yield broker


def test_durable_messages_survive_sigkill_of_a_broker_worker(two_processes: BrokerUnderTest, pki: TestPki) -> None:
    broker = two_processes
    workers = broker.node.workers
    assert workers is not None
    port = broker.node.amqps_ports[1]
    _publish(pki, port, "in-1", [_message(f"d{i}", durable=i % 3 != 0) for i in range(30)])
    old_pid = workers.pids[0]
    os.kill(old_pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_S
    while broker.call(lambda: workers.restarts) < 1:
        assert time.monotonic() < deadline, "process 1 was not restarted"
        time.sleep(0.05)
    expected = [f"d{i}" for i in range(30) if i % 3 != 0]
    assert _exactly(pki, port, expected) == expected
    wait_for_records(broker, lambda r: r["event"] == "broker_process_restarted", "no restart logged")


def _stored_count(broker: BrokerUnderTest) -> dict[str, Any]:
    return {"stored": broker.call(lambda: broker.node.core.durability.stored)}  # type: ignore[union-attr]


def test_memory_only_and_presettled_deliveries_are_not_stored(two_processes: BrokerUnderTest, pki: TestPki) -> None:
    broker = two_processes
    _publish(pki, broker.port, "in-0", [_message("m", durable=False)])
    assert _consume(pki, broker.port, 1) == ["m"]
    assert _stored_count(broker) == {"stored": 0}
    _publish(pki, broker.port, "in-0", [_message("d", durable=True)])
    assert _consume(pki, broker.port, 1) == ["d"]
    assert _stored_count(broker) == {"stored": 1}
    store = broker.node.core.durability.store  # type: ignore[union-attr]
    deadline = time.monotonic() + WAIT_S
    while broker.call(lambda: store.live) != 0:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the settled message is still live in the store"
        time.sleep(0.05)
    metrics = broker.call(lambda: generate_latest(broker_registry(broker.node.core, broker.node.server)).decode())
    assert "interchange_durable_stored_total 1.0" in metrics and "interchange_durable_live 0.0" in metrics


def test_sigterm_closes_links_with_a_condition_and_logs_what_stays_buffered(
        pki: TestPki, tmp_path: Path, node_config: Path) -> None:
    node = NodeProcess(node_config)
    try:
        for process, port in enumerate(node.ports):
            _publish(pki, port, f"in-{process}", [_message(f"p{process}-d{i}", durable=True) for i in range(6)]
                     + [_message(f"p{process}-m{i}", durable=False) for i in range(2)])
        consumer = client_connection(pki, CONSUMER, node.ports[0])
        receiver = consumer.create_receiver("denm", credit=2)
        messages = [receiver.receive(timeout=WAIT_S) for _ in range(2)]  # left unsettled
        held = [bytes(m.body).decode() for m in messages]  # (the body is a view into the live message)
        assert held == ["p0-d0", "p0-d1"]
        started = time.monotonic()
        node.process.send_signal(signal.SIGTERM)
        with pytest.raises(Exception) as detached:  # LinkDetached / ConnectionClosed, with the condition
            while True:  # the receiver keeps topping its credit up: whatever else arrives stays unsettled too
                messages.append(receiver.receive(timeout=WAIT_S))
        assert "amqp:link:detach-forced" in str(detached.value) or "amqp:connection:forced" in str(detached.value)
        assert node.process.wait(timeout=WAIT_S) == 0 and time.monotonic() - started < 15
        with contextlib.suppress(Exception):
            consumer.close()
        for log, _process in ((tmp_path / "node.log", 0), (tmp_path / "node.p1.log", 1)):
            [record] = [r for r in complete_records(log) if r["event"] == "shutdown"]
            assert record["details"]["timed_out"] is False
            # the two unsettled ones went back to the buffer before it was counted
            assert record["details"]["buffered"] == {"denm": {"durable": 6, "memory_only": 2}}, record
        node = NodeProcess(node_config)
        for process, port in enumerate(node.ports):
            assert _exactly(pki, port, [f"p{process}-d{i}" for i in range(6)]) == [f"p{process}-d{i}" for i in range(6)]
    finally:
        node.stop()


def test_a_full_buffer_drops_durable_messages_for_good(pki: TestPki, tmp_path: Path) -> None:
    """IP_032 applies to durable messages too: the oldest evicted from a full buffer are released
    from the store and do not come back after a restart."""
    small = [SourceSpec(address="denm", consumers=frozenset({CONSUMER}), selector="messageType = 'DENM'",
                        max_messages=200)]
    config = _write_config(pki, tmp_path, 1, small)
    node = _killed_with(pki, config, [_message(f"d{i}", durable=True) for i in range(260)])
    try:
        expected = [f"d{i}" for i in range(60, 260)]
        assert _exactly(pki, node.ports[0], expected) == expected
    finally:
        node.stop()


def test_a_stopping_broker_releases_new_messages_and_takes_no_connections(
        two_processes: BrokerUnderTest, pki: TestPki) -> None:
    """Graceful stop, first step: a message arriving on an open link is released (the publisher sends
    it again later: nothing is taken that a restart could lose), and the listener is closed."""
    broker = two_processes
    connection = client_connection(pki, PUBLISHER, broker.port)
    try:
        sender = connection.create_sender("in-0")
        sender.send(_message("before", durable=True))
        broker.call(broker.node.server.stop_accepting)
        with pytest.raises(SendException) as released:
            sender.send(_message("during", durable=True))
        assert released.value.state == Delivery.RELEASED
    finally:
        connection.close()
    with pytest.raises(ConnectionException):  # refused: nothing listens any more
        client_connection(pki, PUBLISHER, broker.port).close()
    assert broker.call(lambda: broker.node.core.held()) == {"denm": {"durable": 1, "memory_only": 0}}
