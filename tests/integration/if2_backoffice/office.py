"""An IF2 back-office on a RabbitMQ broker, with pika (IF2 chapters 6 and 7.3).

It publishes as 7.3.2 does (the routing key of 6.4, headers ``lat``/``lon`` as doubles, the ttl as
the ``expiration`` property in milliseconds) and consumes as 7.3.3 does (a Table 3 queue: server
named, exclusive, non-durable, auto-delete, ``x-max-length`` and ``x-message-ttl``, bound with a
routing-key filter). It also reads the operator's dead-letter queue (:mod:`.deployment`). TLS with a
client certificate and SASL EXTERNAL, as the test broker asks (6.5 leaves security to the
deployment).

pika is not the interchange's AMQP 0-9-1 client (the bridge has its own on pamqp's codec), so the
two sides share no codec. Its BlockingConnection is not thread-safe: every call runs on the
back-office's own single thread; the async methods hand work to it. pika reads but does not write
the field type of a double ('d'), which the spec's Java client writes for ``lat``/``lon``
(``headers.put("lat", data.lat)`` with a double): :func:`_encode_value` adds it.
"""
from __future__ import annotations

import asyncio
import ssl
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pika
import pika.data
from pika.adapters.blocking_connection import BlockingChannel

from if2_backoffice.deployment import DEAD_LETTER_QUEUE

__all__ = ["BackOffice", "Broker", "ConnectBackOffice", "Publication", "Received"]

T = TypeVar("T")
_pika_encode_value = pika.data.encode_value


def _encode_value(pieces: list[bytes], value: Any) -> int:
    """pika's table value encoder, plus Python floats as AMQP 0-9-1 doubles ('d', 8 bytes)."""
    if isinstance(value, float):
        pieces.append(struct.pack(">cd", b"d", value))
        return 9
    return _pika_encode_value(pieces, value)


pika.data.encode_value = _encode_value  # encode_table looks it up in its module at each call


@dataclass(frozen=True)
class Broker:
    """Where the IF2 broker is and how this back-office authenticates (its deployment documentation)."""

    host: str
    port: int
    vhost: str
    server_name: str  #: the name on the broker's certificate
    cert_chain: Path
    key: Path
    trust_bundle: Path

    def parameters(self) -> pika.ConnectionParameters:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.trust_bundle))
        context.load_cert_chain(str(self.cert_chain), str(self.key))
        return pika.ConnectionParameters(
            host=self.host, port=self.port, virtual_host=self.vhost,
            credentials=pika.credentials.ExternalCredentials(),
            ssl_options=pika.SSLOptions(context, self.server_name), heartbeat=0, blocked_connection_timeout=30)


@dataclass(frozen=True)
class Publication:
    """One message as 7.3.2 publishes it."""

    exchange: str
    routing_key: str
    body: bytes
    lat: float | None = None
    lon: float | None = None
    ttl_ms: int | None = 10_000  #: the spec's example: expiration "10000"
    headers: dict[str, Any] = field(default_factory=dict)  #: more headers (or others instead of lat/lon)

    def properties(self) -> pika.BasicProperties:
        headers = dict(self.headers)
        if self.lat is not None and self.lon is not None:
            headers.update(lat=float(self.lat), lon=float(self.lon))  # pika writes a float as a double, as Java
        return pika.BasicProperties(headers=headers or None,
                                    expiration=None if self.ttl_ms is None else str(self.ttl_ms))


@dataclass(frozen=True)
class Received:
    exchange: str
    routing_key: str
    body: bytes
    headers: dict[str, Any]
    expiration: str | None
    app_id: str | None
    redelivered: bool


class BackOffice:
    """One connection and channel (7.3.1), publisher confirms on."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="if2-backoffice")
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        self._inbox: deque[Received] = deque()
        self._closed = False

    async def _run(self, work: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work, *args)

    @classmethod
    async def connect(cls, broker: Broker) -> BackOffice:
        office = cls(broker)
        await office._run(office._connect)
        return office

    def _connect(self) -> None:
        self._connection = pika.BlockingConnection(self.broker.parameters())
        self._channel = self._connection.channel()
        self._channel.confirm_delivery()

    @property
    def channel(self) -> BlockingChannel:
        assert self._channel is not None, "not connected"
        return self._channel

    async def close(self) -> None:
        """Close the connection (once; closing again does nothing)."""
        if self._closed:
            return
        self._closed = True

        def close() -> None:
            if self._connection is not None and self._connection.is_open:
                self._connection.close()
        try:
            await self._run(close)
        finally:
            self._thread.shutdown(wait=False)

    # ---- publishing (7.3.2)
    async def publish(self, publication: Publication) -> None:
        """One message, confirmed by the broker (raises if it was not)."""
        await self._run(self._publish, publication)

    async def publish_all(self, publications: Sequence[Publication]) -> None:
        await self._run(lambda: [self._publish(p) for p in publications])

    def _publish(self, publication: Publication) -> None:
        self.channel.basic_publish(publication.exchange, publication.routing_key, publication.body,
                                   publication.properties())

    # ---- consuming (7.3.3)
    async def bind(self, exchange: str, key: str = "#", *, max_length: int = 1000,
                   ttl_ms: int = 600_000) -> str:
        """A Table 3 queue bound to ``exchange`` with ``key``, consumed into this back-office's inbox."""
        return await self._run(self._bind, exchange, key, max_length, ttl_ms)

    def _bind(self, exchange: str, key: str, max_length: int, ttl_ms: int) -> str:
        declared = self.channel.queue_declare("", durable=False, exclusive=True, auto_delete=True,
                                              arguments={"x-max-length": max_length, "x-message-ttl": ttl_ms})
        queue = declared.method.queue
        self.channel.queue_bind(queue, exchange, key)
        self.channel.basic_consume(queue, self._on_message, auto_ack=True)
        return str(queue)

    async def hold(self, exchange: str, key: str = "#", *, max_length: int = 100) -> str:
        """A queue bound to ``exchange`` that nobody reads yet and that refuses what does not fit
        (``x-overflow: reject-publish``: RabbitMQ nacks a publish it cannot put there); :meth:`consume` reads it."""
        return await self._run(self._hold, exchange, key, max_length)

    def _hold(self, exchange: str, key: str, max_length: int) -> str:
        declared = self.channel.queue_declare("", durable=False, exclusive=True, auto_delete=True,
                                              arguments={"x-max-length": max_length, "x-overflow": "reject-publish"})
        queue = declared.method.queue
        self.channel.queue_bind(queue, exchange, key)
        return str(queue)

    async def consume(self, queue: str) -> None:
        """Read ``queue`` (of :meth:`hold`) into the inbox from now on."""
        await self._run(lambda: self.channel.basic_consume(queue, self._on_message, auto_ack=True))

    def _on_message(self, _channel: BlockingChannel, deliver: Any, properties: pika.BasicProperties,
                    body: bytes) -> None:
        self._inbox.append(Received(deliver.exchange, deliver.routing_key, body, dict(properties.headers or {}),
                                    properties.expiration, properties.app_id, deliver.redelivered))

    async def send(self, exchange: str, key: str, body: bytes, *, lat: float | None = None, lon: float | None = None,
                   ttl_ms: int | None = 10_000) -> None:
        await self.publish(Publication(exchange, key, body, lat, lon, ttl_ms))

    async def next(self, timeout_s: float = 20.0) -> Received:
        """The next message of a bound queue; TimeoutError if none came within ``timeout_s``."""
        got = await self._run(self._next, timeout_s)
        if got is None:
            raise TimeoutError(f"no IF2 message within {timeout_s:g} s")
        return got

    async def quiet(self, seconds: float) -> Received | None:
        """The next message if one comes within ``seconds``, else None."""
        return await self._run(self._next, seconds)

    def _next(self, timeout_s: float) -> Received | None:
        deadline = time.monotonic() + timeout_s
        while not self._inbox:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            assert self._connection is not None
            self._connection.process_data_events(time_limit=min(left, 0.1))
        return self._inbox.popleft()

    # ---- the operator's dead letters (deployment.py)
    async def dead_letters(self, settle_s: float = 1.0) -> list[Received]:
        """Everything in the dead-letter queue, once nothing more came for ``settle_s``."""
        return await self._run(self._dead_letters, settle_s)

    def _dead_letters(self, settle_s: float) -> list[Received]:
        found: list[Received] = []
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < settle_s:
            method, properties, body = self.channel.basic_get(DEAD_LETTER_QUEUE, auto_ack=True)
            if method is None:
                time.sleep(0.05)
                continue
            quiet_since = time.monotonic()
            found.append(Received(method.exchange, method.routing_key, body, dict(properties.headers or {}),
                                  properties.expiration, properties.app_id, method.redelivered))
        return found


#: How a test gets a back-office connected to a virtual host of its broker (``"/"`` by default).
ConnectBackOffice = Callable[..., Awaitable[BackOffice]]
