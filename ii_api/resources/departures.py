"""Neighbours that left DNS: their subscriptions here expire after a grace period (IP_074/089/126).

The profile ties the II to DNS (IP_126, IP_074, IP_089) but says nothing of the subscriptions of an
interchange that drops out. This interchange refuses it at once and withdraws ours at it
(:meth:`Propagation.discovered <ii_api.node.propagation.Propagation.discovered>`), but keeps its
subscriptions here, broker sources included, for ``ii.neighbour_grace_s``, then deletes them (it
can no longer poll or delete them); found again in time, nothing is lost. The departure time is
stored, so a restart neither restarts nor skips the grace period. Why and what else happens:
docs/improved-interface.md ("Neighbours that leave DNS").
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ii_api.peers.discovery import departure_delay_s
from ii_api.resources.doors import DepartureExpired, EventSink, Spawn
from ii_api.storage.store import AsyncStore
from interchange.ground.timing import now_ms


class NeighbourDepartures:
    """One timer per departed neighbour (the departures are stored); when it fires, ``expired(name)``."""

    def __init__(self, *, grace_s: float, store: AsyncStore, spawn: Spawn, lock: asyncio.Lock, event: EventSink,
                 expired: DepartureExpired) -> None:
        self._grace_s = grace_s
        self._store = store
        self._spawn = spawn
        self._lock = lock
        self._event = event
        self._expired = expired
        self._timers: dict[str, asyncio.Task[None]] = {}

    def pending(self) -> dict[str, asyncio.Task[None]]:
        """The departed neighbours whose subscriptions have not expired yet (operators, tests)."""
        return dict(self._timers)

    async def left(self, names: Iterable[str]) -> None:
        """Neighbours DNS no longer lists: departure recorded, expiry scheduled (caller holds the lock)."""
        for name in sorted(names):
            departed_ms = await self._record(name)
            self._schedule(name, departed_ms)
            self._event("info", "ii_neighbour_departed", {"neighbour": name, "grace_s": self._grace_s})

    def returned(self, names: Iterable[str]) -> None:
        """Neighbours found again in time: their subscriptions stay (the store forgot the departure
        when it recorded them)."""
        for name in names:
            timer = self._timers.pop(name, None)
            if timer is not None:
                timer.cancel()
                self._event("info", "ii_neighbour_returned", {"neighbour": name})

    async def restore(self, owners: Iterable[str], neighbours: Iterable[str]) -> None:
        """Departures survive a restart. ``owners`` of stored subscriptions that are neither
        ``neighbours`` nor departed (a database from before departures were recorded) depart now
        (caller holds the lock)."""
        departures = await self._store.call(lambda s: s.neighbours.departures())
        for name in sorted(set(owners) - set(departures) - set(neighbours)):
            departures[name] = await self._record(name)
        for name, departed_ms in sorted(departures.items()):
            self._schedule(name, departed_ms)

    async def _record(self, name: str) -> int:
        """The neighbour left: forgotten in the store, its departure time kept (the first one)."""
        return await self._store.call(lambda s: s.neighbours.record_departure(name))

    def _schedule(self, name: str, departed_ms: int) -> None:
        if name not in self._timers:  # an earlier departure is kept, and so its timer
            delay = departure_delay_s(departed_ms, self._grace_s, now_ms())
            self._timers[name] = self._spawn(self._expire_after(name, delay), f"ii-departure-{name}")

    async def _expire_after(self, name: str, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        async with self._lock:
            if self._timers.get(name) is not asyncio.current_task():
                return  # found again meanwhile
            del self._timers[name]
            await self._expired(name)
