"""What the broker and II harnesses share: the test PKI, proton clients over TLS 1.3 with SASL
EXTERNAL, and the DENM message builder.

The PKI of the broker and II tests (the ``pki`` fixture of ``conftest.py``, made once per run)
holds every identity either harness uses; tests must not change it (a test that revokes makes
its own with :func:`make_pki`).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from proton import Message, SSLDomain
from proton.utils import BlockingConnection

from certs import TestPki, create_test_pki
from certs.tls import TlsFiles, proton_ssl_domain

BROKER_CN = "broker.interchange.test"  #: the broker harness's node
NEIGHBOUR_CN = "neighbour.interchange.test"
A, B, C = "a.interchange.test", "b.interchange.test", "c.interchange.test"  #: the II harness's nodes
D = "d.interchange.test"  #: the fourth node of the multi-hop line (interchange/testing/multihop_harness.py)
PKI_INTERCHANGES = (BROKER_CN, NEIGHBOUR_CN, A, B, C, D)
PKI_ACTORS = ("actor-1", "actor-2", "actor-3", "actor-4", "actor-a", "actor-b", "actor-c", "actor-d", "actor-x",
              "tlex-bridge")  # the traffic-light bridge's own identity (tests/integration/test_tlex_bridge.py)
EXPIRED_ACTOR = "actor-expired"  #: a client certificate that expired yesterday
REVOKED_ACTOR = "actor-revoked"  #: a client certificate on the intermediate's CRL


def make_pki(directory: Path) -> TestPki:
    """The test PKI: every interchange and actor above, one expired and one revoked actor."""
    made = create_test_pki(directory, list(PKI_INTERCHANGES), list(PKI_ACTORS))
    now = datetime.now(timezone.utc)
    made.pki.issue_client(EXPIRED_ACTOR, not_before=now - timedelta(days=30), not_after=now - timedelta(days=1))
    made.pki.revoke(made.pki.issue_client(REVOKED_ACTOR).serial)
    return made


def amqp_client(pki: TestPki, cn: str, port: int, server_name: str, timeout: float,
                **options: Any) -> BlockingConnection:
    """A proton BlockingConnection to 127.0.0.1:``port`` authenticated as ``cn`` (SASL EXTERNAL over
    TLS 1.3), checking the server's name ``server_name``."""
    files = TlsFiles.from_pki(pki.directory, cn, with_crls=False)
    settings: dict[str, Any] = {"virtual_host": server_name, "allowed_mechs": "EXTERNAL", "timeout": timeout}
    settings.update(options)
    return BlockingConnection(f"amqps://127.0.0.1:{port}",
                              ssl_domain=proton_ssl_domain(files, SSLDomain.MODE_CLIENT), **settings)


def denm(quad_tree: str = ",120202130121133020,", body: bytes = b"\x01\x02denm", **extra: Any) -> Message:
    """A valid DENM message (tables 1 and 2); ``extra`` properties replace or add to the defaults."""
    properties: dict[str, Any] = {
        "publisherId": "NO00001",
        "publicationId": "NO00001:denm-1",
        "originatingCountry": "NO",
        "protocolVersion": "DENM:1.3.1",
        "messageType": "DENM",
        "quadTree": quad_tree,
        "causeCode": 1,
        "subCauseCode": 0,
        "latitude": 51.485992,
        "longitude": 4.735311,
    }
    properties.update(extra)
    return Message(body=body, properties=properties, inferred=True)


def body_bytes(message: Message) -> bytes:
    """A received message's binary body (proton types a body as any AMQP value)."""
    body = message.body
    assert isinstance(body, (bytes, bytearray, memoryview)), f"not a binary body: {type(body).__name__}"
    return bytes(body)
