"""The bridge's link to the IF2 RabbitMQ (IF2 6.1-6.3), kept up across connection losses.

One connection (:mod:`.amqp091_io` on the sans-I/O :mod:`.amqp091`): channel 1 publishes with
publisher confirms to the durable topic exchanges (Table 2), channel 2 consumes the import queues
(Table 3: server-named, exclusive, non-durable, auto-delete, with ``x-max-length`` and
``x-message-ttl``, IF2 6.3) with ``prefetch`` unacknowledged deliveries. A :class:`Session` is one
such connection: the deliveries of each read go to the bridge with their session, and their acks
come back to it (:meth:`Session.settle`) to be batched by :class:`~.acks.AckWindow`: one ``basic.ack
multiple=true`` for the longest accepted run, once an eighth of ``prefetch`` is settled or
:data:`ACK_DELAY_S` after the first settlement (each ack frame costs the bridge a TLS write and
RabbitMQ a frame to read). When the connection goes, the session ends (RabbitMQ redelivers what it
did not acknowledge) and a new one declares new queues: "queues
will be recreated every time a client connects". Details: docs/if2-bridge.md.
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from pamqp import commands

from interchange.bridges.if2.acks import Ack, AckWindow
from interchange.bridges.if2.amqp091 import Connection, Delivery, Properties
from interchange.bridges.if2.amqp091_io import AmqpClosed, Client, Confirm, OnConfirmed, confirm_each
from interchange.bridges.if2.config import If2Config
from interchange.ground.timing import backoff_s

__all__ = ["RabbitLink", "Session"]

EventSink = Callable[[str, str, dict[str, Any]], None]
PUBLISH, CONSUME = 1, 2  #: the channels
#: the longest settled deliveries wait for their ack (fewer than the batch: a quiet consumer, or the end of a burst)
ACK_DELAY_S = 0.005


class Session:
    """One connection to RabbitMQ and the acknowledgements of its consumer channel: sent once
    ``ack_batch`` deliveries are settled (in the next loop turn, with every settlement of this one),
    else at most :data:`ACK_DELAY_S` after the first settlement not sent yet."""

    def __init__(self, client: Client, exchanges: set[str], ack_batch: int = 1) -> None:
        self.client = client
        self.exchanges = exchanges  #: declared on this connection
        self.window: AckWindow[Delivery] = AckWindow()  # delivery tags are the channel's
        self.ack_batch = ack_batch
        self._acking: asyncio.Handle | None = None  #: the scheduled :meth:`_send_acks` (soon, or a timer)
        self._soon = False  #: it is scheduled for the next loop turn

    @property
    def open(self) -> bool:
        return not self.client.closed.done()

    def settle(self, delivery: Delivery, accepted: bool) -> None:
        """Acked (accepted) or rejected without requeue, batched (:mod:`.acks`, :meth:`_ack_soon`)."""
        self.window.settled(delivery, accepted)
        self._ack_soon()

    def settle_all(self, deliveries: list[Delivery], accepted: bool) -> None:
        """:meth:`settle` for each of ``deliveries`` (one fate for all)."""
        self.window.settled_all(deliveries, accepted)
        self._ack_soon()

    def _ack_soon(self) -> None:
        """The acks in the next loop turn once ``ack_batch`` are due, else after :data:`ACK_DELAY_S`: one
        ack frame (and one write, one frame for RabbitMQ to read) covers a run of deliveries."""
        if self._soon:
            return
        loop = asyncio.get_running_loop()
        if self.window.settled_count >= self.ack_batch:
            if self._acking is not None:
                self._acking.cancel()
            self._soon = True
            self._acking = loop.call_soon(self._send_acks)
        elif self._acking is None:
            self._acking = loop.call_later(ACK_DELAY_S, self._send_acks)

    def _send_acks(self) -> None:
        self._acking, self._soon = None, False
        if not self.open:  # RabbitMQ redelivers what was not acknowledged
            return
        actions = self.window.flush()  # (settled ones behind one still in flight: sent once it is settled)
        if not actions:
            return
        for action in actions:
            if isinstance(action, Ack):
                self.client.ack(CONSUME, action.message.delivery_tag, action.multiple)
            else:
                self.client.reject(CONSUME, action.message.delivery_tag)
        self.client.flush()

    def publish(self, exchange: str, routing_key: str, properties: Any, body: bytes, on_confirm: Confirm | Any) -> None:
        """On the confirm channel; ``on_confirm`` comes back with the confirm (:meth:`Client.publish`)."""
        self.client.publish(PUBLISH, exchange, routing_key, properties, body, on_confirm)

    def publish_run(self, exchange: str, routing_key: str, properties: Any, bodies: Sequence[bytes],
                    tokens: Sequence[Any]) -> None:
        """:meth:`publish` of each of ``bodies`` (one exchange, key and properties), ``tokens`` its confirms' tokens."""
        self.client.publish_run(PUBLISH, exchange, routing_key, properties, bodies, tokens)


class RabbitLink:
    """The supervised connection: :attr:`session` while it is up, ``on_deliveries`` with the imports of
    each read, in delivery order; ``on_confirmed`` (when given) with the publisher confirms of each
    ack or nack frame (:attr:`Client.on_confirmed`)."""

    def __init__(self, config: If2Config, context: ssl.SSLContext, event: EventSink,
                 on_deliveries: Callable[[Session, list[Delivery]], None],
                 on_confirmed: OnConfirmed = confirm_each) -> None:
        self.config, self._context, self._event, self._on_deliveries = config, context, event, on_deliveries
        self._on_confirmed = on_confirmed
        url = urlsplit(config.url)
        self.host, self.tls = url.hostname or "localhost", url.scheme == "amqps"
        self.port = url.port or (5671 if self.tls else 5672)
        self.vhost = unquote(url.path[1:]) if len(url.path) > 1 else "/"
        self.session: Session | None = None
        self.up = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="if2-rabbitmq")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.session is not None:
            await self.session.client.close()

    async def _loop(self) -> None:
        failures = 0  # sessions lost since one ended normally
        while True:
            error: BaseException | None = None
            try:
                await self._session()
                failures = 0
            except (OSError, ConnectionError, TimeoutError) as exc:
                error = exc
            failures += 1
            delay = backoff_s(failures, self.config.reconnect_min_s, self.config.reconnect_max_s)
            self.up.clear()
            self.session = None
            self._event("warning", "if2_rabbitmq_lost", {"error": repr(error) if error else "closed", "retry_s": delay})
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        """One connection: exchanges, queues and consumers as IF2 6.2/6.3 say; returns when it closes."""
        config = self.config
        amqp = Connection(self.vhost, "PLAIN" if config.auth == "plain" else "EXTERNAL", config.username or "",
                          config.password or "")
        client = await Client.open(self.host, self.port, amqp, self._context if self.tls else None, self.host)
        client.on_confirmed = self._on_confirmed
        try:
            await client.channel(PUBLISH, confirms=True)
            for name in sorted({*config.exports, *config.imports}):  # Table 2
                await client.call(PUBLISH, commands.Exchange.Declare(exchange=name, exchange_type="topic",
                                                                     durable=True, auto_delete=False))
            session = Session(client, {*config.exports, *config.imports}, max(1, config.prefetch // 8))
            on_deliveries, received = self._on_deliveries, session.window.received_all

            def delivered(deliveries: list[Delivery]) -> None:
                received(deliveries)  # in delivery order, before their fate is known
                on_deliveries(session, deliveries)

            client.on_deliveries = delivered
            await client.channel(CONSUME)
            await client.call(CONSUME, commands.Basic.Qos(prefetch_count=config.prefetch))
            for name, keys in config.imports.items():
                await self._consume(client, name, keys)
            self.session = session
            self.up.set()
            self._event("info", "if2_rabbitmq_connected", {"imports": sorted(config.imports),
                                                           "exports": sorted(config.exports)})
            reason = await asyncio.shield(client.closed)
        except BaseException:
            client.abort()
            raise
        raise AmqpClosed(reason)

    async def _consume(self, client: Client, exchange: str, keys: list[str]) -> None:
        arguments: dict[str, Any] = {"x-max-length": self.config.queue_max_length,
                                     "x-message-ttl": self.config.queue_message_ttl_ms}
        if self.config.dead_letter_exchange is not None:
            arguments["x-dead-letter-exchange"] = self.config.dead_letter_exchange
        declared = await client.call(CONSUME, commands.Queue.Declare(
            queue="", exclusive=True, durable=False, auto_delete=True, arguments=arguments))  # Table 3
        assert isinstance(declared, commands.Queue.DeclareOk) and declared.queue
        for key in keys:
            await client.call(CONSUME, commands.Queue.Bind(queue=declared.queue, exchange=exchange, routing_key=key))
        await client.call(CONSUME, commands.Basic.Consume(queue=declared.queue, consumer_tag=f"if2-{exchange}"))


def outgoing(headers: dict[str, Any], ttl_ms: int | None, app_id: str) -> Any:
    """The properties of a message the bridge publishes (Table 4; not persistent, marked as ours)."""
    return Properties(headers=headers, expiration=None if ttl_ms is None else str(max(0, ttl_ms)), app_id=app_id,
                      delivery_mode=1)
