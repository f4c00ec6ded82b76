"""The bridge as a client of the node's local actor API (IP_068/077/079), over HTTPS with its own certificate.

It registers capabilities for what arrives from IF2, keeps one delivery for all of them (reused
after restarts) and one subscription for what goes to IF2 (its older ones deleted), through the
actors' toolkit (:class:`interchange.actor.api.ActorApi`). The toolkit's
:class:`~interchange.actor.errors.ActorError` becomes :class:`ActorApiError`, which the bridge
treats as "the node refused or could not be reached". Details: docs/if2-bridge.md.
"""
from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from interchange.actor.api import ActorApi as ToolkitApi
from interchange.actor.errors import ActorError
from interchange.actor.settings import ActorSettings
from ii_api.wire.models import Capability, Delivery, LocalSubscription

__all__ = ["ActorApi", "ActorApiError", "DELIVERY_SELECTOR"]

#: The bridge's one delivery covers all its capabilities.
DELIVERY_SELECTOR = "TRUE"
T = TypeVar("T")


class ActorApiError(Exception):
    """The local actor API refused a request or could not be reached."""


async def _call(request: Awaitable[T]) -> T:
    try:
        return await request
    except ActorError as exc:
        raise ActorApiError(str(exc)) from None


class ActorApi:
    def __init__(self, base_url: str, node: str, cert_chain: Path, key: Path, trust_bundle: Path,
                 timeout_s: float = 10.0) -> None:
        self._api = ToolkitApi(ActorSettings(node=node, ii_url=base_url, cert_chain=cert_chain, key=key,
                                             trust_bundle=trust_bundle, timeout_s=timeout_s))

    async def close(self) -> None:
        await self._api.close()

    async def publication_ids(self) -> set[str]:
        return set(await self.capability_ids())

    async def capability_ids(self) -> dict[str, str]:
        """publicationId -> the capability's id at the node, for every capability of the bridge."""
        return {str(c.definition.application.publicationId): c.id for c in await _call(self._api.capabilities())}

    async def remove_capability(self, capability_id: str) -> None:
        await _call(self._api.delete_capability(capability_id))

    async def add_capability(self, capability: Capability) -> None:
        await _call(self._api.add_capabilities([capability]))

    async def delivery(self) -> Delivery:
        """The bridge's delivery (made once, reused after restarts), as it is now."""
        for delivery in await _call(self._api.deliveries()):
            if delivery.selector == DELIVERY_SELECTOR:
                return delivery
        return await _call(self._api.create_delivery(DELIVERY_SELECTOR))

    async def refresh_delivery(self, delivery: Delivery) -> Delivery:
        return await _call(self._api.delivery(delivery.id))

    async def subscription(self, selector: str) -> LocalSubscription:
        """The bridge's subscription with ``selector``; its others (an old export selector) are deleted."""
        found = None
        for subscription in await _call(self._api.subscriptions()):
            if subscription.selector == selector and found is None:
                found = subscription
            else:
                await _call(self._api.delete_subscription(subscription.id))
        if found is not None:
            return found
        return await _call(self._api.create_subscription(selector))
