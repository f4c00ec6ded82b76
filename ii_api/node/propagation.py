"""What a change in one of the II's objects means for the others, carried at once (no polling loop).

Each object of :mod:`ii_api.resources` reports its changes through the event it was given at
construction (the Protocols of :mod:`ii_api.resources.doors`, and discovery's
:class:`~ii_api.peers.doors.DiscoveryListener`); in a node each of those is a method of
:class:`Propagation`, which tells the objects concerned. The events come with the service's lock
held, except ``CapabilitiesAnswered`` and ``DiscoveryListener``, which take it. What follows each
event: docs/improved-interface.md ("Propagation").
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from ii_api.peers.discovery import DiscoveryResult
from ii_api.resources.departures import NeighbourDepartures
from ii_api.resources.doors import EventSink
from ii_api.resources.incoming import IncomingSubscriptions
from ii_api.resources.local_actors import ActorDeliveries, ActorSubscriptions
from ii_api.resources.neighbours import NeighbourCapabilities, Neighbours
from ii_api.resources.outgoing import OutgoingSubscriptions
from ii_api.resources.pushes import CapabilityPushes
from ii_api.resources.reexport import Reexport
from ii_api.storage.store import AsyncStore
from ii_api.wire.models import CapabilitiesMessage, Capability

__all__ = ["Objects", "Propagation"]


class Objects(Protocol):
    """The objects a change reaches (:class:`~ii_api.node.service.IIService` composes them)."""

    closed: bool
    neighbours_dir: Neighbours
    neighbour_caps: NeighbourCapabilities
    departures: NeighbourDepartures
    incoming: IncomingSubscriptions
    outgoing: OutgoingSubscriptions
    deliveries: ActorDeliveries
    actor_subscriptions: ActorSubscriptions
    pushes: CapabilityPushes
    reexport: Reexport


class Propagation:
    """The events between the II's objects (see the module docstring)."""

    def __init__(self, objects: Objects, *, store: AsyncStore, lock: asyncio.Lock, event: EventSink) -> None:
        self._o = objects  #: read when an event comes: the objects are made after this, given its methods
        self._store = store
        self._lock = lock
        self._event = event

    # ------------------------------------------------------------------ local actors
    async def local_capabilities_changed(self, actor: str, added: list[Capability], removed: list[Capability]) -> None:
        """Deliveries covering the capabilities added or removed rebuilt, RESUBSCRIBE checks against
        those added only (a removal never widens a grant), neighbours told (IP_075/091). Lock held."""
        o = self._o
        await o.deliveries.apply(actor, added, removed)
        if added:
            await o.incoming.recheck(added)
        o.pushes.wake_all()

    async def local_subscriptions_changed(self) -> None:
        """Subscriptions at neighbours re-planned (lock held)."""
        await self._o.outgoing.reconcile()

    async def outgoing_changed(self, want_ids: Iterable[int]) -> None:
        """The local subscriptions served by changed subscriptions at neighbours: recomputed (lock held)."""
        await self._o.actor_subscriptions.refresh(want_ids, self._o.outgoing.views())

    # ------------------------------------------------------------------ neighbours
    async def neighbour_capabilities_changed(self, name: str, message: CapabilitiesMessage) -> None:
        """A neighbour's capabilities (its POST, or its answer to ours): stored, subscriptions at
        neighbours re-planned, and those at that neighbour polled now (RESUBSCRIBE). Lock held."""
        o = self._o
        await o.neighbour_caps.put(name, message)
        self._event("info", "ii_capabilities_received", {"neighbour": name, "count": len(message.capabilities)})
        await o.outgoing.reconcile()
        o.outgoing.nudge(name)
        await self.offers_changed()

    async def capabilities_answered(self, name: str, message: CapabilitiesMessage) -> None:
        """A neighbour's answer to our capabilities push, recorded if it is still a neighbour."""
        async with self._lock:
            if name in self._o.neighbours_dir:
                await self.neighbour_capabilities_changed(name, message)

    async def offers_changed(self) -> None:
        """Multi-hop federation: what we re-export changed with neighbours' capabilities; those who
        would now get another capabilities message are told (only they: no endless exchange)."""
        o = self._o
        if not o.reexport.enabled:
            return
        await self.incoming_changed()
        for neighbour in o.reexport.stale(o.neighbours_dir.names()):
            o.pushes.wake(neighbour)

    async def incoming_changed(self) -> None:
        """Neighbours' subscriptions here came or went: what they want re-exported re-planned (lock held)."""
        o = self._o
        if o.reexport.enabled:
            o.reexport.refresh(await self._store.incoming.list())
            await o.outgoing.reconcile()

    async def departure_expired(self, name: str) -> None:
        """A departed neighbour's grace period is over; unless it is back, its subscriptions go (lock held)."""
        if self._o.neighbours_dir.neighbour(name) is None:
            await self._o.incoming.expire(name)

    # ------------------------------------------------------------------ discovery (IP_073/089)
    async def discovered(self, result: DiscoveryResult) -> None:
        """IP_089/126: the neighbour set follows DNS. A neighbour gone is refused from now on, its
        capabilities forgotten, our subscriptions at it withdrawn (re-plan), and its subscriptions
        here expire after the grace period (:mod:`ii_api.resources.departures`)."""
        o = self._o
        if o.closed:
            return
        async with self._lock:
            update = o.neighbours_dir.plan(result)
            gone, changed = update.gone, update.changed
            await o.departures.left(gone)  # recorded before the set changes: one is gone or departed
            await o.neighbours_dir.apply(update)
            for name in gone:
                o.neighbour_caps.forget(name)
                o.reexport.forget(name)
                o.pushes.stop(name)
            o.departures.returned(o.neighbours_dir.names())
            for name in sorted(changed):
                o.pushes.wake(name)
            if gone or changed:
                self._event("info", "ii_neighbours_changed", {"neighbours": o.neighbours_dir.names(),
                                                              "gone": sorted(gone), "new_or_moved": sorted(changed)})
                await o.outgoing.reconcile()
                await self.offers_changed()
        for error in result.errors:
            self._event("warning", "ii_discovery_problem", {"error": error})
