"""The Improved Interface control plane: one object owning its state, run in the broker's event loop.

:class:`IIService` holds the II's state (persisted in :class:`~ii_api.store.AsyncStore`, SQLite in
the node's data directory), keeps the broker's addresses in line with it through the
:class:`~interchange.broker.addresses.AddressBook`, and talks to neighbours through
:class:`~ii_api.client.IIClient` and :class:`~ii_api.federation.Federation`. The HTTPS server
(:mod:`ii_api.server`) calls one method per operation; every method answers only after its
writes are committed (the store's transactions, ``synchronous=FULL``).

The service composes one object per resource, each owning its state (memory and its rows in the
store) behind a small interface (:mod:`ii_api.doors`); no object imports the service or another's
owner: what one needs of another is given to it as a view, and what changes is reported through a
callback the service routes to the objects it concerns.

==========================  ==============================================  =========================
object                      owns                                            module
==========================  ==============================================  =========================
``neighbours``              the neighbour set (IP_089/126)                  :mod:`ii_api.neighbours`
``neighbour_caps``          each neighbour's capabilities (IP_076)          :mod:`ii_api.neighbours`
``departures``              neighbours gone from DNS, their grace timers    :mod:`ii_api.departures`
``incoming``                neighbours' subscriptions here, their sources   :mod:`ii_api.incoming`
``outgoing``                our subscriptions at neighbours, their runners  :mod:`ii_api.outgoing`
``actor_capabilities``      actors' capabilities = ours (IP_077/109)        :mod:`ii_api.local_actors`
``deliveries``              actors' deliveries, their targets               :mod:`ii_api.local_actors`
``actor_subscriptions``     actors' subscriptions, their sources            :mod:`ii_api.local_actors`
``pushes``                  one capability pusher per neighbour (IP_075)    :mod:`ii_api.pushes`
==========================  ==============================================  =========================

Reactivity: every change is propagated at once, as an event, not by a periodic scan:

* a local capability added or removed -> the actor's delivery targets are rebuilt, neighbours'
  subscriptions that could now include it turn RESUBSCRIBE, and our capabilities are POSTed to
  every neighbour (IP_075/091) by its *pusher* task, woken up;
* capabilities received from a neighbour (its POST, or the answer to ours) -> the subscriptions
  wanted at neighbours are re-planned and those at that neighbour polled now (RESUBSCRIBE);
* a local subscription added or removed -> re-planned; a new subscription at a neighbour is
  POSTed at once, the answer's endpoints federated at once;
* discovery finding or losing a neighbour -> pushers started or stopped, re-planned (our
  subscriptions at a lost one withdrawn); a lost one's subscriptions here expire after a grace
  period unless it is found again (:mod:`ii_api.departures`).

Timers only bound the delays: DNS every ``discovery.interval_s`` (<= 12 h, IP_089), capabilities
re-POSTed every ``capability_repost_s`` (<= 24 h, IP_091), subscriptions polled every
``poll_interval_s`` (<= 5 min, IP_127).

One :class:`asyncio.Lock` (``service.lock``) serialises state changes; HTTP requests to neighbours
are never made while holding it (an outgoing subscription's runner only takes it to record a result).
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from ii_api.broker_addresses import BrokerAddresses
from ii_api.client import IIClient
from ii_api.config import IIConfig
from ii_api.departures import NeighbourDepartures
from ii_api.discovery import Discovery, DiscoveryResult, Neighbour, normalise_name
from ii_api.doors import AddressBookDoor, EventSink, ImportSink, MessageSink
from ii_api.errors import BadRequest
from ii_api.federation import Federation
from ii_api.handover import RouteHandover
from ii_api.incoming import IncomingSubscriptions
from ii_api.local_actors import ActorCapabilities, ActorDeliveries, ActorSubscriptions
from ii_api.matching import CapabilityMatcher
from ii_api.models import CapabilitiesMessage, Capability, NetworkCapabilitiesResponse
from ii_api.multihop import desired_routes
from ii_api.neighbours import NeighbourCapabilities, Neighbours
from ii_api.outgoing import OutgoingSubscriptions
from ii_api.pushes import CapabilityPushes, Pusher
from ii_api.reexport import Reexport
from ii_api.store import AsyncStore
from ii_api.subscriptions import LocalSubscriptionView, Timing, compile_selector, desired_outgoing
from interchange.broker.placement import Placement

__all__ = ["EventSink", "IIService"]

log = logging.getLogger(__name__)


class IIService:
    """The II's objects, composed, and the events between them (see the module docstring)."""

    def __init__(self, *, name: str, config: IIConfig, store: AsyncStore, addresses: AddressBookDoor,
                 core: ImportSink, client_context: Callable[[], ssl.SSLContext], amqp_host: str,
                 amqp_ports: Sequence[int], placement: Placement = Placement(),
                 event: EventSink | None = None, max_certificate_days: int | None = None) -> None:
        self.name = normalise_name(name)
        self.config = config
        self.base = config.base_path
        self._event = event
        self._client_context = client_context
        self._max_certificate_days = max_certificate_days  #: IP_051 for neighbours' certificates (tls.max_certificate_days)
        self.client = IIClient(client_context, base_path=config.base_path, timeout_s=config.request_timeout_s,
                               max_certificate_days=max_certificate_days)
        self.lock = asyncio.Lock()  #: serialises state changes; no request to a neighbour is made holding it
        self.closed = False
        self._discovery: Discovery | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        broker = BrokerAddresses(addresses, amqp_host, amqp_ports, placement)
        timing = Timing(poll_interval_s=config.poll_interval_s, first_poll_s=config.first_poll_s,
                        retry_min_s=config.retry_min_s, retry_max_s=config.retry_max_s)
        lock, event_sink = self.lock, self.event
        # The objects (see the module docstring), each given what it reads and whom to tell.
        self.neighbours_dir = Neighbours(store)
        self.neighbour_caps = NeighbourCapabilities(store)
        self.actor_capabilities = ActorCapabilities(
            base_path=self.base, store=store, network=self.neighbour_caps.publication_ids, lock=lock,
            event=event_sink, changed=self._local_capabilities_changed)
        self.deliveries = ActorDeliveries(base_path=self.base, store=store, broker=broker,
                                          capabilities=self.actor_capabilities, lock=lock, event=event_sink)
        self.actor_subscriptions = ActorSubscriptions(config=config, store=store, broker=broker, lock=lock,
                                                      event=event_sink, changed=self._local_subscriptions_changed)
        self._store = store
        self.reexport = Reexport(name=self.name, config=config.multihop, local=self.local_capabilities,
                                 offers=self._current_offers, hop_limits=self.neighbour_caps.multihop)
        self.incoming = IncomingSubscriptions(name=self.name, config=config, store=store, broker=broker,
                                              neighbours=self.neighbours_dir, capabilities=self.actor_capabilities,
                                              lock=lock, event=event_sink, reexport=self.reexport,
                                              changed=self._incoming_changed)
        self.outgoing = OutgoingSubscriptions(
            name=self.name, store=store, timing=timing, client=self.client, neighbours=self.neighbours_dir,
            offers=self.neighbour_caps, wanted=self._wanted, sources=self._sources, imports=core,
            federation=self._federation, served_changed=self._outgoing_changed, lock=lock, event=event_sink,
            plan=desired_routes if config.multihop.enabled else desired_outgoing,
            handover=RouteHandover(config.multihop.handover_overlap_s, config.multihop.handover_timeout_s)
            if config.multihop.enabled else None)
        self.pushes = CapabilityPushes(config=config, client=self.client, neighbours=self.neighbours_dir,
                                       message=self.capabilities_message, answered=self._capabilities_answered,
                                       event=event_sink)
        self.departures = NeighbourDepartures(grace_s=config.neighbour_grace_s, store=store, spawn=self.spawn,
                                              lock=lock, event=event_sink, expired=self._departure_expired)

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        """Restore the state from the store, recreate broker addresses, start the timers."""
        async with self.lock:
            await self._restore()
        for name in self.neighbours_dir.names():
            self.pushes.start(name)
        if self.config.discovery is not None:
            discovery_config = self.config.discovery
            if discovery_config.own_name is None:
                discovery_config = discovery_config.model_copy(update={"own_name": self.name})
            self._discovery = Discovery(discovery_config, on_result=self._on_discovery)
            self.spawn(self._discovery.run_periodically(), "ii-discovery")
        if self.config.actors is None:
            self.event("warning", "ii_actor_policy_open", {"reason": "no [ii.actors] section: every certificate "
                       "of the trust chain that is not a neighbour may act as a local actor (IP_068)"})
        self.event("info", "ii_started", {"neighbours": self.neighbours_dir.names(),
                                          "local_capabilities": len(self.actor_capabilities),
                                          "local_subscriptions": len(self.actor_subscriptions),
                                          "outgoing_subscriptions": len(self.outgoing.active)})

    async def close(self) -> None:
        self.closed = self.pushes.closed = True
        tasks = [*self._tasks, *self.pushes.tasks()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.outgoing.close()
        await self.client.close()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """A background task of the service (cancelled by :meth:`close`)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def event(self, level: str, kind: str, fields: dict) -> None:
        """An II event for the node's JSON log (and the Python log at debug level)."""
        log.debug("%s %s", kind, fields)
        if self._event is not None:
            self._event(level, kind, fields)

    def _federation(self, sink: MessageSink) -> Federation:
        return Federation(sink, self._client_context, self.name, min_backoff=self.config.federation_backoff_s,
                          max_certificate_days=self._max_certificate_days)

    # ------------------------------------------------------------------ identities (IP_125/126)
    def neighbour(self, name: str) -> Neighbour | None:
        return self.neighbours_dir.neighbour(name)

    @property
    def neighbours(self) -> tuple[Neighbour, ...]:
        return self.neighbours_dir.all()

    def is_neighbour(self, cn: str) -> bool:
        """IP_126: whether ``cn`` is the target of a discovered SRV record."""
        return self.neighbours_dir.neighbour(cn) is not None

    def require_neighbour(self, cn: str, body_name: str | None = None) -> str:
        """The neighbour's name for a request by ``cn``; Forbidden (IP_126) otherwise."""
        return self.neighbours_dir.require(cn, body_name)

    # ------------------------------------------------------------------ capabilities
    def local_capabilities(self) -> list[Capability]:
        """IP_077/IP_109: our capabilities are those our local actors registered, nothing learned."""
        return self.actor_capabilities.all()

    def capabilities_message(self, to: str | None = None) -> CapabilitiesMessage:
        """Our capabilities message (for neighbour ``to``: with what we re-export to it, issue 12)."""
        return self.reexport.message_for(to)

    def _current_offers(self) -> dict[str, list[Capability]]:
        """The capabilities of the current neighbours."""
        return {n: c for n, c in self.neighbour_caps.by_neighbour().items() if n in self.neighbours_dir}

    def _wanted(self) -> list[LocalSubscriptionView]:
        """What to request from neighbours: our actors' subscriptions and, with multi-hop federation,
        what neighbours' subscriptions here want re-exported (:mod:`ii_api.reexport`)."""
        return [*self.actor_subscriptions.wanted(), *self.reexport.wanted()]

    def _sources(self, sub_ids: Iterable[int]) -> list[str]:
        ids = list(sub_ids)
        return self.actor_subscriptions.sources(ids) + self.reexport.sources(ids)

    def neighbour_capabilities(self, name: str) -> list[Capability]:
        return self.neighbour_caps.of(name)

    async def receive_capabilities(self, cn: str, message: CapabilitiesMessage) -> CapabilitiesMessage:
        """IP_076/094: replace the neighbour's capabilities; answer with ours."""
        name = self.require_neighbour(cn, message.name)
        async with self.lock:
            await self._neighbour_capabilities_changed(name, message)
            return self.capabilities_message(name)

    async def network_capabilities(self, actor: str, selector: str | None) -> NetworkCapabilitiesResponse:
        """Capabilities anywhere in the federation (ours and our neighbours') that ``selector`` matches."""
        everything = self.local_capabilities() + self.neighbour_caps.everything()
        if selector is None or not selector.strip():
            return NetworkCapabilitiesResponse(name=actor, selector=selector or "", capabilities=everything)
        compiled, problem = compile_selector(selector)
        if compiled is None:
            raise BadRequest(problem or "invalid selector", "selector")
        matcher = CapabilityMatcher(compiled)
        return NetworkCapabilitiesResponse(name=actor, selector=selector, capabilities=[
            c for c in everything if matcher.matches(c.application, c.metadata, domains=c.domains, shape=c.shape)])

    # ------------------------------------------------------------------ events between the objects
    async def _neighbour_capabilities_changed(self, name: str, message: CapabilitiesMessage) -> None:
        """A neighbour's capabilities (its POST, or its answer to ours): stored, subscriptions at
        neighbours re-planned, and those at that neighbour polled now (RESUBSCRIBE). Lock held."""
        await self.neighbour_caps.put(name, message)
        self.event("info", "ii_capabilities_received", {"neighbour": name, "count": len(message.capabilities)})
        await self.outgoing.reconcile()
        self.outgoing.nudge(name)
        await self._offers_changed()

    async def _offers_changed(self) -> None:
        """Multi-hop federation: what we re-export changed with neighbours' capabilities; those who
        would now get another capabilities message are told (only they: no endless exchange)."""
        if not self.reexport.enabled:
            return
        await self._incoming_changed()
        for neighbour in self.reexport.stale(self.neighbours_dir.names()):
            self.pushes.wake(neighbour)

    async def _incoming_changed(self) -> None:
        """Neighbours' subscriptions here came or went: what they want re-exported re-planned (lock held)."""
        if self.reexport.enabled:
            self.reexport.refresh(await self._store.incoming.list())
            await self.outgoing.reconcile()

    async def _capabilities_answered(self, name: str, message: CapabilitiesMessage) -> None:
        """A neighbour's answer to our capabilities push, recorded if it is still a neighbour."""
        async with self.lock:
            if name in self.neighbours_dir:
                await self._neighbour_capabilities_changed(name, message)

    async def _local_capabilities_changed(self, actor: str, added: list[Capability],
                                          removed: list[Capability]) -> None:
        """Deliveries covering the capabilities added or removed rebuilt, RESUBSCRIBE checks against
        those added only (a removal never widens a grant), neighbours told (IP_075/091). Lock held."""
        await self.deliveries.apply(actor, added + removed)
        if added:
            await self.incoming.recheck(added)
        self.pushes.wake_all()

    async def _local_subscriptions_changed(self) -> None:
        """Subscriptions at neighbours re-planned (lock held)."""
        await self.outgoing.reconcile()

    async def _outgoing_changed(self, sub_ids: Iterable[int]) -> None:
        """The local subscriptions served by changed subscriptions at neighbours: recomputed (lock held)."""
        await self.actor_subscriptions.refresh(sub_ids, self.outgoing.views())

    async def _departure_expired(self, name: str) -> None:
        """A departed neighbour's grace period is over; unless it is back, its subscriptions go (lock held)."""
        if self.neighbours_dir.neighbour(name) is None:
            await self.incoming.expire(name)

    # ------------------------------------------------------------------ discovery (IP_073/089)
    async def _on_discovery(self, result: DiscoveryResult) -> None:
        """IP_089/126: the neighbour set follows DNS. A neighbour gone is refused from now on, its
        capabilities forgotten, our subscriptions at it withdrawn (re-plan), and its subscriptions
        here expire after the grace period (:mod:`ii_api.departures`)."""
        if self.closed:
            return
        async with self.lock:
            update = self.neighbours_dir.plan(result)
            gone, changed = update.gone, update.changed
            await self.departures.left(gone)  # recorded before the set changes: one is gone or departed
            await self.neighbours_dir.apply(update)
            for name in gone:
                self.neighbour_caps.forget(name)
                self.reexport.forget(name)
                self.pushes.stop(name)
            self.departures.returned(self.neighbours_dir.names())
            for name in sorted(changed):
                self.pushes.wake(name)
            if gone or changed:
                self.event("info", "ii_neighbours_changed", {"neighbours": self.neighbours_dir.names(),
                                                             "gone": sorted(gone), "new_or_moved": sorted(changed)})
                await self.outgoing.reconcile()
                await self._offers_changed()
        for error in result.errors:
            self.event("warning", "ii_discovery_problem", {"error": error})

    async def discover_now(self) -> None:
        """Run a discovery round at once (e.g. ``interchange`` tooling and tests)."""
        if self._discovery is not None:
            await self._discovery.run_once()

    # ------------------------------------------------------------------ restart (state from SQLite)
    async def _restore(self) -> None:
        """Rebuild memory state and broker addresses from the store (caller holds the lock)."""
        await self.neighbours_dir.restore()
        await self.neighbour_caps.restore()
        await self.actor_capabilities.restore()
        await self.deliveries.apply()
        await self.actor_subscriptions.restore()
        await self.incoming.restore()
        await self.incoming.recheck()  # capabilities added while the node was down: RESUBSCRIBE
        await self.departures.restore(await self.incoming.owners(), self.neighbours_dir.names())
        await self.outgoing.restore()
        if self.reexport.enabled:
            self.reexport.refresh(await self._store.incoming.list())
        await self.outgoing.reconcile()

    # ------------------------------------------------------------------ status (operators, tests)
    def pusher_state(self, name: str) -> Pusher | None:
        return self.pushes.state(name)

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "neighbours": [{"name": n.name, "host": n.host, "port": n.port,
                            "capabilities": len(self.neighbour_caps.of(n.name)),
                            "pushes": pusher.pushes if (pusher := self.pushes.state(n.name)) is not None else 0}
                           for n in self.neighbours],
            "local_capabilities": len(self.actor_capabilities),
            "outgoing": [{"neighbour": r.key.neighbour, "selector": r.key.selector,
                          "consumerCommonName": r.key.consumer_common_name, "phase": r.machine.phase.value,
                          "status": r.machine.status.value if r.machine.status else None,
                          "links": [{"connected": s.connected, "received": s.received} for s in r.links()]}
                         for r in self.outgoing.runners()],
        }
