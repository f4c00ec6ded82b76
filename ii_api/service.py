"""The Improved Interface control plane: one object owning its state, run in the broker's event loop.

:class:`IIService` holds the II's state (persisted in :class:`~ii_api.store.AsyncStore`, SQLite in
the node's data directory), keeps the broker's addresses in line with it through the
:class:`~interchange.broker.addresses.AddressBook`, and talks to neighbours through
:class:`~ii_api.client.IIClient` and :class:`~ii_api.federation.Federation`. The HTTPS server
(:mod:`ii_api.server`) calls one method per operation; every method answers only after its
writes are committed (the store's transactions, ``synchronous=FULL``).

This module is the core: shared state, life cycle, identities (IP_125/126), capabilities
(ours and the neighbours'), discovery, restart and status. The operations live in parts, each
given the service:

* :mod:`ii_api.incoming`: neighbours' subscriptions here (``service.incoming``);
* :mod:`ii_api.outgoing`: our subscriptions at neighbours, one
  :class:`~ii_api.outgoing.OutgoingRunner` each (``service.outgoing``);
* :mod:`ii_api.local_actors`: the local actor API: capabilities, deliveries, subscriptions
  (``service.actor_capabilities``, ``service.deliveries``, ``service.actor_subscriptions``);
* :mod:`ii_api.pushes`: our capabilities POSTed to every neighbour (``service.pushes``);
* :mod:`ii_api.departures`: neighbours that left DNS, whose subscriptions here expire after
  ``neighbour_grace_s`` (``service.departures``).

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
import secrets
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from pydantic import ValidationError

from ii_api.client import IIClient
from ii_api.config import IIConfig
from ii_api.departures import NeighbourDepartures
from ii_api.discovery import (
    Discovery,
    DiscoveryResult,
    Neighbour,
    merge_neighbours,
    neighbour_changes,
    normalise_name,
)
from ii_api.errors import BadRequest, Forbidden
from ii_api.incoming import IncomingSubscriptions
from ii_api.local_actors import ActorCapabilities, ActorDeliveries, ActorSubscriptions
from ii_api.matching import CapabilityMatcher
from ii_api.models import (
    CapabilitiesMessage,
    Capability,
    LocalEndpoint,
    NetworkCapabilitiesResponse,
    SubscriptionStatus,
)
from ii_api.outgoing import OutgoingSubscriptions
from ii_api.pushes import CapabilityPushes, Pusher
from ii_api.store import AsyncStore
from ii_api.store import LocalCapability as StoredCapability
from ii_api.store import LocalSubscription as StoredLocalSubscription
from ii_api.subscriptions import Timing, compile_selector, same_cn
from interchange.broker.addresses import AddressBook, AddressError, SourceSpec
from interchange.broker.placement import Placement
from interchange.broker.router import BrokerCore

log = logging.getLogger(__name__)

EventSink = Callable[[str, str, dict], None]
Row = TypeVar("Row")


class IIService:
    """The II's state and operations (see the module docstring)."""

    def __init__(self, *, name: str, config: IIConfig, store: AsyncStore, addresses: AddressBook,
                 core: BrokerCore, client_context: Callable[[], ssl.SSLContext], amqp_host: str,
                 amqp_ports: Sequence[int], placement: Placement = Placement(),
                 event: EventSink | None = None) -> None:
        self.name = normalise_name(name)
        self.config = config
        self.store = store
        self.addresses = addresses
        self.core = core
        self.client_context = client_context
        self.amqp_host = amqp_host
        self.amqp_ports = tuple(amqp_ports)  #: advertised AMQPS port of broker process 0..N-1
        self.placement = placement
        self._event = event
        self.base = config.base_path
        self.client = IIClient(client_context, base_path=config.base_path, timeout_s=config.request_timeout_s)
        self.timing = Timing(poll_interval_s=config.poll_interval_s, first_poll_s=config.first_poll_s,
                             retry_min_s=config.retry_min_s, retry_max_s=config.retry_max_s)
        # Shared state; changed only while holding the lock.
        self.lock = asyncio.Lock()
        self.neighbours_by_name: dict[str, Neighbour] = {}
        self.neighbour_caps: dict[str, list[Capability]] = {}
        self.local_caps: dict[int, StoredCapability] = {}  #: actors' capabilities by id (ours, IP_077/109)
        self.local_cap_models: dict[int, Capability] = {}
        self.local_subs: dict[int, StoredLocalSubscription] = {}  #: actors' subscriptions by id
        self.closed = False
        # The parts (see the module docstring).
        self.incoming = IncomingSubscriptions(self)
        self.outgoing = OutgoingSubscriptions(self)
        self.actor_capabilities = ActorCapabilities(self)
        self.deliveries = ActorDeliveries(self)
        self.actor_subscriptions = ActorSubscriptions(self)
        self.pushes = CapabilityPushes(self)
        self.departures = NeighbourDepartures(self)
        self._discovery: Discovery | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        """Restore the state from the store, recreate broker addresses, start the timers."""
        async with self.lock:
            await self._restore()
        for name in list(self.neighbours_by_name):
            self.pushes.start(name)
        if self.config.discovery is not None:
            discovery_config = self.config.discovery
            if discovery_config.own_name is None:
                discovery_config = discovery_config.model_copy(update={"own_name": self.name})
            self._discovery = Discovery(discovery_config, on_result=self._on_discovery)
            self.spawn(self._discovery.run_periodically(), "ii-discovery")
        self.event("info", "ii_started", {"neighbours": sorted(self.neighbours_by_name),
                                          "local_capabilities": len(self.local_caps),
                                          "local_subscriptions": len(self.local_subs),
                                          "outgoing_subscriptions": len(self.outgoing.active)})

    async def close(self) -> None:
        self.closed = True
        tasks = [t for t in self._tasks]
        tasks += self.pushes.tasks()
        runners = [*self.outgoing.active.values(), *self.outgoing.retiring]
        tasks += [r.task for r in runners if r.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for runner in runners:
            if runner.federation is not None:
                await runner.federation.close()
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

    # ------------------------------------------------------------------ our broker's addresses
    @staticmethod
    def new_address(prefix: str) -> str:
        """A fresh broker address for a source or target the II makes (``prefix`` starts "ii-")."""
        return prefix + secrets.token_hex(8)

    async def open_source(self, spec: SourceSpec, row_id: int, update: Callable[..., Awaitable[Row]],
                          about: dict[str, Any]) -> Row | None:
        """Create a subscription's broker source; None when done. If the address book refuses it (an
        address a configured target took, a selector nested too deeply), the subscription turns ERROR
        with an errorMessage and no endpoints (Table 14/15): ``update`` (the store's update method of
        its table) records that, and the updated row is returned."""
        try:
            self.addresses.put_source(spec)
        except AddressError as exc:
            error = f"the source could not be created: {exc}"
            self.event("warning", "ii_source_failed", {**about, "id": row_id, "error": error})
            return await update(row_id, status=SubscriptionStatus.ERROR.value, endpoints=[], error=error)
        return None

    def local_endpoints(self, source: str) -> list[LocalEndpoint]:
        """Where to consume from ``source``: one endpoint per broker process, as advertised now."""
        return [LocalEndpoint(host=self.amqp_host, port=port, source=source) for port in self.amqp_ports]

    # ------------------------------------------------------------------ identities (IP_125/126)
    def neighbour(self, name: str) -> Neighbour | None:
        try:
            return self.neighbours_by_name.get(normalise_name(name))
        except ValueError:
            return None

    @property
    def neighbours(self) -> tuple[Neighbour, ...]:
        return tuple(self.neighbours_by_name[n] for n in sorted(self.neighbours_by_name))

    def endpoint_address(self, neighbour: str, host: str | None) -> str:
        """Where to connect for an endpoint: a host that is the neighbour's own name is reached at the
        address discovery found for it (its A record, IP_085); other hosts (e.g. a load balancer)
        as given. TLS still checks the neighbour's name (IP_125)."""
        peer = self.neighbour(neighbour)
        if host is None or (peer is not None and same_cn(host.rstrip("."), peer.name)):
            return peer.host if peer is not None else neighbour
        return host

    def is_neighbour(self, cn: str) -> bool:
        """IP_126: whether ``cn`` is the target of a discovered SRV record."""
        return self.neighbour(cn) is not None

    def require_neighbour(self, cn: str, body_name: str | None = None) -> str:
        """The neighbour's name for a request by ``cn``; Forbidden (IP_126) otherwise."""
        peer = self.neighbour(cn)
        if peer is None:
            raise Forbidden(f"{cn!r} is not the target of a discovered SRV record of a trusted domain (IP_126)")
        if body_name is not None and not same_cn(body_name, cn):
            raise Forbidden(f"the name in the body ({body_name!r}) is not the certificate's common name ({cn!r})",
                            "name")
        return peer.name

    # ------------------------------------------------------------------ capabilities
    def local_capabilities(self) -> list[Capability]:
        """IP_077/IP_109: our capabilities are those our local actors registered, nothing learned."""
        return [self.local_cap_models[i] for i in sorted(self.local_cap_models)]

    def capabilities_message(self) -> CapabilitiesMessage:
        return CapabilitiesMessage(name=self.name, capabilities=self.local_capabilities())

    def neighbour_capabilities(self, name: str) -> list[Capability]:
        return list(self.neighbour_caps.get(name, ()))

    async def receive_capabilities(self, cn: str, message: CapabilitiesMessage) -> CapabilitiesMessage:
        """IP_076/094: replace the neighbour's capabilities; answer with ours."""
        name = self.require_neighbour(cn, message.name)
        async with self.lock:
            await self.set_neighbour_capabilities(name, message)
        return self.capabilities_message()

    async def set_neighbour_capabilities(self, name: str, message: CapabilitiesMessage) -> None:
        """Caller holds the lock."""
        await self.store.put_neighbour_capabilities(name, message.to_json())
        self.neighbour_caps[name] = list(message.capabilities)
        self.event("info", "ii_capabilities_received", {"neighbour": name, "count": len(message.capabilities)})
        await self.outgoing.reconcile()
        self.outgoing.nudge(name)

    async def network_capabilities(self, actor: str, selector: str | None) -> NetworkCapabilitiesResponse:
        """Capabilities anywhere in the federation (ours and our neighbours') that ``selector`` matches."""
        everything = self.local_capabilities() + [c for n in sorted(self.neighbour_caps)
                                                  for c in self.neighbour_caps[n]]
        if selector is None or not selector.strip():
            return NetworkCapabilitiesResponse(name=actor, selector=selector or "", capabilities=everything)
        compiled, problem = compile_selector(selector)
        if compiled is None:
            raise BadRequest(problem or "invalid selector", "selector")
        matcher = CapabilityMatcher(compiled)
        return NetworkCapabilitiesResponse(name=actor, selector=selector, capabilities=[
            c for c in everything if matcher.matches(c.application, c.metadata)])

    # ------------------------------------------------------------------ discovery (IP_073/089)
    async def _on_discovery(self, result: DiscoveryResult) -> None:
        """IP_089/126: the neighbour set follows DNS. A neighbour gone is refused from now on, its
        capabilities forgotten, our subscriptions at it withdrawn (re-plan), and its subscriptions
        here expire after the grace period (:mod:`ii_api.departures`)."""
        if self.closed:
            return
        async with self.lock:
            known = self.neighbours_by_name
            merged = {n.name: n for n in merge_neighbours(known.values(), result)}
            await self.store.upsert_neighbours(result.neighbours)
            gone, changed = neighbour_changes(known, merged)
            for name in gone:
                self.neighbour_caps.pop(name, None)
                self.pushes.stop(name)
            self.neighbours_by_name = merged
            await self.departures.left(gone)
            self.departures.returned(merged)
            for name in sorted(changed):
                self.pushes.wake(name)
            if gone or changed:
                self.event("info", "ii_neighbours_changed", {"neighbours": sorted(merged), "gone": sorted(gone),
                                                             "new_or_moved": sorted(changed)})
                await self.outgoing.reconcile()
        for error in result.errors:
            self.event("warning", "ii_discovery_problem", {"error": error})

    async def discover_now(self) -> None:
        """Run a discovery round at once (e.g. ``interchange`` tooling and tests)."""
        if self._discovery is not None:
            await self._discovery.run_once()

    # ------------------------------------------------------------------ restart (state from SQLite)
    async def _restore(self) -> None:
        """Rebuild memory state and broker addresses from the store (caller holds the lock)."""
        for stored in await self.store.list_neighbours():
            self.neighbours_by_name[stored.name] = Neighbour(stored.name, stored.host, stored.port, stored.domain,
                                                             stored.priority, stored.weight)
        for document in await self.store.list_neighbour_capabilities():
            try:
                self.neighbour_caps[document.neighbour] = list(
                    CapabilitiesMessage.model_validate(document.document).capabilities)
            except ValidationError:
                log.warning("ii: stored capabilities of %s are unreadable; ignored", document.neighbour)
        await self.actor_capabilities.restore()
        await self.deliveries.apply()
        await self.actor_subscriptions.restore()
        await self.incoming.restore()
        await self.incoming.recheck()  # capabilities added while the node was down: RESUBSCRIBE
        await self.departures.restore()
        await self.outgoing.restore()
        await self.outgoing.reconcile()

    # ------------------------------------------------------------------ status (operators, tests)
    def pusher_state(self, name: str) -> Pusher | None:
        return self.pushes.state(name)

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "neighbours": [{"name": n.name, "host": n.host, "port": n.port,
                            "capabilities": len(self.neighbour_caps.get(n.name, ())),
                            "pushes": pusher.pushes if (pusher := self.pushes.state(n.name)) is not None else 0}
                           for n in self.neighbours],
            "local_capabilities": len(self.local_cap_models),
            "outgoing": [{"neighbour": r.key.neighbour, "selector": r.key.selector,
                          "consumerCommonName": r.key.consumer_common_name, "phase": r.machine.phase.value,
                          "status": r.machine.status.value if r.machine.status else None,
                          "links": [{"connected": s.connected, "received": s.received} for s in r.links()]}
                         for r in self.outgoing.runners()],
        }
