"""The Improved Interface control plane: its objects composed, run in the broker's event loop.

:class:`IIService` composes one object per resource of :mod:`ii_api.resources`, each owning its
memory state, its rows in :class:`~ii_api.storage.store.AsyncStore` and the broker addresses it
needs; none imports the service or another's owner (they are given the Protocols of
:mod:`ii_api.resources.doors`), and :class:`~ii_api.node.propagation.Propagation` carries each
change to the objects it concerns at once, not by a periodic scan. The HTTPS surface calls one
operation per request, answered only after its writes are committed (``synchronous=FULL``).
Timers only bound the delays: DNS (<= 12 h, IP_089), capability re-POST (<= 24 h, IP_091), polls
(<= 5 min, IP_127). One :class:`asyncio.Lock` serialises changes; no HTTP request to a neighbour
is made while holding it (a runner takes it only to record a result). The table of objects:
docs/architecture.md ("Control plane").
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any

from ii_api.decisions.handover import RouteHandover
from ii_api.decisions.multihop import desired_routes
from ii_api.decisions.subscriptions import LocalSubscriptionView, Timing, compile_selector, desired_outgoing
from ii_api.node.propagation import Propagation
from ii_api.peers.client import IIClient
from ii_api.peers.discovery import Discovery, Neighbour, normalise_name
from ii_api.peers.doors import ClientContext, LinkDown, MessageSink
from ii_api.peers.federation import Federation
from ii_api.resources.broker_addresses import BrokerAddresses
from ii_api.resources.departures import NeighbourDepartures
from ii_api.resources.doors import AddressBookDoor, EventSink, ImportSink
from ii_api.resources.incoming import IncomingSubscriptions
from ii_api.resources.local_actors import ActorCapabilities, ActorDeliveries, ActorSubscriptions
from ii_api.resources.neighbours import NeighbourCapabilities, Neighbours
from ii_api.resources.outgoing import OutgoingSubscriptions
from ii_api.resources.pushes import CapabilityPushes, Pusher
from ii_api.resources.reexport import Reexport
from ii_api.selectors.matching import CapabilityMatcher
from ii_api.settings.config import IIConfig
from ii_api.storage.store import AsyncStore
from ii_api.wire.errors import BadRequest
from ii_api.wire.models import CapabilitiesMessage, Capability, NetworkCapabilitiesResponse
from interchange.broker.placement import Placement

__all__ = ["IIService"]

log = logging.getLogger(__name__)


class IIService:
    """The II's objects, composed (see the module docstring)."""

    def __init__(self, *, name: str, config: IIConfig, store: AsyncStore, addresses: AddressBookDoor,
                 core: ImportSink, client_context: ClientContext, amqp_host: str,
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
        self._store = store
        broker = BrokerAddresses(addresses, amqp_host, amqp_ports, placement)
        timing = Timing(poll_interval_s=config.poll_interval_s, first_poll_s=config.first_poll_s,
                        retry_min_s=config.retry_min_s, retry_max_s=config.retry_max_s)
        lock, event_sink = self.lock, self.event
        #: the events between the objects below; it reads them when an event comes
        self.propagation = on = Propagation(self, store=store, lock=lock, event=event_sink)
        # The objects (see the module docstring), each given what it reads and whom to tell.
        self.neighbours_dir = Neighbours(store)
        self.neighbour_caps = NeighbourCapabilities(store)
        self.actor_capabilities = ActorCapabilities(
            base_path=self.base, store=store, network=self.neighbour_caps.publication_ids, lock=lock,
            event=event_sink, changed=on.local_capabilities_changed)
        self.deliveries = ActorDeliveries(base_path=self.base, store=store, broker=broker,
                                          capabilities=self.actor_capabilities, lock=lock, event=event_sink)
        self.actor_subscriptions = ActorSubscriptions(config=config, store=store, broker=broker, lock=lock,
                                                      event=event_sink, changed=on.local_subscriptions_changed)
        self.reexport = Reexport(name=self.name, config=config.multihop, local=self.local_capabilities,
                                 offers=self.current_offers, hop_limits=self.neighbour_caps.multihop)
        self.incoming = IncomingSubscriptions(name=self.name, config=config, store=store, broker=broker,
                                              neighbours=self.neighbours_dir, capabilities=self.actor_capabilities,
                                              lock=lock, event=event_sink, reexport=self.reexport,
                                              changed=on.incoming_changed)
        self.outgoing = OutgoingSubscriptions(
            name=self.name, store=store, timing=timing, client=self.client, neighbours=self.neighbours_dir,
            offers=self.neighbour_caps, wanted=self.wanted, sources=self.sources, imports=core,
            federation=self.federation, served_changed=on.outgoing_changed, lock=lock, event=event_sink,
            plan=desired_routes if config.multihop.enabled else desired_outgoing,
            handover=RouteHandover(config.multihop.handover_overlap_s, config.multihop.handover_timeout_s)
            if config.multihop.enabled else None)
        self.pushes = CapabilityPushes(config=config, client=self.client, neighbours=self.neighbours_dir,
                                       message=self.capabilities_message, answered=on.capabilities_answered,
                                       event=event_sink)
        self.departures = NeighbourDepartures(grace_s=config.neighbour_grace_s, store=store, spawn=self.spawn,
                                              lock=lock, event=event_sink, expired=on.departure_expired)

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
            self._discovery = Discovery(discovery_config, on_result=self.propagation.discovered)
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

    def federation(self, sink: MessageSink, on_down: LinkDown) -> Federation:
        """Links to a neighbour whose messages go to ``sink``, telling ``on_down`` when one is refused or
        lost (a :class:`~ii_api.resources.doors.FederationFactory`); their state changes go to the log."""
        return Federation(sink, self._client_context, self.name, min_backoff=self.config.federation_backoff_s,
                          max_certificate_days=self._max_certificate_days,
                          idle_timeout_s=self.config.federation_idle_timeout_s, events=self.event, on_down=on_down)

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
        """Our capabilities message (for neighbour ``to``: with what we re-export to it;
        :class:`~ii_api.resources.doors.CapabilitiesFor`)."""
        return self.reexport.message_for(to)

    def current_offers(self) -> dict[str, list[Capability]]:
        """The capabilities of the current neighbours (:class:`~ii_api.resources.doors.Offers`)."""
        return {n: c for n, c in self.neighbour_caps.by_neighbour().items() if n in self.neighbours_dir}

    def wanted(self) -> list[LocalSubscriptionView]:
        """What to request from neighbours: our actors' subscriptions and, with multi-hop federation,
        what neighbours' subscriptions here want re-exported (:mod:`ii_api.resources.reexport`;
        :class:`~ii_api.resources.doors.WantedSubscriptions`)."""
        return [*self.actor_subscriptions.wanted(), *self.reexport.wanted()]

    def sources(self, sub_ids: Iterable[int]) -> list[str]:
        """Where the data for these wants goes (:class:`~ii_api.resources.doors.SourcesOf`)."""
        ids = list(sub_ids)
        return self.actor_subscriptions.sources(ids) + self.reexport.sources(ids)

    def neighbour_capabilities(self, name: str) -> list[Capability]:
        return self.neighbour_caps.of(name)

    async def receive_capabilities(self, cn: str, message: CapabilitiesMessage) -> CapabilitiesMessage:
        """IP_076/094: replace the neighbour's capabilities; answer with ours."""
        name = self.require_neighbour(cn, message.name)
        async with self.lock:
            await self.propagation.neighbour_capabilities_changed(name, message)
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

    # ------------------------------------------------------------------ discovery (IP_073/089)
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
