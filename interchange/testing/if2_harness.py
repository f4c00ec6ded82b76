"""Helpers for the IF2 bridge tests: names of the IF2 test PKI, a node running the bridge against the
session's private RabbitMQ (interchange/testing/rabbitmq.py, TLS 1.3 + SASL EXTERNAL). The IF2
back-office and broker operator the tests talk to is the counterpart written from the IF2 spec,
``tests/integration/if2_backoffice`` (the integration conftest's fixtures point it at the broker)."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import quote

from proton import Message

from certs import TestPki
from interchange.app.config import NodeConfig
from interchange.app.node import RunningNode
from interchange.bridges.if2.config import If2Config, If2Provider, If2Tls
from interchange.testing.ii_harness import Consumer, Https, node_config
from interchange.testing.rabbitmq import RabbitMQ

IF2_NODE = "a.interchange.test"
IF2_NEIGHBOUR = "b.interchange.test"  #: a neighbour interchange of the bridge's node
RABBITMQ_CN = "rabbitmq.if2.test"
BRIDGE = "if2-bridge"  #: the bridge's actor CN (node and RabbitMQ)
BACKOFFICE = "if2-backoffice"  #: an IF2 back-office (RabbitMQ only)
CROADS_ACTOR = "croads-actor"  #: a C-ITS actor of the node
IF2_ACTORS = (BRIDGE, BACKOFFICE, CROADS_ACTOR)
PROVIDERS = [If2Provider(name="RWS", publisher_id="NL00001", coverage=["1202"]),
             If2Provider(name="BASt", publisher_id="DE15608", coverage=["1202"])]
HAZELDONK = "120202130121133020"
HAZELDONK_POINT = (51.485992, 4.735311)
WAIT_S = 20.0
DENM_KEY = "DENM.1_2_1.RWS.5." + ".".join(HAZELDONK)  #: an IF2 routing key of RWS in HAZELDONK


def dotted(tile: str) -> str:
    return ".".join(tile)


def bridge_node_config(pki: TestPki, broker: RabbitMQ, workdir: Path, *, ii_port: int = 0, vhost: str | None = None,
                       **if2: Any) -> NodeConfig:
    """A node with the II and the IF2 bridge (imports DENM and IVI, exports SPAT and MAP by default)."""
    config = node_config(pki, IF2_NODE, workdir, ii_port=ii_port)
    identity = pki.identity(BRIDGE)
    url = broker.url if vhost is None else f"{broker.url}/{quote(vhost, safe='')}"
    settings: dict[str, Any] = {
        "url": url, "server_name": RABBITMQ_CN, "actor": BRIDGE,
        "tls": If2Tls(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle),
        "providers": PROVIDERS, "imports": {"DENM": ["#"], "IVI": ["#"]}, "exports": {"SPAT": ["#"], "MAP": ["#"]},
        "reconnect_min_s": 0.1, "reconnect_max_s": 1.0}
    settings.update(if2)
    return config.model_copy(update={"if2": If2Config(**settings)})


async def croads_consumer(pki: TestPki, node: RunningNode, selector: str) -> Consumer:
    """A C-ITS actor subscribed at the node with ``selector`` (its local source)."""
    https = Https(pki, CROADS_ACTOR, node)
    try:
        status, answer = await https.post(f"/{CROADS_ACTOR}/subscriptions", {
            "name": CROADS_ACTOR, "version": "1.0", "subscriptions": [{"selector": selector}]})
    finally:
        await https.close()
    assert status == 200, answer
    assert node.amqps_port is not None, "the node runs no BI"
    source = answer["subscriptions"][0]["endpoints"][0]["source"]
    return await asyncio.to_thread(Consumer, pki, CROADS_ACTOR, node.amqps_port, IF2_NODE, source)


async def croads_publisher(pki: TestPki, node: RunningNode, capability: dict[str, Any]) -> str:
    """Register a capability and a delivery for the C-ITS actor; the delivery's target."""
    https = Https(pki, CROADS_ACTOR, node)
    try:
        status, answer = await https.post(f"/{CROADS_ACTOR}/capabilities", {
            "name": CROADS_ACTOR, "version": "1.0", "capabilities": [capability]})
        assert status == 200, answer
        status, answer = await https.post(f"/{CROADS_ACTOR}/deliveries", {
            "name": CROADS_ACTOR, "version": "1.0", "deliveries": [{"selector": "TRUE"}]})
        assert status == 200 and answer["deliveries"][0]["status"] == "CREATED", answer
    finally:
        await https.close()
    return answer["deliveries"][0]["endpoints"][0]["target"]


def spatem(body: bytes, ttl_s: float = 30.0, publisher: str = "NL00001") -> Message:
    message = Message(body=body, inferred=True, ttl=ttl_s, properties={
        "messageType": "SPATEM", "protocolVersion": "SPATEM:2.1.1", "publisherId": publisher,
        "publicationId": f"{publisher}:spat-7", "originatingCountry": publisher[:2],
        "quadTree": f",{HAZELDONK},", "latitude": HAZELDONK_POINT[0], "longitude": HAZELDONK_POINT[1]})
    return message


SPATEM_CAPABILITY = {"application": {"messageType": "SPATEM", "publisherId": "NL00001",
                                     "publicationId": "NL00001:spat-7", "originatingCountry": "NL",
                                     "protocolVersion": "SPATEM:2.1.1", "quadTree": ["1202"]}, "metadata": {}}
