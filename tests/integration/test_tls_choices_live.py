"""Revocation and certificate lifetime (IP_050, IP_051) in running nodes: an empty CRL list starts
with a warning; peer certificates valid for longer than the limit are refused on the BI and on the
node's outgoing connections."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cryptography import x509

from certs import TestPki, create_test_pki
from certs.tls import TlsFiles, client_context
from ii_api.peers.client import IIClientError
from ii_api.peers.discovery import Neighbour
from ii_api.peers.federation import Federation, RemoteEndpoint
from ii_api.wire.models import CapabilitiesMessage
from interchange.app.config import BrokerConfig, LogConfig, NodeConfig, TlsConfig
from interchange.app.node import start_node
from interchange.broker.addresses import TargetSpec
from interchange.testing.broker_harness import BROKER_CN, complete_records, start_broker, tls_exchange, wait_for_records
from interchange.testing.ii_harness import DOMAIN, A, B
from interchange.testing.ii_harness import node_config as ii_node_config
from interchange.testing.ii_harness import start, wait_for


def node_config(pki: TestPki, workdir: Path, **tls: object) -> NodeConfig:
    identity = pki.identity(BROKER_CN)
    return NodeConfig(
        name=BROKER_CN, data_dir=workdir,
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle, **tls),
        broker=BrokerConfig(host="127.0.0.1", port=0), log=LogConfig(path=workdir / "node.log"),
    )


def test_empty_crls_starts_with_a_warning(pki: TestPki, tmp_path: Path) -> None:
    async def run() -> None:
        node = await start_node(node_config(pki, tmp_path, crls=[]))
        await node.close()

    asyncio.run(run())
    records = complete_records(tmp_path / "node.log")
    assert [r["level"] for r in records if r["event"] == "tls_revocation_unchecked"] == ["warning"]


async def test_long_lived_neighbour_certificates_refused_on_outgoing_connections(tmp_path: Path) -> None:
    """IP_051 on the node's own outgoing connections: with ``tls.max_certificate_days`` a neighbour
    whose server certificate is valid for longer is refused by the II client (its answer is not
    read) and by a federation link (before any link is attached; retried with back-off)."""
    pki = create_test_pki(tmp_path / "pki", [A, B], [])
    pki.pki.issue_server(A, days=30)  # A's own certificate: 30 days; B's: 365
    node_b = await start(ii_node_config(pki, B, tmp_path / "b"))
    config = ii_node_config(pki, A, tmp_path / "a")
    assert config.tls is not None
    node_a = await start(config.model_copy(update={"tls": config.tls.model_copy(update={"max_certificate_days": 100})}))
    federation = None
    try:
        assert node_a.ii is not None and node_a.tls is not None and node_b.ii_port and node_b.amqps_port
        with pytest.raises(IIClientError, match="neighbour certificate refused: certificate valid for 365 days"):
            await node_a.ii.client.post_capabilities(Neighbour(B, "127.0.0.1", node_b.ii_port, DOMAIN),
                                                     CapabilitiesMessage(version="1.0", name=A, capabilities=[]))
        federation = Federation(node_a.core, node_a.tls.client.current, A, min_backoff=0.05, max_certificate_days=100)
        federation.pull("k", [RemoteEndpoint(B, "127.0.0.1", node_b.amqps_port, "any-source")])
        [link] = federation.status["k"]
        await wait_for(lambda: "IP_051" in (link.last_error or ""), "the federation link refused")
        assert link.connects == 0 and not link.connected
        assert not [c for c in node_b.server.connections  # nothing attached at B
                    if c.identity == A and c.engine is not None and c.engine.links.attached]
    finally:
        if federation is not None:
            await federation.close()
        await node_a.close()
        await node_b.close()


def test_peer_certificate_longer_than_the_limit_refused_on_the_bi(pki: TestPki, tmp_path: Path) -> None:
    peer_days = (x509.load_pem_x509_certificate(pki.identity("actor-1").chain.read_bytes()).not_valid_after_utc
                 - x509.load_pem_x509_certificate(pki.identity("actor-1").chain.read_bytes()).not_valid_before_utc).days
    broker = start_broker(pki, tmp_path, [TargetSpec(address="in", publishers=frozenset({"actor-1"}))])
    try:
        broker.node.server.max_peer_certificate_days = peer_days - 1  # as tls.max_certificate_days sets it
        context = client_context(TlsFiles.from_pki(pki.directory, "actor-1"))
        data, closed = tls_exchange(broker.port, context, b"AMQP\x03\x01\x00\x00")
        assert closed
        assert b"AMQP" not in data  # closed before SASL: no identity
        wait_for_records(broker, lambda r: r["event"] == "tls_refused" and "IP_051" in r["details"].get("reason", ""),
                         "lifetime refusal not logged")
    finally:
        broker.stop()
