"""Revocation and certificate lifetime are explicit start-up choices (IP_050, IP_051): a node without
a CRL setting or with an own certificate over the limit refuses to start; the lifetime rule."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from certs import TestPki
from certs.tls import certificate_lifetime_problem
from interchange.app.config import BrokerConfig, LogConfig, NodeConfig, TlsConfig
from interchange.app.node import start_node
from interchange.testing.broker_harness import BROKER_CN


def node_config(pki: TestPki, workdir: Path, **tls: object) -> NodeConfig:
    identity = pki.identity(BROKER_CN)
    return NodeConfig(
        name=BROKER_CN, data_dir=workdir,
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle, **tls),
        broker=BrokerConfig(host="127.0.0.1", port=0), log=LogConfig(path=workdir / "node.log"),
    )


def test_no_crls_setting_refuses_to_start(pki: TestPki, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"tls.crls is not set.*crls = \[\] to run without revocation checks"):
        asyncio.run(start_node(node_config(pki, tmp_path)))


def test_own_certificate_longer_than_the_limit_refuses_to_start(pki: TestPki, tmp_path: Path) -> None:
    lifetime = certificate_lifetime_problem(pki.identity(BROKER_CN).chain, 1)  # test certificates: > 1 day
    assert lifetime is not None
    with pytest.raises(ValueError, match="own certificate.*more than 1 .*IP_051"):
        asyncio.run(start_node(node_config(pki, tmp_path, crls=list(pki.crls), max_certificate_days=1)))


def _certificate(days: int) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "x")])
    start = datetime.now(timezone.utc)
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(start).not_valid_after(start + timedelta(days=days))
            .sign(key, hashes.SHA256()))


def test_lifetime_rule() -> None:
    assert certificate_lifetime_problem(_certificate(366), 366) is None
    assert "valid for 367 days, more than 366" in str(certificate_lifetime_problem(_certificate(367), 366))
    der = _certificate(800).public_bytes(serialization.Encoding.DER)
    assert "800 days" in str(certificate_lifetime_problem(der, 366))
