"""Helpers for the IF2 bridge tests: names of the IF2 test PKI, a node running the bridge against the
session's private RabbitMQ (interchange/testing/rabbitmq.py, TLS 1.3 + SASL EXTERNAL), and an IF2
back-office client (aio-pika) that publishes and consumes as IF2 chapter 6 / 7 says."""
from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue

from certs import TestPki
from certs.tls import TlsFiles, client_context
from interchange.app.config import NodeConfig
from interchange.bridges.if2.config import If2Config, If2Provider, If2Tls
from interchange.testing.ii_harness import node_config
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


def dotted(tile: str) -> str:
    return ".".join(tile)


def bridge_node_config(pki: TestPki, broker: RabbitMQ, workdir: Path, *, ii_port: int = 0, **if2: Any) -> NodeConfig:
    """A node with the II and the IF2 bridge (imports DENM and IVI, exports SPAT and MAP by default)."""
    config = node_config(pki, IF2_NODE, workdir, ii_port=ii_port)
    identity = pki.identity(BRIDGE)
    settings: dict[str, Any] = {
        "url": broker.url, "server_name": RABBITMQ_CN, "actor": BRIDGE,
        "tls": If2Tls(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle),
        "providers": PROVIDERS, "imports": {"DENM": ["#"], "IVI": ["#"]}, "exports": {"SPAT": ["#"], "MAP": ["#"]},
        "reconnect_min_s": 0.1, "reconnect_max_s": 1.0}
    settings.update(if2)
    return config.model_copy(update={"if2": If2Config(**settings)})


def rabbitmq_context(pki: TestPki, cn: str) -> ssl.SSLContext:
    return client_context(TlsFiles.from_pki(pki.directory, cn, with_crls=False), server_name=RABBITMQ_CN)


@dataclass
class BackOffice:
    """An IF2 back-office on the test RabbitMQ: publishes like chapter 7.3.2, consumes like 7.3.3."""

    connection: aio_pika.abc.AbstractConnection
    channel: aio_pika.abc.AbstractChannel
    received: asyncio.Queue[AbstractIncomingMessage] = field(default_factory=asyncio.Queue)

    @classmethod
    async def connect(cls, pki: TestPki, broker: RabbitMQ) -> "BackOffice":
        connection = await aio_pika.connect(broker.url + "?auth=external", ssl_context=rabbitmq_context(pki, BACKOFFICE),
                                            timeout=WAIT_S)
        channel = await connection.channel(publisher_confirms=True)
        return cls(connection, channel)

    async def publish(self, exchange: str, key: str, body: bytes, *, lat: float | None = None,
                      lon: float | None = None, ttl_ms: int | None = 10_000) -> None:
        # decimals: aio-pika (pamqp) would send a float as a 32-bit float; a Java publisher sends doubles
        headers: dict[str, Any] = {} if lat is None else {"lat": Decimal(str(lat)), "lon": Decimal(str(lon))}
        target = await self.channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        message = aio_pika.Message(body, headers=headers,
                                   expiration=None if ttl_ms is None else timedelta(milliseconds=ttl_ms))
        await target.publish(message, routing_key=key)

    async def bind(self, exchange: str, key: str = "#") -> AbstractQueue:
        """A Table 3 queue (server-named, exclusive, auto-delete, max length, ttl) bound with ``key``."""
        await self.channel.declare_exchange(exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        queue = await self.channel.declare_queue("", exclusive=True, durable=False, auto_delete=True,
                                                 arguments={"x-max-length": 1000, "x-message-ttl": 600_000})
        await queue.bind(exchange, routing_key=key)
        await queue.consume(self._on_message)
        return queue

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        await message.ack()
        await self.received.put(message)

    async def next(self, timeout: float = WAIT_S) -> AbstractIncomingMessage:
        return await asyncio.wait_for(self.received.get(), timeout)

    async def quiet(self, seconds: float) -> AbstractIncomingMessage | None:
        """The next message if one comes within ``seconds``, else None."""
        try:
            return await asyncio.wait_for(self.received.get(), seconds)
        except asyncio.TimeoutError:
            return None

    async def close(self) -> None:
        await self.connection.close()
