"""What the HTTPS surface calls (the door of :mod:`ii_api.http`).

Each handler of :class:`~ii_api.http.server.IIServer` checks the caller and the body, then makes
one call through :class:`IIOperations`; in a node that is :class:`ii_api.node.service.IIService`,
and the calls land on the objects of :mod:`ii_api.resources` that own each resource:

* ``incoming`` (:class:`IncomingOperations`): :class:`~ii_api.resources.incoming.IncomingSubscriptions`;
* ``actor_capabilities`` (:class:`ActorCapabilityOperations`):
  :class:`~ii_api.resources.local_actors.ActorCapabilities`;
* ``deliveries`` (:class:`DeliveryOperations`): :class:`~ii_api.resources.local_actors.ActorDeliveries`;
* ``actor_subscriptions`` (:class:`ActorSubscriptionOperations`):
  :class:`~ii_api.resources.local_actors.ActorSubscriptions`;
* ``receive_capabilities``: the service stores them and carries them on
  (:meth:`Propagation.neighbour_capabilities_changed
  <ii_api.node.propagation.Propagation.neighbour_capabilities_changed>`).
"""
from __future__ import annotations

from typing import Protocol

from ii_api.settings.config import IIConfig
from ii_api.wire.models import (
    CapabilitiesMessage,
    DeliveriesRequest,
    DeliveriesResponse,
    Delivery,
    LocalCapabilitiesRequest,
    LocalCapabilitiesResponse,
    LocalCapability,
    LocalSubscription,
    LocalSubscriptionsRequest,
    LocalSubscriptionsResponse,
    NetworkCapabilitiesResponse,
    SubscriptionPollResponse,
    SubscriptionRequest,
    SubscriptionResponse,
)

__all__ = ["ActorCapabilityOperations", "ActorSubscriptionOperations", "DeliveryOperations", "IIOperations",
           "IncomingOperations"]


class IncomingOperations(Protocol):
    """A neighbour's subscriptions here (IP_078/097/107/108)."""

    async def receive_subscriptions(self, cn: str, request: SubscriptionRequest) -> SubscriptionResponse: ...

    async def list_incoming(self, cn: str) -> SubscriptionResponse: ...

    async def get_incoming(self, cn: str, sub_id: int) -> SubscriptionPollResponse: ...

    async def delete_incoming(self, cn: str, sub_id: int) -> None: ...


class ActorCapabilityOperations(Protocol):
    """An actor's capabilities (IP_077)."""

    async def add_capabilities(self, actor: str, request: LocalCapabilitiesRequest) -> LocalCapabilitiesResponse: ...

    async def list_capabilities(self, actor: str) -> LocalCapabilitiesResponse: ...

    async def get_capability(self, actor: str, cap_id: int) -> LocalCapability: ...

    async def delete_capability(self, actor: str, cap_id: int) -> None: ...


class DeliveryOperations(Protocol):
    """An actor's deliveries (where it publishes)."""

    async def add_deliveries(self, actor: str, request: DeliveriesRequest) -> DeliveriesResponse: ...

    async def list_deliveries(self, actor: str) -> DeliveriesResponse: ...

    async def get_delivery(self, actor: str, delivery_id: int) -> Delivery: ...

    async def delete_delivery(self, actor: str, delivery_id: int) -> None: ...


class ActorSubscriptionOperations(Protocol):
    """An actor's subscriptions (IP_079)."""

    async def add_local_subscriptions(self, actor: str,
                                      request: LocalSubscriptionsRequest) -> LocalSubscriptionsResponse: ...

    async def list_local_subscriptions(self, actor: str) -> LocalSubscriptionsResponse: ...

    async def get_local_subscription(self, actor: str, sub_id: int) -> LocalSubscription: ...

    async def delete_local_subscription(self, actor: str, sub_id: int) -> None: ...


class IIOperations(Protocol):
    """Everything the handlers call: :class:`ii_api.node.service.IIService`."""

    @property
    def name(self) -> str:
        """This interchange's name (the DNS SRV target of its node)."""

    @property
    def config(self) -> IIConfig: ...

    @property
    def base(self) -> str:
        """The II's base path ('' or '/a/b')."""

    @property
    def incoming(self) -> IncomingOperations: ...

    @property
    def actor_capabilities(self) -> ActorCapabilityOperations: ...

    @property
    def deliveries(self) -> DeliveryOperations: ...

    @property
    def actor_subscriptions(self) -> ActorSubscriptionOperations: ...

    def is_neighbour(self, cn: str) -> bool:
        """IP_126: whether ``cn`` is the target of a discovered SRV record."""

    def require_neighbour(self, cn: str, body_name: str | None = None) -> str:
        """The neighbour's name for a request by ``cn``; Forbidden (IP_126) otherwise."""

    async def receive_capabilities(self, cn: str, message: CapabilitiesMessage) -> CapabilitiesMessage:
        """IP_076/094: replace the neighbour's capabilities; answer with ours."""

    async def network_capabilities(self, actor: str, selector: str | None) -> NetworkCapabilitiesResponse:
        """Capabilities anywhere in the federation that ``selector`` matches."""

    def event(self, level: str, kind: str, fields: dict) -> None:
        """An event for the node's JSON log."""
