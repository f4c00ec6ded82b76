"""The bridge as a client of the node's local actor API (IP_068/077/079), over HTTPS with its own
client certificate: it registers capabilities for what arrives from IF2, asks where to publish
(a delivery) and subscribes to what goes to IF2. Bodies are the II's pydantic models."""
from __future__ import annotations

import asyncio
import ssl
from typing import Any, TypeVar

import aiohttp
from pydantic import ValidationError

from ii_api.wire.models import (
    Capability,
    DeliveriesRequest,
    DeliveriesResponse,
    Delivery,
    DeliveryRequestItem,
    LocalCapabilitiesRequest,
    LocalCapabilitiesResponse,
    LocalSubscription,
    LocalSubscriptionsRequest,
    LocalSubscriptionsResponse,
    SubscriptionRequestItem,
    WireModel,
)

__all__ = ["ActorApi", "ActorApiError", "DELIVERY_SELECTOR"]

#: The bridge's one delivery covers all its capabilities.
DELIVERY_SELECTOR = "TRUE"
M = TypeVar("M", bound=WireModel)


class ActorApiError(Exception):
    """The local actor API refused a request or could not be reached."""


class ActorApi:
    def __init__(self, base_url: str, actor: str, context: ssl.SSLContext, server_name: str,
                 timeout_s: float = 10.0) -> None:
        self.base = base_url.rstrip("/") + "/" + actor
        self.actor = actor
        self._ssl = context
        self._server_name = server_name
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))

    async def close(self) -> None:
        await self._session.close()

    async def _call(self, method: str, path: str, model: type[M] | None, body: WireModel | None = None) -> M | None:
        kwargs: dict[str, Any] = {"ssl": self._ssl, "server_hostname": self._server_name}
        if body is not None:
            kwargs["json"] = body.to_json()
        try:
            async with self._session.request(method, self.base + path, **kwargs) as response:
                data = await response.read()
                if response.status >= 300:
                    raise ActorApiError(f"{method} {path}: HTTP {response.status} {data[:300]!r}")
                return model.model_validate_json(data) if model is not None else None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValidationError) as exc:
            raise ActorApiError(f"{method} {path}: {exc}") from None

    async def publication_ids(self) -> set[str]:
        return set(await self.capability_ids())

    async def capability_ids(self) -> dict[str, str]:
        """publicationId -> the capability's id at the node, for every capability of the bridge."""
        answer = await self._call("GET", "/capabilities", LocalCapabilitiesResponse)
        assert answer is not None
        return {str(c.definition.application.publicationId): c.id for c in answer.capabilities}

    async def remove_capability(self, capability_id: str) -> None:
        await self._call("DELETE", f"/capabilities/{capability_id}", None)

    async def add_capability(self, capability: Capability) -> None:
        await self._call("POST", "/capabilities", LocalCapabilitiesResponse,
                         LocalCapabilitiesRequest(name=self.actor, capabilities=[capability]))

    async def delivery(self) -> Delivery:
        """The bridge's delivery (made once, reused after restarts), as it is now."""
        listed = await self._call("GET", "/deliveries", DeliveriesResponse)
        assert listed is not None
        for delivery in listed.deliveries:
            if delivery.selector == DELIVERY_SELECTOR:
                return delivery
        made = await self._call("POST", "/deliveries", DeliveriesResponse,
                                DeliveriesRequest(name=self.actor,
                                                  deliveries=[DeliveryRequestItem(selector=DELIVERY_SELECTOR)]))
        assert made is not None
        return made.deliveries[0]

    async def refresh_delivery(self, delivery: Delivery) -> Delivery:
        answer = await self._call("GET", f"/deliveries/{delivery.id}", Delivery)
        assert answer is not None
        return answer

    async def subscription(self, selector: str) -> LocalSubscription:
        """The bridge's subscription with ``selector``; its others (an old export selector) are deleted."""
        listed = await self._call("GET", "/subscriptions", LocalSubscriptionsResponse)
        assert listed is not None
        found = None
        for subscription in listed.subscriptions:
            if subscription.selector == selector and found is None:
                found = subscription
            else:
                await self._call("DELETE", f"/subscriptions/{subscription.id}", None)
        if found is not None:
            return found
        made = await self._call("POST", "/subscriptions", LocalSubscriptionsResponse,
                                LocalSubscriptionsRequest(name=self.actor,
                                                          subscriptions=[SubscriptionRequestItem(selector=selector)]))
        assert made is not None
        return made.subscriptions[0]
