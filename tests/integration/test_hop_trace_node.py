"""Loop prevention for multi-hop federation (IP_109) in a running node: imported messages are
stamped with the hop trace; loops and messages over the hop limit are dropped, logged and counted."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from proton import Message, Timeout, symbol, uint

from certs import TestPki
from certs.tls import TlsFiles, client_context
from ii_api.peers.federation import Federation, RemoteEndpoint
from interchange.broker.addresses import Scope, SourceSpec, TargetSpec
from interchange.broker.amqp_scan import find_message_annotations
from interchange.broker.hop_trace import LIMIT_KEY, TRACE_KEY, HopGuard, HopTrace, read_trace
from interchange.broker.metrics import broker_registry
from interchange.testing.broker_harness import BROKER_CN, RawCollector, complete_records, denm, start_broker


def _message(**annotations: object) -> Message:
    message = denm(body=b"\x00\x01payload\xff")
    message.durable = True
    message.ttl = 60.0
    message.id = "m-1"
    if annotations:
        message.annotations = {symbol(k): v for k, v in annotations.items()}
    return message


def _bare(raw: bytes) -> bytes:
    """Everything after the message annotations: the bare message (and footer)."""
    return raw[find_message_annotations(raw).end:]


# ---------------------------------------------------------------- a real node importing over TLS
LOCAL = "neighbour.interchange.test"


def _wait(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_node_stamps_imports_and_drops_and_counts_loops(pki: TestPki, tmp_path: Path) -> None:
    remote = start_broker(pki, tmp_path / "remote", [TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                          [SourceSpec(address="sub-1", consumers=frozenset({LOCAL}), scope=Scope.LOCAL)])
    local = start_broker(pki, tmp_path / "local", [], [SourceSpec(address="mine", consumers=frozenset({"actor-2"}))])
    local.call(lambda: setattr(local.node.core, "hops", HopGuard(LOCAL, hop_limit=2, stamp=True)))
    files = TlsFiles.from_pki(pki.directory, LOCAL)
    federation = local.call(lambda: Federation(local.node.core, lambda: client_context(files), LOCAL,
                                               min_backoff=0.05))
    consumer = local.connect("actor-2")
    collector = RawCollector()
    receiver = consumer.create_receiver("mine", credit=10, handler=collector)
    publisher = remote.connect("actor-1")
    try:
        local.call(lambda: federation.pull("s1", [RemoteEndpoint(BROKER_CN, "127.0.0.1", remote.port, "sub-1")]))
        _wait(lambda: local.call(lambda: federation.status["s1"][0].connected))
        sender = publisher.create_sender("in")
        plain = _message()
        looped = _message(**{TRACE_KEY: [LOCAL, "x.interchange.test"]})  # came back from x: ours, seen before
        far = _message(**{TRACE_KEY: ["x.interchange.test", BROKER_CN], LIMIT_KEY: uint(1)})  # 2nd hop of 1
        for message in (plain, looped, far):
            sender.send(message)
        _wait(lambda: local.call(lambda: federation.status["s1"][0].received) == 3)
        consumer.wait(lambda: len(collector.raw) >= 1, timeout=10, msg="the imported message did not arrive")
        got = collector.raw[0]
        assert _bare(got) == _bare(plain.encode())  # IP_014/015 across the federation link
        assert read_trace(got) == HopTrace((BROKER_CN, LOCAL), 2)
        counts = local.call(lambda: dict(local.node.core.observer.hop_dropped_count))
        assert counts == {"loop": 1, "hop_limit": 1}
        _wait(lambda: len([r for r in complete_records(local.log_path) if r["event"] == "dropped_message"]) == 2)
        records = [r for r in complete_records(local.log_path) if r["event"] == "dropped_message"]
        assert sorted((r["reason"], tuple(r["trace"])) for r in records) == [
            ("hop_limit", ("x.interchange.test", BROKER_CN)), ("loop", (LOCAL, "x.interchange.test", BROKER_CN))]
        assert all(r["level"] == "warning" and r["origin"] == "federated" for r in records)
        with pytest.raises(Timeout):  # neither dropped message reaches the local actor
            consumer.wait(lambda: len(collector.raw) > 1, timeout=0.5)
        assert len(collector.raw) == 1
        registry = local.call(lambda: broker_registry(local.node.core, local.node.server))
        for reason in ("loop", "hop_limit"):
            assert local.call(lambda: registry.get_sample_value("interchange_messages_hop_dropped_total",
                                                                {"reason": reason})) == 1  # noqa: B023 (called within this turn of the loop)
    finally:
        receiver.close()
        publisher.close()
        consumer.close()
        local.run(federation.close())
        local.stop()
        remote.stop()
