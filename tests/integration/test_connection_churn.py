"""Connections that come and go leave nothing behind: 5,000 fuzzed connections to a node process
(:mod:`interchange.testing.fuzz_clients`: TLS, SASL, open, sessions, links valid and refused,
transfers valid and mangled, sometimes a frame of random bytes, then an abort) and its resident
memory is back within 10 MB of what it was after a warm-up. The warm-up is 3,000 connections: the
node's RSS rises over its first few thousand (the allocator's and the TLS stack's pools) and levels
off by ~6,500 (docs/performance.md); after 1,500 only, a sound node still grew 8.4-9.5 MB over the
5,000, too close to the bound. Proton's connection objects were once never freed
(``pn_connection_release`` without the last reference dropped: ~1.3 KB per connection); at this
warm-up that leak shows as +6.5 MB, under the bound, so this test bounds the node's growth but
does not by itself catch a leak of that size."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interchange.testing.broker_harness import BROKER_CN, NodeProcess, complete_records, denm
from certs import TestPki
from certs.tls import TlsFiles, client_context
from interchange.app.config import BrokerConfig, LogConfig, NodeConfig, TlsConfig
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.testing.fuzz_clients import Churn, churn

WARM_UP = 3000
COUNT = 5000
GROWTH_MB = 10.0


@pytest.fixture
def node(pki: TestPki, tmp_path: Path) -> Iterator[NodeProcess]:
    identity = pki.identity(BROKER_CN)
    config = NodeConfig(
        name=BROKER_CN, data_dir=tmp_path,
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


def test_rss_back_after_5000_fuzzed_connections(node: NodeProcess, pki: TestPki) -> None:
    context = client_context(TlsFiles.from_pki(pki.directory, "actor-1", with_crls=False))
    fuzz = Churn("127.0.0.1", node.bi_port, context, BROKER_CN, bytes(denm().encode()))
    asyncio.run(churn(fuzz, WARM_UP))
    _settled(node, WARM_UP)
    start = node.rss_mb()
    started = time.monotonic()
    asyncio.run(churn(fuzz, COUNT))
    _settled(node, WARM_UP + COUNT)
    end = node.rss_mb()
    print(f"\nRSS {start:.1f} MB after {WARM_UP} connections, {end:.1f} MB after {COUNT} more "
          f"({time.monotonic() - started:.1f} s)")
    assert end - start <= GROWTH_MB, f"RSS grew {end - start:.1f} MB over {COUNT} connections"
    assert not [line for line in node.stderr if "Traceback" in line], "".join(node.stderr)[-3000:]
    # the node says which memory budget bounds its buffers (the default: 512 MiB for its one broker process)
    started = [r for r in complete_records(node.log) if r["event"] == "node_started"]
    assert [r["details"]["memory_budget_bytes"] for r in started] == [512 * 1024 * 1024]
