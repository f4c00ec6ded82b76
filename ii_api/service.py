"""The Improved Interface control plane: one object owning its state, run in the broker's event loop.

:class:`IIService` holds the II's state (persisted in :class:`~ii_api.store.AsyncStore`, SQLite in
the node's data directory), keeps the broker's addresses in line with it through the
:class:`~interchange.broker.addresses.AddressBook`, and talks to neighbours through
:class:`~ii_api.client.IIClient` and :class:`~ii_api.federation.Federation`. The HTTPS server
(:mod:`ii_api.server`) calls one method per operation; every method answers only after its
writes are committed (the store's transactions, ``synchronous=FULL``).

Reactivity: every change is propagated at once, as an event, not by a periodic scan:

* a local capability added or removed -> the actor's delivery targets are rebuilt, neighbours'
  subscriptions that could now include it turn RESUBSCRIBE, and our capabilities are POSTed to
  every neighbour (IP_075/091) by its *pusher* task, woken up;
* capabilities received from a neighbour (its POST, or the answer to ours) -> the subscriptions
  wanted at neighbours are re-planned and those at that neighbour polled now (RESUBSCRIBE);
* a local subscription added or removed -> re-planned; a new subscription at a neighbour is
  POSTed at once, the answer's endpoints federated at once;
* discovery finding or losing a neighbour -> pushers started or stopped, re-planned.

Timers only bound the delays: DNS every ``discovery.interval_s`` (<= 12 h, IP_089), capabilities
re-POSTed every ``capability_repost_s`` (<= 24 h, IP_091), subscriptions polled every
``poll_interval_s`` (<= 5 min, IP_127).

One :class:`asyncio.Lock` serialises state changes; HTTP requests to neighbours are never made
while holding it (an outgoing subscription's runner only takes it to record a result).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ii_api.capability_selector import capabilities_selector, granted_selector
from ii_api.client import IIClient, IIClientError
from ii_api.config import IIConfig
from ii_api.discovery import Discovery, DiscoveryResult, Neighbour, merge_neighbours, normalise_name
from ii_api.federation import Federation, RemoteEndpoint
from ii_api.imports import TargetedImport
from ii_api.matching import CapabilityMatcher
from ii_api.models import (
    CapabilitiesMessage,
    Capability,
    DeliveriesRequest,
    DeliveriesResponse,
    Delivery,
    DeliveryEndpoint,
    DeliveryStatus,
    Endpoint,
    LocalCapabilitiesRequest,
    LocalCapabilitiesResponse,
    LocalCapability,
    LocalEndpoint,
    LocalSubscription,
    LocalSubscriptionsRequest,
    LocalSubscriptionsResponse,
    NetworkCapabilitiesResponse,
    Subscription,
    SubscriptionPollResponse,
    SubscriptionRequest,
    SubscriptionRequestItem,
    SubscriptionResponse,
    SubscriptionStatus,
)
from ii_api.store import AsyncStore, DuplicatePublicationIdError, IncomingSubscription, Store
from ii_api.store import LocalCapability as StoredCapability
from ii_api.store import LocalSubscription as StoredLocalSubscription
from ii_api.store import OutgoingSubscription as StoredOutgoing
from ii_api.subscriptions import (
    Action,
    DeleteRemote,
    Finished,
    LocalSubscriptionView,
    OutgoingKey,
    OutgoingSubscriptionMachine,
    OutgoingView,
    Persist,
    Phase,
    PollStatus,
    PostRequest,
    Schedule,
    StartFederation,
    StopFederation,
    Timing,
    compile_selector,
    decide_incoming,
    desired_outgoing,
    grant_for,
    local_subscription_state,
    plan_outgoing,
    recheck_incoming,
    same_cn,
)
from interchange.broker.addresses import AddressBook, AddressError, Origin, Scope, SourceSpec, TargetSpec
from interchange.broker.placement import Placement
from interchange.broker.router import BrokerCore

log = logging.getLogger(__name__)

EventSink = Callable[[str, str, dict], None]

#: Prefixes of the broker addresses the II creates (config-file addresses must not use "ii-").
LOCAL_SOURCE_PREFIX = "ii-local-"
NEIGHBOUR_SOURCE_PREFIX = "ii-sub-"
DELIVERY_TARGET_PREFIX = "ii-delivery-"
_LIVE_LOCAL = (SubscriptionStatus.CREATED.value, SubscriptionStatus.ERROR.value)


# ---------------------------------------------------------------------------------- errors
class IIError(Exception):
    """An operation refused; the server answers ``status`` with ``{"error", "field"?}``."""

    status = 400

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class BadRequest(IIError):
    status = 400


class Forbidden(IIError):
    status = 403


class NotFound(IIError):
    status = 404


class Conflict(IIError):
    status = 409


def _and(*selectors: str) -> str:
    """Selectors ANDed, each closed on its own line (a ``--`` comment cannot swallow the rest)."""
    parts = [s for s in selectors if s.strip()]
    if not parts:
        return "TRUE"
    if len(parts) == 1:
        return parts[0]
    return " AND ".join(f"({p}\n)" for p in parts)


def _token() -> str:
    return secrets.token_hex(8)


# ---------------------------------------------------------------------------------- runners
class OutgoingRunner:
    """Drives one :class:`OutgoingSubscriptionMachine`: executes its actions, feeds back results."""

    def __init__(self, service: IIService, row_id: int, machine: OutgoingSubscriptionMachine) -> None:
        self.service = service
        self.row_id = row_id
        self.machine = machine
        self.federation: Federation | None = None
        self._events: asyncio.Queue[Callable[[float], list[Action]]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.finished = False
        self.adopt = False  #: restored before its request was answered: look for it at the neighbour first

    @property
    def key(self) -> OutgoingKey:
        return self.machine.key

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"ii-outgoing-{self.row_id}")

    def send(self, event: Callable[[float], list[Action]]) -> None:
        """Queue an event (a machine method taking ``now``); never blocks."""
        self._events.put_nowait(event)

    def view(self) -> OutgoingView:
        m = self.machine
        return OutgoingView(m.key.neighbour, m.phase, m.status, m.endpoints, m.error)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        pending: deque[Action] = deque(self.machine.start(loop.time()))
        try:
            while not self.finished:
                while pending and not self.finished:
                    more = await self._execute(pending.popleft())
                    pending.extendleft(reversed(more))
                if self.finished:
                    break
                next_at = self.machine.next_at
                timeout = None if next_at is None else max(0.0, next_at - loop.time())
                try:
                    event = await asyncio.wait_for(self._events.get(), timeout)
                except TimeoutError:
                    pending.extend(self.machine.on_timer(loop.time()))
                else:
                    pending.extend(event(loop.time()))
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must not leave the subscription half-handled silently
            log.exception("ii: outgoing subscription %s failed", self.row_id)
        finally:
            if self.federation is not None:
                await self.federation.close()
                self.federation = None

    async def _execute(self, action: Action) -> list[Action]:
        service, machine, now = self.service, self.machine, asyncio.get_running_loop().time
        key = machine.key
        if isinstance(action, PostRequest):
            peer = service.neighbour(key.neighbour)
            if peer is None:
                return machine.post_failed(now(), f"{key.neighbour} is not a discovered neighbour")
            if self.adopt:
                self.adopt = False
                found = await service.find_unclaimed(key)
                if found is not None:  # requested before a crash, its answer never recorded (IP_106)
                    service.event("info", "ii_subscription_adopted", {"neighbour": key.neighbour, "id": found.id})
                    return machine.post_succeeded(now(), found.id, found.path, found.status, found.endpoints or (),
                                                  found.errorMessage)
            request = SubscriptionRequest(name=service.name, subscriptions=[
                SubscriptionRequestItem(selector=key.selector, consumerCommonName=key.consumer_common_name)])
            try:
                response = await service.client.post_subscriptions(peer, request)
            except IIClientError as exc:
                service.event("warning", "ii_subscription_request_failed",
                              {"neighbour": key.neighbour, "selector": key.selector, "error": str(exc)})
                return machine.post_failed(now(), str(exc), exc.status)
            if len(response.subscriptions) != 1:
                return machine.post_failed(now(), f"expected 1 subscription in the answer, got "
                                                  f"{len(response.subscriptions)}")
            sub = response.subscriptions[0]
            service.event("info", "ii_subscription_requested",
                          {"neighbour": key.neighbour, "selector": key.selector, "id": sub.id,
                           "status": sub.status.value})
            return machine.post_succeeded(now(), sub.id, sub.path, sub.status, sub.endpoints or (), sub.errorMessage)
        if isinstance(action, PollStatus):
            peer = service.neighbour(key.neighbour)
            if peer is None:
                return machine.poll_failed(now(), f"{key.neighbour} is not a discovered neighbour")
            try:
                poll = await service.client.poll_subscription(peer, action.path)
            except IIClientError as exc:
                return machine.poll_failed(now(), str(exc), exc.status)
            return machine.poll_succeeded(now(), poll.status, poll.endpoints, poll.errorMessage)
        if isinstance(action, DeleteRemote):
            peer = service.neighbour(key.neighbour)
            if peer is None:
                return machine.delete_failed(now(), f"{key.neighbour} is not a discovered neighbour")
            try:
                await service.client.delete_subscription(peer, action.path)
            except IIClientError as exc:
                return machine.delete_failed(now(), str(exc), exc.status)
            return machine.delete_succeeded(now())
        if isinstance(action, StartFederation):
            if self.federation is None:
                sink = TargetedImport(service.core, lambda: service.import_targets(key))
                self.federation = Federation(sink, service.client_context, service.name,  # type: ignore[arg-type]
                                             min_backoff=service.config.federation_backoff_s)
            self.federation.pull("subscription", [RemoteEndpoint(key.neighbour, service.endpoint_address(
                key.neighbour, e.host), e.port, e.source) for e in action.endpoints])  # type: ignore[arg-type]
            service.event("info", "ii_federation_started",
                          {"neighbour": key.neighbour, "selector": key.selector,
                           "endpoints": [e.to_json() for e in action.endpoints]})
            return []
        if isinstance(action, StopFederation):
            if self.federation is not None:
                self.federation.stop("subscription")
            return []
        if isinstance(action, Persist):
            await service._outgoing_changed(self)
            return []
        if isinstance(action, Schedule):
            return []  # the loop waits until machine.next_at
        if isinstance(action, Finished):
            self.finished = True
            if self.federation is not None:
                await self.federation.close()
                self.federation = None
            await service._outgoing_finished(self, action.reason)
            return []
        raise AssertionError(f"unknown action {action!r}")

    def links(self) -> list[Any]:
        """Federation link statuses (for operators and tests)."""
        if self.federation is None:
            return []
        return list(self.federation.status.get("subscription", []))


@dataclass
class _Pusher:
    """Posts our capabilities to one neighbour when woken, and at least every repost interval."""

    wake: asyncio.Event
    task: asyncio.Task[None] | None = None
    pushes: int = 0
    last_error: str | None = None


# ---------------------------------------------------------------------------------- the service
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
        self._lock = asyncio.Lock()
        self._neighbours: dict[str, Neighbour] = {}
        self._neighbour_caps: dict[str, list[Capability]] = {}
        self._local_caps: dict[int, StoredCapability] = {}
        self._local_cap_models: dict[int, Capability] = {}
        self._local_subs: dict[int, StoredLocalSubscription] = {}
        self._incoming_grants: dict[int, frozenset[str]] = {}
        self._outgoing: dict[OutgoingKey, OutgoingRunner] = {}
        self._retiring: set[OutgoingRunner] = set()
        self._serves: dict[OutgoingKey, frozenset[int]] = {}
        self._pushers: dict[str, _Pusher] = {}
        self._discovery: Discovery | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        """Restore the state from the store, recreate broker addresses, start the timers."""
        async with self._lock:
            await self._restore()
        for name in list(self._neighbours):
            self._start_pusher(name)
        if self.config.discovery is not None:
            discovery_config = self.config.discovery
            if discovery_config.own_name is None:
                discovery_config = discovery_config.model_copy(update={"own_name": self.name})
            self._discovery = Discovery(discovery_config, on_result=self._on_discovery)
            self._spawn(self._discovery.run_periodically(), "ii-discovery")
        self.event("info", "ii_started", {"neighbours": sorted(self._neighbours),
                                          "local_capabilities": len(self._local_caps),
                                          "local_subscriptions": len(self._local_subs),
                                          "outgoing_subscriptions": len(self._outgoing)})

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in self._tasks]
        tasks += [p.task for p in self._pushers.values() if p.task is not None]
        runners = [*self._outgoing.values(), *self._retiring]
        tasks += [r.task for r in runners if r.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for runner in runners:
            if runner.federation is not None:
                await runner.federation.close()
        await self.client.close()

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def event(self, level: str, kind: str, fields: dict) -> None:
        """An II event for the node's JSON log (and the Python log at debug level)."""
        log.debug("%s %s", kind, fields)
        if self._event is not None:
            self._event(level, kind, fields)

    # ------------------------------------------------------------------ identities (IP_125/126)
    def neighbour(self, name: str) -> Neighbour | None:
        try:
            return self._neighbours.get(normalise_name(name))
        except ValueError:
            return None

    @property
    def neighbours(self) -> tuple[Neighbour, ...]:
        return tuple(self._neighbours[n] for n in sorted(self._neighbours))

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
        return [self._local_cap_models[i] for i in sorted(self._local_cap_models)]

    def capabilities_message(self) -> CapabilitiesMessage:
        return CapabilitiesMessage(name=self.name, capabilities=self.local_capabilities())

    def neighbour_capabilities(self, name: str) -> list[Capability]:
        return list(self._neighbour_caps.get(name, ()))

    async def receive_capabilities(self, cn: str, message: CapabilitiesMessage) -> CapabilitiesMessage:
        """IP_076/094: replace the neighbour's capabilities; answer with ours."""
        name = self.require_neighbour(cn, message.name)
        async with self._lock:
            await self._set_neighbour_capabilities(name, message)
        return self.capabilities_message()

    async def _set_neighbour_capabilities(self, name: str, message: CapabilitiesMessage) -> None:
        """Caller holds the lock."""
        await self.store.put_neighbour_capabilities(name, message.to_json())
        self._neighbour_caps[name] = list(message.capabilities)
        self.event("info", "ii_capabilities_received", {"neighbour": name, "count": len(message.capabilities)})
        await self._reconcile()
        for runner in self._outgoing.values():
            if runner.key.neighbour == name:
                runner.send(runner.machine.nudge)

    # ------------------------------------------------------------------ neighbour subscriptions (incoming)
    def _incoming_path(self, owner: str, sub_id: int) -> str:
        return f"{self.base}/{owner}/subscriptions/{sub_id}"

    def _advertised(self, source: str) -> list[dict[str, Any]]:
        """A source's endpoints: one per broker process (each routes its own targets' data to its copy)."""
        return [e.to_json() for e in self._local_endpoints(source)]

    def _local_endpoints(self, source: str) -> list[LocalEndpoint]:
        return [LocalEndpoint(host=self.amqp_host, port=port, source=source) for port in self.amqp_ports]

    def _target_port(self, target: str) -> int:
        """The advertised port of the broker process that serves ``target`` (interchange.broker.placement)."""
        spec = self.addresses.target(target)
        return self.amqp_ports[self.placement.owner_of(target, spec.process if spec is not None else None)]

    def _incoming_wire(self, row: IncomingSubscription) -> Subscription:
        return Subscription(id=str(row.id), selector=row.selector, consumerCommonName=row.consumer_common_name,
                            path=self._incoming_path(row.owner_cn, row.id), status=SubscriptionStatus(row.status),
                            errorMessage=row.error, endpoints=[Endpoint.model_validate(e) for e in row.endpoints],
                            lastUpdatedTimestamp=row.last_updated_ms)

    def _incoming_poll(self, row: IncomingSubscription) -> SubscriptionPollResponse:
        return SubscriptionPollResponse(
            id=str(row.id), selector=row.selector, consumerCommonName=row.consumer_common_name,
            path=self._incoming_path(row.owner_cn, row.id), status=SubscriptionStatus(row.status),
            endpoints=[Endpoint.model_validate(e) for e in row.endpoints], errorMessage=row.error,
            lastUpdatedTimestamp=row.last_updated_ms)

    def _neighbour_source(self, address: str, consumer: str, selector: str) -> SourceSpec:
        # IP_109: scope LOCAL, only locally produced data is served to other interchanges.
        return SourceSpec(address=address, consumers=frozenset({consumer}), selector=selector, scope=Scope.LOCAL)

    async def receive_subscriptions(self, cn: str, request: SubscriptionRequest) -> SubscriptionResponse:
        """IP_078/097/134: decide each requested subscription, create the sources, answer (202)."""
        name = self.require_neighbour(cn, request.name)
        async with self._lock:
            capabilities = self.local_capabilities()
            existing = len(await self.store.list_incoming_subscriptions(name))
            decisions = []
            for item in request.subscriptions:
                decision = decide_incoming(item.selector, item.consumerCommonName, name, capabilities,
                                           self.config.policy, existing=existing, own_name=self.name)
                address = NEIGHBOUR_SOURCE_PREFIX + _token() if decision.status is SubscriptionStatus.CREATED else None
                decisions.append((item, decision, address))
                existing += 1

            def write(store: Store) -> list[IncomingSubscription]:
                rows = []
                with store.transaction():
                    for item, decision, address in decisions:
                        row = store.add_incoming_subscription(
                            name, item.selector, status=decision.status.value,
                            consumer_common_name=decision.consumer, source_address=address)
                        rows.append(store.update_incoming_subscription(
                            row.id, endpoints=self._advertised(address) if address else [], error=decision.error))
                return rows

            rows = await self.store.call(write)
            for index, (row, (item, decision, address)) in enumerate(zip(list(rows), decisions)):
                if address is not None:
                    self._incoming_grants[row.id] = decision.grant
                    try:
                        self.addresses.put_source(self._neighbour_source(address, decision.consumer,
                                                                         decision.source_selector or "FALSE"))
                    except AddressError as exc:
                        rows[index] = await self.store.update_incoming_subscription(
                            row.id, status=SubscriptionStatus.ERROR.value, endpoints=[],
                            error=f"the source could not be created: {exc}")
                self.event("info", "ii_subscription_received",
                           {"neighbour": name, "id": row.id, "selector": item.selector,
                            "consumer": decision.consumer, "status": decision.status.value, "error": decision.error})
        answer = [self._incoming_wire(r) for r in rows]
        if not self.config.created_in_answer:  # the appendix D way: REQUESTED now, CREATED when polled
            answer = [s.model_copy(update={"status": SubscriptionStatus.REQUESTED, "endpoints": None})
                      if s.status is SubscriptionStatus.CREATED else s for s in answer]
        return SubscriptionResponse(name=self.name, subscriptions=answer)

    async def list_incoming(self, cn: str) -> SubscriptionResponse:
        """IP_107: the requesting interchange's subscriptions here."""
        name = self.require_neighbour(cn)
        rows = await self.store.list_incoming_subscriptions(name)
        return SubscriptionResponse(name=self.name, subscriptions=[self._incoming_wire(r) for r in rows])

    async def get_incoming(self, cn: str, sub_id: int) -> SubscriptionPollResponse:
        """IP_108: one subscription's status; only its owner may see it."""
        name = self.require_neighbour(cn)
        row = await self.store.get_incoming_subscription(sub_id, owner_cn=name)
        if row is None:
            raise NotFound(f"no subscription {sub_id} of {name}")
        return self._incoming_poll(row)

    async def delete_incoming(self, cn: str, sub_id: int) -> None:
        """IP_107: terminate a subscription (its source goes); only its owner may."""
        name = self.require_neighbour(cn)
        async with self._lock:
            row = await self.store.get_incoming_subscription(sub_id, owner_cn=name)
            if row is None or not await self.store.delete_incoming_subscription(sub_id, owner_cn=name):
                raise NotFound(f"no subscription {sub_id} of {name}")
            self._incoming_grants.pop(sub_id, None)
            if row.source_address and self.addresses.source(row.source_address) is not None:
                self.addresses.remove(row.source_address)
        self.event("info", "ii_subscription_deleted", {"neighbour": name, "id": sub_id})

    async def _recheck_incoming(self) -> None:
        """RESUBSCRIBE where a new capability is relevant (caller holds the lock)."""
        capabilities = self.local_capabilities()
        for row in await self.store.list_incoming_subscriptions():
            grant = self._incoming_grants.get(row.id, frozenset())
            new = recheck_incoming(SubscriptionStatus(row.status), grant, row.selector, row.consumer_common_name,
                                   row.owner_cn, capabilities)
            if new is not None:
                await self.store.update_incoming_subscription(row.id, status=new.value, error=None)
                self.event("info", "ii_subscription_resubscribe", {"neighbour": row.owner_cn, "id": row.id})

    # ------------------------------------------------------------------ local actor: capabilities
    def _actor_path(self, actor: str, kind: str, item_id: int | None = None) -> str:
        path = f"{self.base}/{actor}/{kind}"
        return path if item_id is None else f"{path}/{item_id}"

    def _local_capability_wire(self, row: StoredCapability) -> LocalCapability:
        return LocalCapability(id=str(row.id), path=self._actor_path(row.actor_cn, "capabilities", row.id),
                               definition=self._local_cap_models[row.id])

    def _network_publication_ids(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for neighbour, capabilities in self._neighbour_caps.items():
            for capability in capabilities:
                found.setdefault(capability.application.publicationId, neighbour)
        return found

    async def add_capabilities(self, actor: str, request: LocalCapabilitiesRequest) -> LocalCapabilitiesResponse:
        """IP_077: register what an actor publishes; a publicationId is unique across the network."""
        seen: set[str] = set()
        for index, capability in enumerate(request.capabilities):
            app = capability.application
            if not app.publicationId.startswith(app.publisherId + ":") or app.publicationId == app.publisherId + ":":
                raise BadRequest(f"capabilities.{index}.application.publicationId: must be "
                                 f"'<publisherId>:<id>' with publisherId {app.publisherId!r}",
                                 f"capabilities.{index}.application.publicationId")
            if app.publicationId in seen:
                raise Conflict(f"publicationId {app.publicationId!r} appears twice in the request",
                               f"capabilities.{index}.application.publicationId")
            seen.add(app.publicationId)
        async with self._lock:
            elsewhere = self._network_publication_ids()
            for index, capability in enumerate(request.capabilities):
                pid = capability.application.publicationId
                if pid in elsewhere:
                    raise Conflict(f"publicationId {pid!r} is already announced by {elsewhere[pid]}",
                                   f"capabilities.{index}.application.publicationId")
            try:
                rows = await self.store.add_local_capabilities(
                    actor, [(c.application.publicationId, c.to_json()) for c in request.capabilities])
            except DuplicatePublicationIdError as exc:
                raise Conflict(str(exc), "publicationId") from None
            for row, capability in zip(rows, request.capabilities):
                self._local_caps[row.id] = row
                self._local_cap_models[row.id] = Capability.model_validate(row.document)
            self.event("info", "ii_capabilities_registered",
                       {"actor": actor, "publicationIds": [r.publication_id for r in rows]})
            await self._local_capabilities_changed(actor)
        return LocalCapabilitiesResponse(name=actor, capabilities=[self._local_capability_wire(r) for r in rows])

    async def list_capabilities(self, actor: str) -> LocalCapabilitiesResponse:
        rows = [r for i, r in sorted(self._local_caps.items()) if r.actor_cn == actor]
        return LocalCapabilitiesResponse(name=actor, capabilities=[self._local_capability_wire(r) for r in rows])

    async def get_capability(self, actor: str, cap_id: int) -> LocalCapability:
        row = self._local_caps.get(cap_id)
        if row is None or row.actor_cn != actor:
            raise NotFound(f"no capability {cap_id} of {actor}")
        return self._local_capability_wire(row)

    async def delete_capability(self, actor: str, cap_id: int) -> None:
        async with self._lock:
            row = self._local_caps.get(cap_id)
            if row is None or row.actor_cn != actor or not await self.store.delete_local_capability(
                    cap_id, actor_cn=actor):
                raise NotFound(f"no capability {cap_id} of {actor}")
            del self._local_caps[cap_id]
            del self._local_cap_models[cap_id]
            self.event("info", "ii_capability_deleted", {"actor": actor, "publicationId": row.publication_id})
            await self._local_capabilities_changed(actor)

    async def _local_capabilities_changed(self, actor: str) -> None:
        """Caller holds the lock. Deliveries rebuilt, RESUBSCRIBE checks, neighbours told (IP_075/091)."""
        for delivery in await self.store.list_deliveries(actor):
            await self._apply_delivery(delivery)
        await self._recheck_incoming()
        for pusher in self._pushers.values():
            pusher.wake.set()

    # ------------------------------------------------------------------ local actor: deliveries
    def _actor_capabilities(self, actor: str) -> list[Capability]:
        return [self._local_cap_models[i] for i, r in sorted(self._local_caps.items()) if r.actor_cn == actor]

    def _delivery_wire(self, row: Any) -> Delivery:
        endpoints = []
        if row.status == DeliveryStatus.CREATED.value and row.target_address:
            endpoints = [DeliveryEndpoint(host=self.amqp_host, port=self._target_port(row.target_address),
                                          target=row.target_address)]
        return Delivery(id=str(row.id), path=self._actor_path(row.actor_cn, "deliveries", row.id),
                        selector=row.selector, status=DeliveryStatus(row.status), endpoints=endpoints,
                        lastUpdatedTimestamp=row.last_updated_ms, errorMessage=row.error)

    def _delivery_target(self, actor: str, selector: str, address: str) -> TargetSpec | None:
        """The target of a delivery: the messages that fit the actor's capabilities it covers."""
        matcher = CapabilityMatcher(selector)
        covered = [c for c in self._actor_capabilities(actor) if matcher.matches(c.application, c.metadata)]
        if not covered:
            return None
        shard_counts = {c.metadata.shardCount for c in covered}
        shard_count = shard_counts.pop() if len(shard_counts) == 1 else None
        return TargetSpec(address=address, publishers=frozenset({actor}),
                          selector=_and(selector, capabilities_selector(covered)), origin=Origin.LOCAL,
                          shard_count=shard_count)

    async def _apply_delivery(self, row: Any) -> Any:
        """Create/replace/remove the delivery's target by the actor's capabilities (lock held)."""
        if row.status not in (DeliveryStatus.CREATED.value, DeliveryStatus.NO_OVERLAP.value):
            return row
        address = row.target_address or DELIVERY_TARGET_PREFIX + _token()
        spec = self._delivery_target(row.actor_cn, row.selector, address)
        if spec is None:
            if self.addresses.target(address) is not None:
                self.addresses.remove(address)
            status, error = DeliveryStatus.NO_OVERLAP.value, "the selector matches none of your capabilities"
        else:
            try:
                self.addresses.put_target(spec)
                status, error = DeliveryStatus.CREATED.value, None
            except AddressError as exc:
                status, error = DeliveryStatus.ERROR.value, f"the target could not be created: {exc}"
        if (status, address, error) != (row.status, row.target_address, row.error):
            row = await self.store.update_delivery(row.id, status=status, target_address=address, error=error)
        return row

    async def add_deliveries(self, actor: str, request: DeliveriesRequest) -> DeliveriesResponse:
        """Where an actor publishes: CREATED with a target when its selector covers some of its
        capabilities, NO_OVERLAP otherwise, NOT_VALID for an invalid selector. All rows are written
        in one transaction before the targets are made and the answer is sent."""
        async with self._lock:
            planned: list[tuple[str, str, str | None, str | None, TargetSpec | None]] = []
            for item in request.deliveries:
                compiled, problem = compile_selector(item.selector)
                if compiled is None:
                    planned.append((item.selector, DeliveryStatus.NOT_VALID.value, None, problem, None))
                    continue
                address = DELIVERY_TARGET_PREFIX + _token()
                spec = self._delivery_target(actor, item.selector, address)
                if spec is None:
                    planned.append((item.selector, DeliveryStatus.NO_OVERLAP.value, address,
                                    "the selector matches none of your capabilities", None))
                else:
                    planned.append((item.selector, DeliveryStatus.CREATED.value, address, None, spec))

            def write(store: Store) -> list[Any]:
                with store.transaction():
                    return [store.add_delivery(actor, selector, status=status, target_address=address, error=error)
                            for selector, status, address, error, _ in planned]

            rows = await self.store.call(write)
            for index, (row, (_, _, _, _, spec)) in enumerate(zip(list(rows), planned)):
                if spec is not None:
                    try:
                        self.addresses.put_target(spec)
                    except AddressError as exc:
                        rows[index] = await self.store.update_delivery(
                            row.id, status=DeliveryStatus.ERROR.value, error=f"the target could not be created: {exc}")
                self.event("info", "ii_delivery_created", {"actor": actor, "id": row.id, "status": rows[index].status,
                                                           "target": row.target_address})
        return DeliveriesResponse(name=actor, deliveries=[self._delivery_wire(r) for r in rows])

    async def list_deliveries(self, actor: str) -> DeliveriesResponse:
        rows = await self.store.list_deliveries(actor)
        return DeliveriesResponse(name=actor, deliveries=[self._delivery_wire(r) for r in rows])

    async def get_delivery(self, actor: str, delivery_id: int) -> Delivery:
        row = await self.store.get_delivery(delivery_id, actor_cn=actor)
        if row is None:
            raise NotFound(f"no delivery {delivery_id} of {actor}")
        return self._delivery_wire(row)

    async def delete_delivery(self, actor: str, delivery_id: int) -> None:
        async with self._lock:
            row = await self.store.get_delivery(delivery_id, actor_cn=actor)
            if row is None or not await self.store.delete_delivery(delivery_id, actor_cn=actor):
                raise NotFound(f"no delivery {delivery_id} of {actor}")
            if row.target_address and self.addresses.target(row.target_address) is not None:
                self.addresses.remove(row.target_address)

    # ------------------------------------------------------------------ local actor: subscriptions
    def _local_subscription_wire(self, row: StoredLocalSubscription) -> LocalSubscription:
        return LocalSubscription(id=str(row.id), path=self._actor_path(row.actor_cn, "subscriptions", row.id),
                                 selector=row.selector, consumerCommonName=row.consumer_common_name,
                                 status=SubscriptionStatus(row.status),
                                 endpoints=[LocalEndpoint.model_validate(e) for e in row.endpoints],
                                 lastUpdatedTimestamp=row.last_updated_ms, errorMessage=row.error)

    @staticmethod
    def _local_source_address(row: StoredLocalSubscription) -> str | None:
        if row.endpoints and isinstance(row.endpoints[0], dict):
            source = row.endpoints[0].get("source")
            return source if isinstance(source, str) and source.startswith(LOCAL_SOURCE_PREFIX) else None
        return None

    def _local_source(self, row: StoredLocalSubscription, address: str) -> SourceSpec:
        selector = row.selector if row.selector.strip() else None
        return SourceSpec(address=address, consumers=frozenset({row.actor_cn}), selector=selector, scope=Scope.ALL)

    async def add_local_subscriptions(self, actor: str,
                                      request: LocalSubscriptionsRequest) -> LocalSubscriptionsResponse:
        """An actor's subscriptions: a local source now (CREATED), subscriptions at neighbours that can
        serve it requested at once (IP_079); NOT_VALID / ILLEGAL with an errorMessage otherwise.
        All rows are written in one transaction before the sources are made and the answer is sent."""
        async with self._lock:
            existing = sum(1 for r in self._local_subs.values() if r.actor_cn == actor)
            planned: list[tuple[SubscriptionRequestItem, SubscriptionStatus, str | None, str | None]] = []
            for item in request.subscriptions:
                ccn = item.consumerCommonName
                compiled, problem = compile_selector(item.selector)
                if ccn is not None and ccn != actor:
                    planned.append((item, SubscriptionStatus.ILLEGAL, None, "consumerCommonName may only be your "
                                    "own common name (to ask for a redirect)"))
                elif compiled is None:
                    planned.append((item, SubscriptionStatus.NOT_VALID, None, problem))
                elif (problem := self.config.policy.check(item.selector, compiled.ast, existing=existing)) is not None:
                    planned.append((item, SubscriptionStatus.ILLEGAL, None, problem))
                else:
                    planned.append((item, SubscriptionStatus.CREATED, LOCAL_SOURCE_PREFIX + _token(), None))
                    existing += 1

            def write(store: Store) -> list[StoredLocalSubscription]:
                rows = []
                with store.transaction():
                    for item, status, address, problem in planned:
                        row = store.add_local_subscription(actor, item.selector, status=status.value,
                                                           consumer_common_name=item.consumerCommonName, error=problem)
                        if address is not None:
                            row = store.update_local_subscription(row.id, endpoints=[
                                e.to_json() for e in self._local_endpoints(address)])
                        rows.append(row)
                return rows

            rows = await self.store.call(write)
            for row, (_, _, address, _) in zip(rows, planned):
                if address is not None:
                    try:
                        self.addresses.put_source(self._local_source(row, address))
                    except AddressError as exc:
                        row = await self.store.update_local_subscription(
                            row.id, status=SubscriptionStatus.ERROR.value, endpoints=[],
                            error=f"the source could not be created: {exc}")
                self._local_subs[row.id] = row
                self.event("info", "ii_local_subscription_created",
                           {"actor": actor, "id": row.id, "selector": row.selector, "status": row.status,
                            "redirect": row.consumer_common_name is not None, "error": row.error})
            await self._reconcile()
            rows = [self._local_subs[r.id] for r in rows]
        return LocalSubscriptionsResponse(name=actor, subscriptions=[self._local_subscription_wire(r) for r in rows])

    async def list_local_subscriptions(self, actor: str) -> LocalSubscriptionsResponse:
        rows = [r for _, r in sorted(self._local_subs.items()) if r.actor_cn == actor]
        return LocalSubscriptionsResponse(name=actor, subscriptions=[self._local_subscription_wire(r) for r in rows])

    async def get_local_subscription(self, actor: str, sub_id: int) -> LocalSubscription:
        row = self._local_subs.get(sub_id)
        if row is None or row.actor_cn != actor:
            raise NotFound(f"no subscription {sub_id} of {actor}")
        return self._local_subscription_wire(row)

    async def delete_local_subscription(self, actor: str, sub_id: int) -> None:
        """The source goes; subscriptions at neighbours serving only it are deleted there."""
        async with self._lock:
            row = self._local_subs.get(sub_id)
            if row is None or row.actor_cn != actor or not await self.store.delete_local_subscription(
                    sub_id, actor_cn=actor):
                raise NotFound(f"no subscription {sub_id} of {actor}")
            del self._local_subs[sub_id]
            address = self._local_source_address(row)
            if address and self.addresses.source(address) is not None:
                self.addresses.remove(address)
            self.event("info", "ii_local_subscription_deleted", {"actor": actor, "id": sub_id})
            await self._reconcile()

    async def _refresh_local(self, sub_ids: Iterable[int]) -> None:
        """Recompute local subscriptions' status and endpoints from the outgoing ones (lock held)."""
        views: dict[int, list[OutgoingView]] = {}
        for key, ids in self._serves.items():
            runner = self._outgoing.get(key)
            if runner is not None:
                for sub_id in ids:
                    views.setdefault(sub_id, []).append(runner.view())
        for sub_id in sorted(set(sub_ids)):
            row = self._local_subs.get(sub_id)
            address = self._local_source_address(row) if row is not None else None
            if row is None or row.status not in _LIVE_LOCAL or address is None:
                continue
            local = self._local_endpoints(address)  # as advertised now
            status, endpoints, error = local_subscription_state(row.consumer_common_name is not None, local,
                                                                views.get(sub_id, []))
            wire = [e.to_json() for e in endpoints]
            if (status.value, wire, error) != (row.status, row.endpoints, row.error):
                self._local_subs[sub_id] = await self.store.update_local_subscription(
                    sub_id, status=status.value, endpoints=wire, error=error)

    def import_targets(self, key: OutgoingKey) -> list[str]:
        """Local sources that receive what the subscription ``key`` brings (see ii_api.imports)."""
        addresses = []
        for sub_id in self._serves.get(key, ()):
            row = self._local_subs.get(sub_id)
            if row is not None:
                address = self._local_source_address(row)
                if address:
                    addresses.append(address)
        return addresses

    # ------------------------------------------------------------------ outgoing subscriptions
    def outgoing(self) -> list[OutgoingRunner]:
        return [self._outgoing[k] for k in sorted(self._outgoing)]

    async def _reconcile(self) -> None:
        """Request what is wanted and not yet requested (IP_106); withdraw what is no longer wanted.
        Caller holds the lock."""
        if self._closed:
            return
        views = [LocalSubscriptionView(r.id, r.actor_cn, r.selector, r.consumer_common_name is not None)
                 for r in self._local_subs.values() if r.status in _LIVE_LOCAL]
        caps = {n: c for n, c in self._neighbour_caps.items() if n in self._neighbours}
        desired = desired_outgoing(views, caps)
        self._serves = desired
        create, withdraw = plan_outgoing(desired, self._outgoing)
        for key in withdraw:
            runner = self._outgoing.pop(key)
            self._retiring.add(runner)
            runner.send(runner.machine.withdraw)
            self.event("info", "ii_subscription_withdrawn", {"neighbour": key.neighbour, "selector": key.selector})
        for key in create:
            row = await self.store.add_outgoing_subscription(key.neighbour, key.selector, status=Phase.NEW.value,
                                                             consumer_common_name=key.consumer_common_name)
            runner = OutgoingRunner(self, row.id, OutgoingSubscriptionMachine(key, self.timing))
            self._outgoing[key] = runner
            runner.start()
        await self._refresh_local(self._local_subs)

    async def find_unclaimed(self, key: OutgoingKey) -> Subscription | None:
        """A subscription of ours at the neighbour with this selector and consumer that no row of ours
        knows (IP_107 list), or None; errors mean None (it is then requested anew)."""
        peer = self.neighbour(key.neighbour)
        if peer is None:
            return None
        try:
            listed = await self.client.list_subscriptions(peer, self.name)
        except IIClientError:
            return None
        async with self._lock:  # after the restore: every row's remote id is known
            claimed = {r.machine.remote_id for r in (*self._outgoing.values(), *self._retiring)
                       if r.key.neighbour == key.neighbour and r.machine.remote_id is not None}
        wanted = key.consumer_common_name or self.name
        for sub in listed.subscriptions:
            if (sub.id not in claimed and sub.selector == key.selector
                    and same_cn(sub.consumerCommonName or self.name, wanted)):
                return sub
        return None

    async def _outgoing_changed(self, runner: OutgoingRunner) -> None:
        m = runner.machine
        endpoints = [e.to_json() for e in m.endpoints]
        async with self._lock:
            with contextlib.suppress(LookupError):
                await self.store.update_outgoing_subscription(runner.row_id, status=m.stored_status,
                                                              remote_id=m.remote_id, remote_path=m.remote_path,
                                                              endpoints=endpoints, error=m.error)
            if self._outgoing.get(m.key) is runner:
                await self._refresh_local(self._serves.get(m.key, ()))
        self.event("info", "ii_subscription_status", {"neighbour": m.key.neighbour, "selector": m.key.selector,
                                                      "phase": m.phase.value,
                                                      "status": m.status.value if m.status else None,
                                                      "error": m.error})

    async def _outgoing_finished(self, runner: OutgoingRunner, reason: str) -> None:
        async with self._lock:
            await self.store.delete_outgoing_subscription(runner.row_id)
            self._retiring.discard(runner)
            if self._outgoing.get(runner.key) is runner:
                del self._outgoing[runner.key]
                await self._reconcile()  # still wanted (RESUBSCRIBE, forgotten): requested anew
        self.event("info", "ii_subscription_finished", {"neighbour": runner.key.neighbour,
                                                        "selector": runner.key.selector, "reason": reason})

    # ------------------------------------------------------------------ network capabilities
    async def network_capabilities(self, actor: str, selector: str | None) -> NetworkCapabilitiesResponse:
        """Capabilities anywhere in the federation (ours and our neighbours') that ``selector`` matches."""
        everything = self.local_capabilities() + [c for n in sorted(self._neighbour_caps)
                                                  for c in self._neighbour_caps[n]]
        if selector is None or not selector.strip():
            return NetworkCapabilitiesResponse(name=actor, selector=selector or "", capabilities=everything)
        compiled, problem = compile_selector(selector)
        if compiled is None:
            raise BadRequest(problem or "invalid selector", "selector")
        matcher = CapabilityMatcher(compiled)
        return NetworkCapabilitiesResponse(name=actor, selector=selector, capabilities=[
            c for c in everything if matcher.matches(c.application, c.metadata)])

    # ------------------------------------------------------------------ capability pushes (IP_075/091)
    def _start_pusher(self, name: str) -> None:
        if self._closed or name in self._pushers:
            return
        pusher = _Pusher(asyncio.Event())
        pusher.wake.set()  # IP_091: our capabilities go to a new neighbour at once
        self._pushers[name] = pusher
        pusher.task = asyncio.get_running_loop().create_task(self._push_loop(name, pusher), name=f"ii-push-{name}")

    def _stop_pusher(self, name: str) -> None:
        pusher = self._pushers.pop(name, None)
        if pusher is not None and pusher.task is not None:
            pusher.task.cancel()

    async def _push_loop(self, name: str, pusher: _Pusher) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        due = loop.time() + self.config.capability_repost_s
        while True:
            timeout = max(0.0, due - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pusher.wake.wait(), timeout)
            pusher.wake.clear()
            peer = self._neighbours.get(name)
            if peer is None:
                return
            try:
                theirs = await self.client.post_capabilities(peer, self.capabilities_message())
            except IIClientError as exc:
                failures += 1
                pusher.last_error = str(exc)
                delay = min(self.config.retry_min_s * 2 ** (failures - 1), self.config.retry_max_s,
                            self.config.capability_repost_s)
                due = loop.time() + delay
                self.event("warning", "ii_capabilities_push_failed", {"neighbour": name, "error": str(exc),
                                                                      "retry_in_s": delay})
                continue
            failures, pusher.last_error = 0, None
            pusher.pushes += 1
            due = loop.time() + self.config.capability_repost_s
            self.event("info", "ii_capabilities_pushed", {"neighbour": name,
                                                          "count": len(self._local_cap_models)})
            if not same_cn(theirs.name, name):
                self.event("warning", "ii_capabilities_answer_ignored",
                           {"neighbour": name, "reason": f"answer names {theirs.name!r}"})
                continue
            try:
                async with self._lock:
                    if name in self._neighbours:
                        await self._set_neighbour_capabilities(name, theirs)
            except Exception:  # a bug or a store failure must not end the pushes to this neighbour
                log.exception("ii: recording the capabilities of %s failed", name)
                due = loop.time() + self.config.retry_max_s

    def pusher_state(self, name: str) -> _Pusher | None:
        return self._pushers.get(name)

    # ------------------------------------------------------------------ discovery (IP_073/089)
    async def _on_discovery(self, result: DiscoveryResult) -> None:
        if self._closed:
            return
        async with self._lock:
            merged = {n.name: n for n in merge_neighbours(self._neighbours.values(), result)}
            await self.store.upsert_neighbours(result.neighbours)
            gone = set(self._neighbours) - set(merged)
            changed = {name for name, n in merged.items()
                       if name not in self._neighbours or (self._neighbours[name].host, self._neighbours[name].port)
                       != (n.host, n.port)}
            for name in gone:
                await self.store.delete_neighbour(name)
                self._neighbour_caps.pop(name, None)
                self._stop_pusher(name)
            self._neighbours = merged
            for name in sorted(changed):
                if name in self._pushers:
                    self._pushers[name].wake.set()
                else:
                    self._start_pusher(name)
            if gone or changed:
                self.event("info", "ii_neighbours_changed", {"neighbours": sorted(merged), "gone": sorted(gone),
                                                             "new_or_moved": sorted(changed)})
                await self._reconcile()
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
            self._neighbours[stored.name] = Neighbour(stored.name, stored.host, stored.port, stored.domain,
                                                      stored.priority, stored.weight)
        for document in await self.store.list_neighbour_capabilities():
            try:
                self._neighbour_caps[document.neighbour] = list(
                    CapabilitiesMessage.model_validate(document.document).capabilities)
            except ValidationError:
                log.warning("ii: stored capabilities of %s are unreadable; ignored", document.neighbour)
        for row in await self.store.list_local_capabilities():
            self._local_caps[row.id] = row
            self._local_cap_models[row.id] = Capability.model_validate(row.document)
        for delivery in await self.store.list_deliveries():
            await self._apply_delivery(delivery)
        for sub in await self.store.list_local_subscriptions():
            self._local_subs[sub.id] = sub
            address = self._local_source_address(sub)
            if sub.status in _LIVE_LOCAL and address:
                self.addresses.put_source(self._local_source(sub, address))
        capabilities = self.local_capabilities()
        for incoming in await self.store.list_incoming_subscriptions():
            if incoming.source_address and incoming.endpoints and incoming.endpoints != self._advertised(
                    incoming.source_address):  # the advertised host, port or process count changed
                incoming = await self.store.update_incoming_subscription(
                    incoming.id, endpoints=self._advertised(incoming.source_address))
            if incoming.source_address and incoming.status != SubscriptionStatus.ERROR.value:
                _, grant = grant_for(incoming.selector, incoming.consumer_common_name, incoming.owner_cn, capabilities)
                self._incoming_grants[incoming.id] = grant
                self.addresses.put_source(self._neighbour_source(
                    incoming.source_address, incoming.consumer_common_name or incoming.owner_cn,
                    granted_selector(incoming.selector, grant)))
        for stored_out in await self.store.list_outgoing_subscriptions():
            self._restore_outgoing(stored_out)
        await self._reconcile()

    def _restore_outgoing(self, row: StoredOutgoing) -> None:
        key = OutgoingKey(row.neighbour, row.selector, row.consumer_common_name)
        endpoints = []
        for item in row.endpoints or []:
            with contextlib.suppress(ValidationError):
                endpoints.append(Endpoint.model_validate(item))
        machine = OutgoingSubscriptionMachine.restore(key, row.status, row.remote_id, row.remote_path, endpoints,
                                                      row.error, self.timing)
        runner = OutgoingRunner(self, row.id, machine)
        runner.adopt = machine.phase is Phase.NEW
        if key in self._outgoing or machine.phase is Phase.DELETING:
            machine.withdrawn = True  # a duplicate, or being deleted when we stopped: finish deleting it
            self._retiring.add(runner)
        else:
            self._outgoing[key] = runner
        runner.start()

    # ------------------------------------------------------------------ status (operators, tests)
    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "neighbours": [{"name": n.name, "host": n.host, "port": n.port,
                            "capabilities": len(self._neighbour_caps.get(n.name, ())),
                            "pushes": self._pushers[n.name].pushes if n.name in self._pushers else 0}
                           for n in self.neighbours],
            "local_capabilities": len(self._local_cap_models),
            "outgoing": [{"neighbour": r.key.neighbour, "selector": r.key.selector,
                          "consumerCommonName": r.key.consumer_common_name, "phase": r.machine.phase.value,
                          "status": r.machine.status.value if r.machine.status else None,
                          "links": [{"connected": s.connected, "received": s.received} for s in r.links()]}
                         for r in self.outgoing()],
        }

