"""A real node (``python -m interchange broker``, TLS 1.3) whose data directory is on a small
filesystem (a tmpfs mounted here: the test needs root and fails, not skips, without it) that is
full: it starts (repairing its store without a byte of space), serves memory-only messages,
refuses durable ones with ``amqp:resource-limit-exceeded`` and the reason, takes them again by
itself once space is freed, and after a SIGKILL gives back every durable message it accepted. Its
admin endpoint's metrics say so meanwhile (what deploy/monitoring's disk and store alerts read)."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from proton import Delivery
from proton.utils import BlockingConnection

from certs import TestPki
from interchange.app.config import AdminConfig, BrokerConfig, LogConfig, NodeConfig, TlsConfig
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.journal import MAGIC
from interchange.testing.broker_harness import (
    BROKER_CN,
    client_connection,
    complete_records,
    denm,
    start_node_process,
    terminate,
)

WAIT_S = 30.0
PUBLISHER, CONSUMER = "actor-1", "actor-2"
TARGETS = [TargetSpec(address="in-0", publishers=frozenset({PUBLISHER}), process=0)]
SOURCES = [SourceSpec(address="denm", consumers=frozenset({CONSUMER}), selector="messageType = 'DENM'")]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"this test mounts a small tmpfs and needs root for that: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(disk: Path) -> Path:
    """Fill the filesystem to the last byte with one file (its blocks are freed by deleting it)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        chunk = 1 << 20
        while chunk:
            try:
                os.write(fd, bytes(chunk))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                chunk //= 2
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0
    return filler


def _config(pki: TestPki, data_dir: Path, log: Path) -> Path:
    identity = pki.identity(BROKER_CN)
    config = NodeConfig(
        name=BROKER_CN, data_dir=data_dir,
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle, crls=list(pki.crls)),
        broker=BrokerConfig(host="127.0.0.1", port=0, processes=1, targets=TARGETS, sources=SOURCES),
        log=LogConfig(path=log, level="debug"), admin=AdminConfig(host="127.0.0.1", port=0))
    path = log.parent / "node.json"
    path.write_text(config.model_dump_json(), encoding="utf-8")
    return path


class Node:
    def __init__(self, config: Path) -> None:
        self.process, line = start_node_process(config)
        found = re.search(r"AMQPS port (\d+)", line)
        assert found is not None, line
        self.port = int(found.group(1))
        admin = re.search(r"admin port (\d+)", line)
        assert admin is not None, line
        self.admin_port = int(admin.group(1))

    def metrics(self) -> dict[str, float]:
        """The unlabelled samples and those of the data directory, by name."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=WAIT_S).read().decode()
        return {s.name + (f"{{{s.labels['level']}}}" if "level" in s.labels else ""): s.value
                for family in text_string_to_metric_families(text) for s in family.samples
                if not s.labels or set(s.labels) <= {"path", "level"}}

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            terminate(self.process, WAIT_S)


def _message(body: str, durable: bool) -> bytes:
    message = denm(body=body.encode())
    message.durable = durable
    message.ttl = 300.0
    return bytes(message.encode())


def _send(connection: BlockingConnection, sender: object, raw: bytes) -> Delivery:
    """Send one encoded message and wait for its outcome."""
    link = sender.link  # type: ignore[attr-defined]
    delivery = link.delivery(f"d{time.monotonic_ns()}")
    link.send(raw)
    link.advance()
    connection.wait(lambda: bool(delivery.remote_state), timeout=WAIT_S, msg="no disposition")
    return delivery


def _consume(pki: TestPki, port: int, quiet_s: float = 1.0) -> list[str]:
    """Everything source ``denm`` has now, accepted."""
    connection = client_connection(pki, CONSUMER, port)
    got: list[str] = []
    try:
        receiver = connection.create_receiver("denm", credit=500)
        while True:
            try:
                message = receiver.receive(timeout=quiet_s)
            except Exception:  # proton.Timeout: nothing more
                return got
            got.append(bytes(message.body).decode())
            receiver.accept()
    finally:
        connection.close()


def _events(log: Path, name: str, count: int = 1) -> list[dict]:
    """The log's ``name`` records, once there are ``count`` (the log is written by a thread)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = [r for r in complete_records(log) if r["event"] == name]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_node_on_a_full_disk_serves_refuses_durable_and_resumes(pki: TestPki, tmp_path: Path,
                                                                  small_disk: Path) -> None:
    log = tmp_path / "node.log"  # the log is elsewhere: the data directory is what fills up
    config = _config(pki, small_disk / "data", log)
    store = small_disk / "data" / "store" / "p0"
    # an earlier run: five durable messages, SIGKILLed; then a crash left a torn record and a
    # segment without its header (what a full disk did to the store before)
    node = Node(config)
    try:
        connection = client_connection(pki, PUBLISHER, node.port)
        sender = connection.create_sender("in-0")
        for i in range(5):
            assert _send(connection, sender, _message(f"early-{i}", True)).remote_state == Delivery.ACCEPTED
        connection.close()
    finally:
        node.kill()
    [segment] = sorted(store.glob("*.seg"))
    data = segment.read_bytes()
    end = len(data.rstrip(b"\0"))
    segment.write_bytes(data[:end - 5])  # early-4's record torn
    (store / "00000009.seg").write_bytes(MAGIC[:5])
    filler = _fill(small_disk)

    node = Node(config)  # starts on the full disk
    try:
        [repaired_torn, repaired_headerless] = _events(log, "store_repaired", 2)
        assert repaired_torn["details"]["repair_failed"] is None and "cut short" in repaired_torn["details"]["reason"]
        assert repaired_headerless["details"]["reason"] == "no segment header"
        assert not (store / "00000009.seg").exists()
        assert _events(log, "store_recovered")[-1]["details"]["messages"] == 4
        connection = client_connection(pki, PUBLISHER, node.port)
        sender = connection.create_sender("in-0")
        # memory-only messages flow; durable ones are refused, clearly, and not routed
        assert _send(connection, sender, _message("memory-1", False)).remote_state == Delivery.ACCEPTED
        refused = _send(connection, sender, _message("refused-1", True))
        assert refused.remote_state == Delivery.REJECTED
        condition = refused.remote.condition
        assert condition is not None and condition.name == "amqp:resource-limit-exceeded"
        assert "disk is full" in condition.description and "No space left on device" in condition.description
        [failed] = _events(log, "store_write_failed")
        assert failed["level"] == "error" and failed["details"]["disk_full"] is True
        full = node.metrics()
        assert full["interchange_durable_store_writable"] == 0 and full["interchange_durable_refused_total"] == 1
        assert full["interchange_data_dir_free_bytes"] == 0 < full["interchange_data_dir_size_bytes"]
        assert full["interchange_log_level_records_total{error}"] >= 1
        assert _consume(pki, node.port) == [f"early-{i}" for i in range(4)] + ["memory-1"]
        # space comes back: durable messages are taken again without a restart
        filler.unlink()
        deadline = time.monotonic() + WAIT_S
        while _send(connection, sender, _message("probe", True)).remote_state != Delivery.ACCEPTED:
            assert time.monotonic() < deadline, "durable messages were never taken again"
            time.sleep(0.2)
        assert _events(log, "store_writes_resumed")
        assert node.metrics()["interchange_durable_store_writable"] == 1
        for i in range(100):
            assert _send(connection, sender, _message(f"after-{i}", True)).remote_state == Delivery.ACCEPTED
        # the disk fills while the node runs: what was made ready ahead is used up, then the write
        # of a message already routed fails (rejected with the reason), and later ones are refused
        _fill(small_disk)
        big, outcomes = [], []
        while len(outcomes) < 2:
            assert len(big) < 200, "the disk never appeared full"
            delivery = _send(connection, sender, _message(f"big-{len(big)}" + "x" * 50_000, True))
            if delivery.remote_state == Delivery.ACCEPTED:
                big.append(f"big-{len(big)}")
            else:
                outcomes.append(delivery)
        for delivery in outcomes:
            assert delivery.remote_state == Delivery.REJECTED
            assert delivery.remote.condition.name == "amqp:resource-limit-exceeded"
            assert "No space left on device" in delivery.remote.condition.description
        # (the first was routed when its write failed: the store logged the fault it did not know of)
        assert [e["details"]["disk_full"] for e in _events(log, "store_write_failed", 2)] == [True, True]
        with contextlib.suppress(Exception):
            connection.close()
    finally:
        node.kill()
    node = Node(config)  # (on a full disk again)
    try:
        got = _consume(pki, node.port)
        assert got[:101] == ["probe"] + [f"after-{i}" for i in range(100)]
        assert [body[:body.index("x")] for body in got[101:]] == big and big
    finally:
        node.stop()
