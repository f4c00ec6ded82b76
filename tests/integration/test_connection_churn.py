"""Connections that come and go leave nothing behind: 5,000 fuzzed connections to a node process
(:mod:`interchange.testing.fuzz_clients`: TLS, SASL, open, sessions, links valid and refused,
transfers valid and mangled, sometimes a frame of random bytes, then an abort) after a warm-up of
500, in rounds of 1,000.

What the node holds is read after each round from its admin endpoint's ``GET /debug/heap`` (a full
garbage collection, then the C heap in use, glibc's ``mallinfo2``): unlike the RSS it is not hidden
by the allocator's pools, so a leak per connection shows byte for byte. A sound node's heap grows
~50 KB over the 5,000 (~10 B per connection); proton's connection objects left unfreed
(``pn_connection_release`` without the last reference dropped) grow it 1,836 B per connection,
9.2 MB, against a bound of 100 B per connection. The bound on the RSS holds too (within 10 MB of
its value after the warm-up), but alone it would not catch that leak: with a warm-up of 3,000 and
no collections between rounds the leaky node's RSS grew 6.5 MB over 5,000."""
from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from interchange.testing.broker_harness import BROKER_CN, NodeProcess, complete_records, denm
from certs import TestPki
from certs.tls import TlsFiles, client_context
from interchange.app.config import AdminConfig, BrokerConfig, LogConfig, NodeConfig, TlsConfig
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.testing.fuzz_clients import Churn, churn

WARM_UP = 500
ROUNDS = 5
ROUND = 1000
GROWTH_MB = 10.0
HEAP_PER_CONNECTION = 100  #: bytes; the leak above was ~1,800, a sound node's ~0-5


@pytest.fixture
def node(pki: TestPki, tmp_path: Path) -> Iterator[NodeProcess]:
    identity = pki.identity(BROKER_CN)
    config = NodeConfig(
        name=BROKER_CN, data_dir=tmp_path, admin=AdminConfig(port=0, debug=True),
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle, crls=list(pki.crls)),
        # the source takes nothing: what is sent is unroutable, so no buffer grows; its consumers attach
        broker=BrokerConfig(host="127.0.0.1", port=0,
                            targets=[TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                            sources=[SourceSpec(address="all", consumers=frozenset({"actor-1"}),
                                                selector="messageType = 'NONE'")]),
        log=LogConfig(path=tmp_path / "node.log", level="info"))
    running = NodeProcess(config)
    try:
        yield running
    finally:
        running.stop()


def _disconnects(node: NodeProcess) -> int:
    assert node.log is not None
    return sum(1 for r in complete_records(node.log) if r["event"] == "disconnect")


def _settled(node: NodeProcess, count: int) -> None:
    deadline = time.monotonic() + 30
    while _disconnects(node) < count:
        assert time.monotonic() < deadline, f"{_disconnects(node)} of {count} connections closed"
        time.sleep(0.2)


def _heap(node: NodeProcess) -> int:
    """The node's C heap in use after a full garbage collection (``GET /debug/heap``)."""
    assert node.log is not None
    started = [r for r in complete_records(node.log) if r["event"] == "node_started"]
    port = started[0]["details"]["admin_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/heap", timeout=10) as answer:
        return int(json.load(answer)["heap_in_use_bytes"])


def test_nothing_left_after_5000_fuzzed_connections(node: NodeProcess, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1", with_crls=False))
    fuzz = Churn("127.0.0.1", node.bi_port, context, BROKER_CN, bytes(denm().encode()))
    asyncio.run(churn(fuzz, WARM_UP))
    _settled(node, WARM_UP)
    heaps, rss = [_heap(node)], node.rss_mb()
    started = time.monotonic()
    for done in range(1, ROUNDS + 1):
        asyncio.run(churn(fuzz, ROUND))
        _settled(node, WARM_UP + done * ROUND)
        heaps.append(_heap(node))
    end = node.rss_mb()
    count = ROUNDS * ROUND
    print(f"\nheap after each {ROUND} connections (KB): {[round(h / 1024) for h in heaps]}; RSS {rss:.1f} -> "
          f"{end:.1f} MB ({time.monotonic() - started:.1f} s)")
    per_connection = (heaps[-1] - heaps[0]) / count
    assert per_connection <= HEAP_PER_CONNECTION, \
        f"the heap grew {per_connection:.0f} B per connection ({[h - heaps[0] for h in heaps]})"
    assert end - rss <= GROWTH_MB, f"RSS grew {end - rss:.1f} MB over {count} connections"
    assert node.log is not None
    assert not [line for line in node.stderr if "Traceback" in line], "".join(node.stderr)[-3000:]
    # the node says which memory budget bounds its buffers (the default: 512 MiB for its one broker process)
    records = [r for r in complete_records(node.log) if r["event"] == "node_started"]
    assert [r["details"]["memory_budget_bytes"] for r in records] == [512 * 1024 * 1024]
