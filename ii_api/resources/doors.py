"""The doors of the II's resources: what their objects are given (the door of :mod:`ii_api.resources`).

One object owns each resource (its memory state and its rows in the store); none imports another's
module or the service. What one object reads of another, what it reaches of the data plane
(:class:`AddressBookDoor`, :class:`ImportSink`: the II never reaches past them), whom it tells of a
change (the events, to :class:`ii_api.node.propagation.Propagation`, the lock held unless said) and
what it needs made are all given to it at construction, each as one of the Protocols below; each
names what satisfies it in a node. The table of objects and their doors: docs/architecture.md
("Control plane").
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Protocol

from ii_api.decisions.subscriptions import LocalSubscriptionView, OutgoingKey
from ii_api.peers.discovery import Neighbour
from ii_api.peers.doors import LinkDown, MessageSink
from ii_api.peers.federation import Federation
from ii_api.wire.models import CapabilitiesMessage, Capability
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.engine import StoreReceipt

__all__ = ["AddressBookDoor", "CapabilitiesAnswered", "CapabilitiesChanged", "CapabilitiesFor", "CapabilityList",
           "DepartureExpired", "EventSink", "FederationFactory", "HopLimits", "ImportSink", "IncomingChanged",
           "LocalCapabilityView", "LocalSubscriptionsChanged", "NeighbourCapabilityView", "NeighbourDirectory",
           "Offers", "Planner", "PublicationIds", "ServedChanged", "SourcesOf", "Spawn", "WantedSubscriptions"]

EventSink = Callable[[str, str, dict], None]
"""``(level, kind, fields)``: an II event for the node's JSON log (:meth:`IIService.event
<ii_api.node.service.IIService.event>`)."""


# ---------------------------------------------------------------------------------- the data plane
class AddressBookDoor(Protocol):
    """The data plane's addresses, as the II changes them."""

    def target(self, address: str) -> TargetSpec | None: ...

    def source(self, address: str) -> SourceSpec | None: ...

    def put_target(self, spec: TargetSpec) -> None: ...

    def put_source(self, spec: SourceSpec) -> None: ...

    def remove(self, address: str) -> None: ...


class ImportSink(Protocol):
    """The data plane's entry for imported messages, optionally offered to some sources only."""

    def publish_imported(self, raw: bytes, neighbour: str,
                         only: Iterable[str] | None = None) -> StoreReceipt | None: ...


# ---------------------------------------------------------------------------------- views (reads)
class NeighbourDirectory(Protocol):
    """The neighbours discovery found (IP_089), the only interchanges the II talks to (IP_126)."""

    def neighbour(self, name: str) -> Neighbour | None: ...

    def require(self, cn: str, body_name: str | None = None) -> str: ...

    def endpoint_address(self, neighbour: str, host: str | None) -> str: ...


class LocalCapabilityView(Protocol):
    """Our capabilities: exactly those our local actors registered (IP_077/109)."""

    def all(self) -> list[Capability]: ...

    def of_actor(self, actor: str) -> list[Capability]: ...


class NeighbourCapabilityView(Protocol):
    """The capabilities each neighbour announced (IP_076)."""

    def by_neighbour(self) -> Mapping[str, list[Capability]]: ...


class PublicationIds(Protocol):
    """publicationId -> the neighbour announcing it (IP_077: a publicationId is unique in the
    network): :meth:`NeighbourCapabilities.publication_ids
    <ii_api.resources.neighbours.NeighbourCapabilities.publication_ids>`."""

    def __call__(self) -> Mapping[str, str]: ...


class HopLimits(Protocol):
    """The neighbours that announced multi-hop federation, with their hop limits:
    :meth:`NeighbourCapabilities.multihop <ii_api.resources.neighbours.NeighbourCapabilities.multihop>`."""

    def __call__(self) -> Mapping[str, int]: ...


class CapabilityList(Protocol):
    """Our own capabilities (IP_077/109): :meth:`IIService.local_capabilities
    <ii_api.node.service.IIService.local_capabilities>`."""

    def __call__(self) -> list[Capability]: ...


class Offers(Protocol):
    """The capabilities of the neighbours discovered now, by neighbour:
    :meth:`IIService.current_offers <ii_api.node.service.IIService.current_offers>`."""

    def __call__(self) -> Mapping[str, Sequence[Capability]]: ...


class WantedSubscriptions(Protocol):
    """What to request from neighbours: the actors' subscriptions with a source, and with multi-hop
    federation what neighbours' subscriptions here want re-exported: :meth:`IIService.wanted
    <ii_api.node.service.IIService.wanted>`."""

    def __call__(self) -> list[LocalSubscriptionView]: ...


class SourcesOf(Protocol):
    """The local source addresses of these wants (where what a neighbour sends them goes):
    :meth:`IIService.sources <ii_api.node.service.IIService.sources>`."""

    def __call__(self, want_ids: Iterable[int], /) -> list[str]: ...


class CapabilitiesFor(Protocol):
    """Our capabilities message for one neighbour (with what we re-export to it):
    :meth:`IIService.capabilities_message <ii_api.node.service.IIService.capabilities_message>`."""

    def __call__(self, neighbour: str, /) -> CapabilitiesMessage: ...


# ---------------------------------------------------------------------------------- events (tells)
class CapabilitiesChanged(Protocol):
    """An actor's capabilities were added or removed (lock held):
    :meth:`Propagation.local_capabilities_changed
    <ii_api.node.propagation.Propagation.local_capabilities_changed>` rebuilds the deliveries they
    touch, turns neighbours' subscriptions they could widen RESUBSCRIBE and wakes the pushers."""

    async def __call__(self, actor: str, added: list[Capability], removed: list[Capability], /) -> None: ...


class LocalSubscriptionsChanged(Protocol):
    """An actor's subscription came or went (lock held): :meth:`Propagation.local_subscriptions_changed
    <ii_api.node.propagation.Propagation.local_subscriptions_changed>` re-plans the subscriptions at
    neighbours."""

    async def __call__(self) -> None: ...


class IncomingChanged(Protocol):
    """A neighbour's subscription here came or went (lock held): :meth:`Propagation.incoming_changed
    <ii_api.node.propagation.Propagation.incoming_changed>` re-plans what is re-exported (multi-hop)."""

    async def __call__(self) -> None: ...


class ServedChanged(Protocol):
    """Subscriptions at neighbours changed state; these wants (local subscription ids) are served by
    them (lock held): :meth:`Propagation.outgoing_changed
    <ii_api.node.propagation.Propagation.outgoing_changed>` recomputes their status and endpoints."""

    async def __call__(self, want_ids: Iterable[int], /) -> None: ...


class CapabilitiesAnswered(Protocol):
    """A neighbour answered our capabilities push with its own (lock not held):
    :meth:`Propagation.capabilities_answered <ii_api.node.propagation.Propagation.capabilities_answered>`
    records them as if the neighbour had POSTed them."""

    async def __call__(self, neighbour: str, message: CapabilitiesMessage, /) -> None: ...


class DepartureExpired(Protocol):
    """A neighbour that left DNS stayed away for the grace period (lock held):
    :meth:`Propagation.departure_expired <ii_api.node.propagation.Propagation.departure_expired>`
    expires its subscriptions here."""

    async def __call__(self, neighbour: str, /) -> None: ...


# ---------------------------------------------------------------------------------- what is made
class FederationFactory(Protocol):
    """A new :class:`~ii_api.peers.federation.Federation` whose links hand their messages to
    ``sink`` and tell ``on_down`` when one is refused or lost:
    :meth:`IIService.federation <ii_api.node.service.IIService.federation>`."""

    def __call__(self, sink: MessageSink, on_down: LinkDown, /) -> Federation: ...


class Planner(Protocol):
    """Which subscriptions to request where, and which wants each serves:
    :func:`~ii_api.decisions.subscriptions.desired_outgoing`, or its multi-hop form over the
    shortest routes, :func:`~ii_api.decisions.multihop.desired_routes`."""

    def __call__(self, wanted: Iterable[LocalSubscriptionView], offered: Mapping[str, Sequence[Capability]],
                 /) -> dict[OutgoingKey, frozenset[int]]: ...


class Spawn(Protocol):
    """Run a background task owned by the service (cancelled when it closes):
    :meth:`IIService.spawn <ii_api.node.service.IIService.spawn>`."""

    def __call__(self, coro: Coroutine[Any, Any, Any], name: str, /) -> asyncio.Task[Any]: ...
