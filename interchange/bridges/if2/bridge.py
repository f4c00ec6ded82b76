"""The IF2 bridge: InterCor IF2 back-offices (AMQP 0-9-1 on RabbitMQ) in and out of this interchange.

IF2 -> C-Roads: a queue per import exchange (IF2 Table 3, 6.3); each message mapped (:mod:`.keys`),
its capability registered on first arrival (IP_077/091), sent to the BI and acknowledged at
RabbitMQ only once the BI accepted it (at least once; refusals, retries, ttl: :mod:`.attempts`); a
capability idle for ``capability_idle_s`` is withdrawn. C-Roads -> IF2: a subscription with the
export keys' selector (:mod:`.bindings`) minus what came from IF2 (IP_109), the republishing
rules (:mod:`.republish`), durable topic exchanges (IF2 Table 2) with publisher confirms, the BI
settled after the confirm, a copy IF2 has not published twice (:mod:`.copies`). aio-pika in the
node's event loop; reconnection is the bridge's own loop (Table 3's server-named, exclusive
queues are declared again). Details and the choice of client: docs/if2-bridge.md.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractConnection, AbstractIncomingMessage
from proton import Message

from certs.tls import TlsFiles, client_context
from ii_api.wire.models import Capability
from interchange.actor.areas import Tiles
from interchange.actor.capabilities import build_capability
from interchange.actor.errors import ActorError
from interchange.bridges.if2.acks import Ack, AckWindow
from interchange.bridges.if2.actor_api import ActorApi, ActorApiError
from interchange.bridges.if2.attempts import Attempts, Decision, Fate, RetryPolicy
from interchange.bridges.if2.bi_link import BiLink
from interchange.bridges.if2.config import If2Config
from interchange.bridges.if2.copies import IF2Copies
from interchange.bridges.if2.keys import (
    AreaCover,
    If2Envelope,
    If2KeyError,
    croads_properties,
    envelope_of,
    if2_envelope,
    table4_headers,
)
from interchange.bridges.if2.republish import RepublishPolicy
from interchange.broker.client import RELEASE
from interchange.broker.local_door import Door
from interchange.ground.timing import backoff_s

__all__ = ["If2Bridge", "NodeView"]

EventSink = Callable[[str, str, dict[str, Any]], None]
#: publicationIds of what came from IF2 (keys.publication_id), not sent back to IF2.
NOT_FROM_IF2 = "(publicationId IS NULL OR publicationId NOT LIKE '%:if2-%')"
#: An IF2 message not taken by the BI: the count and the log event, by its fate (:mod:`.attempts`).
_REFUSAL_COUNTS = {Fate.REFUSE: "import_refused", Fate.EXPIRED: "import_expired", Fate.GIVE_UP: "import_gave_up"}
_REFUSAL_EVENTS = {Fate.REFUSE: "if2_import_refused", Fate.EXPIRED: "if2_import_expired",
                   Fate.GIVE_UP: "if2_import_gave_up"}


class NodeView:
    """Where the bridge finds its node: the BI's host/port, the II's base URL, the node's name."""

    def __init__(self, name: str, bi_host: str, bi_port: int, ii_url: str, door: Door | None = None) -> None:
        self.name, self.bi_host, self.bi_port, self.ii_url = name, bi_host, bi_port, ii_url
        self.door = door  #: the broker's in-process door, for ``bi_door = "in-process"``


class If2Bridge:
    def __init__(self, config: If2Config, node: NodeView, event: EventSink) -> None:
        self.config = config
        self.node = node
        self._event = event
        self.providers = config.provider_table()
        files = TlsFiles(cert_chain=config.tls.cert_chain, key=config.tls.key, trust_bundle=config.tls.trust_bundle)
        self._node_context = client_context(files)
        self._rabbit_context = client_context(files, server_name=config.server_name) if config.server_name \
            else client_context(files)
        self.api = ActorApi(node.ii_url, node.name, config.tls.cert_chain, config.tls.key, config.tls.trust_bundle)
        self.bi = BiLink(node.bi_host, node.bi_port, node.name, self._node_context, f"if2-bridge-{config.actor}",
                         event, backoff=(config.reconnect_min_s, config.reconnect_max_s), credit=config.prefetch,
                         door=node.door if config.bi_door == "in-process" else None, identity=config.actor)
        self.app_id = f"{node.name}/if2"  # marks what we publish, so that our import queue skips it
        self.policy: RepublishPolicy[If2Envelope] = RepublishPolicy(config.republish_interval_s,
                                                                    config.default_validity_s)
        self._registered: set[str] = set()
        self._register_lock = asyncio.Lock()
        self._delivery_known = False
        self._exchanges: dict[str, AbstractExchange] = {}
        self._rabbit_up = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        #: one task per message in flight: unsettled BI deliveries, unacknowledged IF2 deliveries (each
        #: at most `prefetch`)
        self._flows: set[asyncio.Task[None]] = set()
        self._acking: set[AckWindow[AbstractIncomingMessage]] = set()  #: windows with an ack sender running
        self._connection: AbstractConnection | None = None
        self.retry = RetryPolicy(config.bi_attempts, config.reconnect_min_s, config.reconnect_max_s)
        self.counts = {"imported": 0, "import_refused": 0, "import_expired": 0, "import_gave_up": 0, "exported": 0,
                       "export_refused": 0, "republished": 0, "capabilities_withdrawn": 0, "bi_retried": 0,
                       "bi_unanswered": 0, "export_unsettled": 0, "export_redelivered": 0}
        self._last_import: dict[str, float] = {}  #: publicationId -> when its last message came (monotonic)
        self.areas = AreaCover()  #: the area tiles of IF2 messages by tile (IP_112/113)
        self.copies = IF2Copies()  #: what IF2 has of C-Roads messages the BI may give out again

    # ------------------------------------------------------------------ what metrics read (If2View)
    @property
    def rabbitmq_connected(self) -> bool:
        return self._rabbit_up.is_set()

    @property
    def bi_connected(self) -> bool:
        return self.bi.connected

    @property
    def in_flight(self) -> int:
        return len(self._flows)

    @property
    def capabilities_registered(self) -> int:
        return len(self._registered)

    @property
    def republish_tracked(self) -> int:
        return len(self.policy)

    @property
    def republish_suppressed(self) -> int:
        return self.policy.suppressed

    # ------------------------------------------------------------------ lifetime
    async def start(self) -> None:
        """Delivery and subscription at the node, then the links; ValueError if the node refuses them."""
        try:
            await self._setup()
        except ActorApiError as exc:
            raise ValueError(f"the IF2 bridge could not set up at the node: {exc}") from None
        self.bi.start()
        self._tasks = [asyncio.create_task(self._rabbit_loop(), name="if2-rabbitmq"),
                       asyncio.create_task(self._republish_loop(), name="if2-republish")]
        if self.config.capability_idle_s is not None:
            self._tasks.append(asyncio.create_task(self._withdraw_loop(self.config.capability_idle_s),
                                                   name="if2-withdraw"))

    async def _setup(self) -> None:
        self._registered = await self.api.publication_ids()
        now = time.monotonic()  # registered before a restart: idle from now on
        self._last_import = {pid: now for pid in self._registered}
        delivery = await self.api.delivery()
        self._use_delivery(delivery)
        selector = self.config.export_selector()
        if selector != "FALSE":
            subscription = await self.api.subscription(f"({selector}\n) AND {NOT_FROM_IF2}")
            if not subscription.endpoints:
                raise ActorApiError(f"subscription {subscription.id} has no endpoint: {subscription.errorMessage}")
            self.bi.set_source(subscription.endpoints[0].source, None, self._on_croads)

    async def close(self) -> None:
        for task in (*self._tasks, *self._flows):
            task.cancel()
        for task in (*self._tasks, *self._flows):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()
        await self.bi.close()
        await self.api.close()

    def _use_delivery(self, delivery: Any) -> None:
        if delivery.endpoints:
            self.bi.set_target(delivery.endpoints[0].target)
            self._delivery_known = True

    # ------------------------------------------------------------------ RabbitMQ
    def _url(self) -> str:
        if self.config.auth == "external":
            return self.config.url + ("&" if "?" in self.config.url else "?") + "auth=external"
        return self.config.url

    async def _rabbit_loop(self) -> None:
        failures = 0  # sessions lost since one ended normally
        while True:
            error: BaseException | None = None
            try:
                await self._rabbit_session()
                failures = 0
            except (OSError, ConnectionError, asyncio.TimeoutError, aio_pika.exceptions.AMQPError) as exc:
                error = exc
            failures += 1
            delay = backoff_s(failures, self.config.reconnect_min_s, self.config.reconnect_max_s)
            if error is not None:
                self._event("warning", "if2_rabbitmq_lost", {"error": repr(error), "retry_s": delay})
            self._rabbit_up.clear()
            self._exchanges = {}
            await asyncio.sleep(delay)

    async def _rabbit_session(self) -> None:
        """One connection: exchanges, queues and consumers as IF2 6.2/6.3 say; returns when it closes."""
        kwargs: dict[str, Any] = {"ssl_context": self._rabbit_context} if self.config.url.startswith("amqps") else {}
        if self.config.auth == "plain":
            kwargs.update(login=self.config.username, password=self.config.password)
        connection = await aio_pika.connect(self._url(), timeout=10, **kwargs)
        self._connection = connection
        closed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def on_close(*_: Any) -> None:
            if not closed.done():
                closed.set_result(None)

        connection.close_callbacks.add(on_close)
        async with connection:
            publish_channel = await connection.channel(publisher_confirms=True)
            for name in {*self.config.exports, *self.config.imports}:
                self._exchanges[name] = await publish_channel.declare_exchange(
                    name, aio_pika.ExchangeType.TOPIC, durable=True, auto_delete=False)  # Table 2
            consume_channel = await connection.channel()
            await consume_channel.set_qos(prefetch_count=self.config.prefetch)
            window: AckWindow[AbstractIncomingMessage] = AckWindow()  # delivery tags are the channel's
            for name, keys in self.config.imports.items():
                await self._consume(consume_channel, name, keys, window)
            self._rabbit_up.set()
            self._event("info", "if2_rabbitmq_connected", {"imports": sorted(self.config.imports),
                                                           "exports": sorted(self.config.exports)})
            await closed

    async def _consume(self, channel: AbstractChannel, exchange: str, keys: list[str],
                       window: AckWindow[AbstractIncomingMessage]) -> None:
        arguments: dict[str, Any] = {"x-max-length": self.config.queue_max_length,
                                     "x-message-ttl": self.config.queue_message_ttl_ms}
        if self.config.dead_letter_exchange is not None:
            arguments["x-dead-letter-exchange"] = self.config.dead_letter_exchange
        queue = await channel.declare_queue("", exclusive=True, durable=False, auto_delete=True,
                                            arguments=arguments)
        for key in keys:
            await queue.bind(exchange, routing_key=key)
        await queue.consume(functools.partial(self._on_if2, window), no_ack=False)

    # ------------------------------------------------------------------ IF2 -> C-Roads
    async def _on_if2(self, window: AckWindow[AbstractIncomingMessage], message: AbstractIncomingMessage) -> None:
        """One task per delivery (at most ``prefetch`` unacknowledged), so the BI round trips overlap;
        they start in delivery order and send at once in the common case, which keeps the order."""
        window.received(message)
        task = asyncio.get_running_loop().create_task(self._import(message, window))
        self._flows.add(task)
        task.add_done_callback(self._flows.discard)

    def _settle_if2(self, window: AckWindow[AbstractIncomingMessage], message: AbstractIncomingMessage,
                    accepted: bool) -> None:
        """Acked (accepted) or rejected without requeue, batched: :mod:`.acks`; one sender per window."""
        window.settled(message, accepted)
        if window not in self._acking:
            self._acking.add(window)
            task = asyncio.get_running_loop().create_task(self._send_acks(window))
            self._flows.add(task)
            task.add_done_callback(self._flows.discard)

    async def _send_acks(self, window: AckWindow[AbstractIncomingMessage]) -> None:
        """Sends what the window allows, in order, until nothing is left (settlements made meanwhile
        join the next round); a closed channel ends it: RabbitMQ redelivers the unacknowledged."""
        try:
            await asyncio.sleep(0)  # the settlements of this loop turn join one ack
            while actions := window.flush():
                for action in actions:
                    if isinstance(action, Ack):
                        await action.message.ack(multiple=action.multiple)
                    else:
                        await action.message.reject(requeue=False)
        except (aio_pika.exceptions.AMQPError, ConnectionError, RuntimeError) as exc:
            self._event("warning", "if2_ack_failed", {"error": repr(exc)})
        finally:
            self._acking.discard(window)

    async def _import(self, message: AbstractIncomingMessage, window: AckWindow[AbstractIncomingMessage]) -> None:
        """Map, register, send to the BI (:meth:`_deliver`); ack once accepted, else reject without requeue."""
        if message.app_id == self.app_id:  # what we exported ourselves
            self._settle_if2(window, message, True)
            return
        taken = time.monotonic()
        expiration = message.properties.expiration
        try:
            ttl = int(expiration) if expiration is not None else None
            envelope = envelope_of(message.routing_key or "", ttl, message.headers)
            if envelope.key.message_type != message.exchange:
                raise If2KeyError(f"a {envelope.key.message_type} key on exchange {message.exchange} (IF2 6.2: "
                                  "the exchange is named after the message type)")
            properties = croads_properties(envelope, self.providers,
                                           self.config.area_radius_m.get(envelope.key.message_type, 0.0), self.areas)
            await self._register(envelope, properties)
        except (If2KeyError, ValueError, ActorApiError) as exc:
            self._refuse(message, window, Decision(Fate.REFUSE, str(exc)))
            return
        decision = await self._deliver(properties, message.body, envelope.ttl_ms, taken)
        if decision.fate is Fate.ACCEPTED:
            self.counts["imported"] += 1
            self._settle_if2(window, message, True)
        else:
            self._refuse(message, window, decision)

    async def _deliver(self, properties: dict[str, Any], body: bytes, ttl_ms: int | None, taken: float) -> Decision:
        """Send to the BI until it accepts, refuses for good, the attempts run out or the TTL does."""
        attempts = Attempts(self.retry, taken, ttl_ms)
        while True:
            now = time.monotonic()
            if (stop := attempts.before_send(now)) is not None:
                return stop
            outcome = await self.bi.send(_encode(properties, body, attempts.ttl_ms(now)))
            decision = attempts.after(outcome, time.monotonic())
            if decision.unanswered:
                self.counts["bi_unanswered"] += 1
            if decision.fate is not Fate.RETRY:
                return decision
            self.counts["bi_retried"] += 1
            await asyncio.sleep(decision.delay_s)

    def _refuse(self, message: AbstractIncomingMessage, window: AckWindow[AbstractIncomingMessage],
                decision: Decision) -> None:
        """Reject at RabbitMQ without requeue (a dead-letter exchange gets it), logged and counted."""
        self.counts[_REFUSAL_COUNTS[decision.fate]] += 1
        self._event("warning", _REFUSAL_EVENTS[decision.fate], {
            "routing_key": message.routing_key, "bytes": len(message.body), "error": decision.reason})
        self._settle_if2(window, message, False)

    async def _register(self, envelope: If2Envelope, properties: dict[str, Any]) -> None:
        """The capability of the message's provider, type and version, once (IP_077)."""
        pid = properties["publicationId"]
        self._last_import[pid] = time.monotonic()
        if pid in self._registered and self._delivery_known:
            return
        async with self._register_lock:
            if pid not in self._registered:
                coverage = next(p.coverage for p in self.config.providers if p.name == envelope.key.provider)
                if not any(envelope.key.tile.startswith(tile) for tile in coverage):
                    raise If2KeyError(f"tile {envelope.key.tile} is outside provider "
                                      f"{envelope.key.provider!r}'s coverage {coverage}")
                await self.api.add_capability(_capability(properties, coverage))
                self._registered.add(pid)
                self._event("info", "if2_capability_registered", {"publicationId": pid})
            if not self._delivery_known:
                self._use_delivery(await self.api.refresh_delivery(await self.api.delivery()))

    async def _withdraw_loop(self, idle_s: float) -> None:
        """Withdraw the capabilities whose IF2 messages stopped (checked a few times per ``idle_s``)."""
        while True:
            await asyncio.sleep(min(max(idle_s / 4, 0.05), 60.0))
            now = time.monotonic()
            if any(now - self._last_import.get(pid, now) > idle_s for pid in self._registered):
                try:
                    await self._withdraw_idle(idle_s)
                except ActorApiError as exc:  # the node is busy or restarting: next round
                    self._event("warning", "if2_capability_withdrawal_failed", {"error": str(exc)})

    async def _withdraw_idle(self, idle_s: float) -> None:
        async with self._register_lock:  # not while a message of it is being registered
            now = time.monotonic()
            idle = {pid for pid in self._registered if now - self._last_import.get(pid, now) > idle_s}
            ids = await self.api.capability_ids() if idle else {}
            for pid in sorted(idle):
                if pid in ids:
                    await self.api.remove_capability(ids[pid])
                self._registered.discard(pid)
                self._last_import.pop(pid, None)
                self.counts["capabilities_withdrawn"] += 1
                self._event("info", "if2_capability_withdrawn", {"publicationId": pid, "idle_s": idle_s})

    # ------------------------------------------------------------------ C-Roads -> IF2
    def _on_croads(self, raw: bytes, delivery: Any) -> None:
        receiver = self.bi.receiver
        assert receiver is not None
        task = asyncio.get_running_loop().create_task(self._export(raw, receiver, delivery))
        self._flows.add(task)
        task.add_done_callback(self._flows.discard)

    async def _export(self, raw: bytes, receiver: Any, delivery: Any) -> None:
        message = Message()
        try:
            message.decode(raw)
            ttl_ms = int(message.ttl * 1000) if message.ttl else None
            envelope = if2_envelope(message.properties or {}, self.providers, ttl_ms)
            if not isinstance(message.body, (bytes, memoryview)) or not message.inferred:
                raise If2KeyError("the body is not one data section (IF2 carries the encoded message as bytes)")
        except (If2KeyError, ValueError, TypeError) as exc:
            self.counts["export_refused"] += 1
            self._event("warning", "if2_export_refused", {"error": str(exc)})
            self.bi.settle(receiver, delivery, f"not mappable to IF2: {exc}")
            return
        body = bytes(message.body)
        properties: dict[str, Any] = dict(message.properties or {})
        identity = (str(envelope.key), properties.get("publicationId"))
        copy = (identity, hashlib.blake2b(body, digest_size=16).digest())
        if await self.copies.at_if2(copy) and not self.policy.holds(identity, body):
            # given out again after a lost settlement, and newer content went out since: IF2 has it
            self.counts["export_redelivered"] += 1
            self.bi.settle(receiver, delivery, None)
            return
        if not self.policy.offer(identity, body, envelope, ttl_ms, time.monotonic()):
            self.bi.settle(receiver, delivery, None)  # IF2 6.4 rule 1: nothing new for IF2
            return
        publishing = self.copies.publishing(copy)
        confirmed = await self._publish(envelope, body)
        if not confirmed:
            self.policy.failed(identity)
        settled = self.bi.settle(receiver, delivery, None if confirmed else RELEASE)  # released: sent again later
        self.copies.published(copy, publishing, confirmed)
        if confirmed:
            self.counts["exported"] += 1
            self.counts["export_unsettled"] += not settled

    async def _publish(self, envelope: If2Envelope, body: bytes) -> bool:
        """Publish to the envelope's exchange with a publisher confirm; False if it was not confirmed."""
        if not self._rabbit_up.is_set():  # (wait_for costs a task: not on every message)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10.0):
                    await self._rabbit_up.wait()
        exchange = self._exchanges.get(envelope.key.message_type)
        if exchange is None:
            return False
        expiration = timedelta(milliseconds=envelope.ttl_ms) if envelope.ttl_ms is not None else None
        out = aio_pika.Message(body, headers=_wire_headers(table4_headers(envelope)), expiration=expiration,
                               app_id=self.app_id,
                               delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT)
        try:
            await exchange.publish(out, routing_key=str(envelope.key), timeout=10)
        except (aio_pika.exceptions.AMQPError, ConnectionError, asyncio.TimeoutError, RuntimeError) as exc:
            self._event("warning", "if2_publish_failed", {"routing_key": str(envelope.key), "error": repr(exc)})
            return False
        return True

    async def _republish_loop(self) -> None:
        """IF2 6.4 rules 2 and 3 between copies from C-Roads (:meth:`RepublishPolicy.due`)."""
        while True:
            now = time.monotonic()
            for due in self.policy.due(now):
                envelope = due.payload
                again = If2Envelope(envelope.key, due.ttl_ms, envelope.lat, envelope.lon)
                if await self._publish(again, due.body):
                    self.counts["republished"] += 1
                else:
                    self.policy.failed(due.key)
            next_due = self.policy.next_due()
            await asyncio.sleep(1.0 if next_due is None else min(max(next_due - time.monotonic(), 0.05), 1.0))


def _wire_headers(headers: dict[str, Any]) -> dict[str, Any]:
    """lat/lon as AMQP decimals with 7 places (1 cm): pamqp, aio-pika's codec, would write a Python
    float as a 32-bit float (0.4 m steps at 51 N, enough to move a point into the next zoom-18 tile)."""
    return {k: Decimal(f"{v:.7f}") if isinstance(v, float) else v for k, v in headers.items()}


def _capability(properties: dict[str, Any], coverage: list[str]) -> Capability:
    """The capability of an IF2 provider's messages of one type and version (the actors' toolkit's,
    checked with the II's models), its quadTree the provider's coverage."""
    try:
        return build_capability(message_type=properties["messageType"], publisher_id=properties["publisherId"],
                                publication_id=properties["publicationId"],
                                protocol_version=properties["protocolVersion"],
                                originating_country=properties["originatingCountry"], area=Tiles(tuple(coverage)))
    except ActorError as exc:
        raise If2KeyError(f"capability: {exc}") from None


def _encode(properties: dict[str, Any], body: bytes, ttl_ms: int | None) -> bytes:
    """An AMQP 1.0 message for the BI: the body as one data section, byte for byte (IP_014/015)."""
    message = Message(body=bytes(body), properties=properties, inferred=True)
    if ttl_ms is not None:
        message.ttl = ttl_ms / 1000.0
    return message.encode()

