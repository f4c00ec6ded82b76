"""One C-ITS actor at one interchange: the local actor API and the Basic Interface together.

    async with Actor(load_settings(Path("actor.toml"))) as actor:
        delivery = await actor.create_delivery("publisherId = 'NL00001'")
        outcome = await actor.publish(OutgoingMessage.build(message_properties(...), b"..."), delivery)
        async for message in await actor.listen(await actor.subscribe("messageType = 'DENM'")):
            message.accept()

Selectors are checked with the broker's parser before they are sent; a delivery or subscription
not CREATED raises an ActorError with the node's reason; AMQPS connections open when first needed.
:meth:`Actor.repeat` publishes again every interval (IP_048; TTL = interval x 1.2, IP_033).
docs/actors.md ("The library").
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import jms_selectors
from ii_api.wire.models import Delivery, LocalEndpoint, LocalSubscription
from interchange.actor.amqp import BiConnection, Listener, PublishOutcome, Publisher
from interchange.actor.api import ActorApi
from interchange.actor.errors import ActorError
from interchange.actor.properties import OutgoingMessage
from interchange.actor.selectors import Overlap, check_selector, overlap
from interchange.actor.settings import ActorSettings

__all__ = ["Actor", "EVERYTHING"]

#: A delivery covering all the actor's capabilities.
EVERYTHING = "TRUE"


def _created(kind: str, item: Delivery | LocalSubscription) -> None:
    if item.status.value != "CREATED":
        raise ActorError(f"{kind} {item.id} ({item.selector!r}) is {item.status.value}: "
                         f"{item.errorMessage or 'no reason given'}",
                         "register capabilities the selector covers" if item.status.value == "NO_OVERLAP" else None)


class Actor:
    """An actor's client of one interchange (see the module docstring)."""

    def __init__(self, settings: ActorSettings, *, container_id: str | None = None) -> None:
        self.settings = settings
        self.api = ActorApi(settings)
        self.cn = self.api.cn
        self._container = container_id or f"actor-{self.cn}"
        self._connections: dict[tuple[str, int], BiConnection] = {}
        self._publishers: dict[str, Publisher] = {}

    async def __aenter__(self) -> Actor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()
        self._publishers.clear()
        await self.api.close()

    # ---- selectors
    @staticmethod
    def parse(selector: str) -> None:
        """Refuse a selector the node would answer NOT_VALID, with its words."""
        problem = check_selector(selector)
        if problem is not None:
            raise ActorError(problem.message, "the node would answer NOT_VALID: fix the selector there")

    async def check_selector(self, selector: str, *, against: str = "network") -> Overlap:
        """Parse, then match against the capabilities of the federation (``network``) or the
        actor's own (``mine``, what a delivery covers)."""
        self.parse(selector)
        if against == "mine":
            capabilities = [c.definition for c in await self.api.capabilities()]
        else:
            capabilities = await self.api.network_capabilities()
        return overlap(selector, capabilities)

    # ---- deliveries
    async def create_delivery(self, selector: str = EVERYTHING, *, timeout_s: float = 30.0,
                              on_change: Callable[[Delivery], None] | None = None) -> Delivery:
        """A delivery, CREATED (else an ActorError with the node's reason)."""
        self.parse(selector)
        delivery = await self.api.wait_delivery(await self.api.create_delivery(selector), timeout_s=timeout_s,
                                                on_change=on_change)
        _created("delivery", delivery)
        return delivery

    async def delivery_for(self, properties: Mapping[str, Any]) -> Delivery:
        """The first CREATED delivery whose selector these properties satisfy, else a new one
        covering all the actor's capabilities."""
        for delivery in await self.api.deliveries():
            if delivery.status.value == "CREATED" and delivery.endpoints and \
                    jms_selectors.compile(delivery.selector).matches(properties):
                return delivery
        return await self.create_delivery(EVERYTHING)

    async def _connection(self, host: str, port: int) -> BiConnection:
        connection = self._connections.get((host, port))
        if connection is None or connection.lost:
            connection = await BiConnection.open(host, port, self.settings.ssl_context(), self.settings.node,
                                                 self._container, self.settings.timeout_s)
            self._connections[(host, port)] = connection
        return connection

    async def publisher(self, delivery: Delivery) -> Publisher:
        """A sender link to the delivery's target (reused while its connection lives)."""
        if not delivery.endpoints:
            raise ActorError(f"delivery {delivery.id} is {delivery.status.value} and has no endpoint",
                             delivery.errorMessage or None)
        endpoint = delivery.endpoints[0]
        publisher = self._publishers.get(endpoint.target)
        if publisher is None or publisher.bi.lost:
            connection = await self._connection(endpoint.host, endpoint.port)
            publisher = self._publishers[endpoint.target] = connection.publisher(endpoint.target)
        return publisher

    async def publish(self, message: OutgoingMessage, delivery: Delivery | None = None) -> PublishOutcome:
        """Publish one message through ``delivery`` (default: :meth:`delivery_for` its properties);
        the broker's outcome."""
        delivery = delivery or await self.delivery_for(message.properties)
        return await (await self.publisher(delivery)).publish(message)

    async def repeat(self, message: OutgoingMessage, every_s: float, *, times: int | None = None,
                     delivery: Delivery | None = None,
                     on_outcome: Callable[[int, PublishOutcome], None] | None = None) -> list[PublishOutcome]:
        """Publish ``message`` now and again every ``every_s`` (IP_048), ``times`` times in all (None:
        until cancelled); stops at the first outcome that is not accepted."""
        if every_s <= 0:
            raise ActorError(f"a repetition interval of {every_s:g} s", "give a positive number of seconds")
        delivery = delivery or await self.delivery_for(message.properties)
        outcomes: list[PublishOutcome] = []
        start = time.monotonic()
        while times is None or len(outcomes) < times:
            if outcomes:  # on a fixed schedule: a slow answer does not push the next copy later
                await asyncio.sleep(max(0.0, start + len(outcomes) * every_s - time.monotonic()))
            outcome = await self.publish(message, delivery)
            outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(len(outcomes), outcome)
            if not outcome.accepted:
                break
        return outcomes

    # ---- subscriptions
    async def subscribe(self, selector: str, *, redirect: bool = False, timeout_s: float = 30.0,
                        on_change: Callable[[LocalSubscription], None] | None = None) -> LocalSubscription:
        """A subscription, CREATED (else an ActorError with the node's reason)."""
        self.parse(selector)
        subscription = await self.api.wait_subscription(
            await self.api.create_subscription(selector, redirect=redirect), timeout_s=timeout_s, on_change=on_change)
        _created("subscription", subscription)
        return subscription

    async def listen(self, source: LocalSubscription | LocalEndpoint, *, credit: int = 100,
                     selector: str | None = None) -> Listener:
        """An async iterator over the messages of a subscription's (first) endpoint or of a source."""
        if isinstance(source, LocalSubscription):
            if not source.endpoints:
                raise ActorError(f"subscription {source.id} is {source.status.value} and has no endpoint",
                                 source.errorMessage or "wait until it is CREATED")
            source = source.endpoints[0]
        if selector is not None:
            self.parse(selector)
        connection = await self._connection(source.host, source.port)
        return connection.listener(source.source, credit=credit, selector=selector)
