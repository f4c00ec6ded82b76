"""The local actor API: what C-ITS actors of this interchange register (IP_068/077/079).

* :class:`ActorCapabilities`: what an actor publishes; the interchange's own capabilities are
  exactly these (IP_077/109);
* :class:`ActorDeliveries`: where an actor publishes: a broker target that accepts only the
  messages fitting the actor's capabilities its selector covers;
* :class:`ActorSubscriptions`: what an actor consumes: a broker source, plus subscriptions at
  neighbours (:mod:`ii_api.resources.outgoing`) whose status and endpoints show in the local one.

Each object owns its rows (memory and store) and the broker addresses they need; it is given
the views of others it reads and the event by which it tells what changed (the Protocols of
:mod:`ii_api.resources.doors`, carried on by :class:`~ii_api.node.propagation.Propagation`).
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from ii_api.decisions.capability_selector import Covering
from ii_api.decisions.slices import Steps, in_slices
from ii_api.decisions.subscriptions import LocalSubscriptionView, OutgoingView, compile_selector, local_subscription_state
from ii_api.resources.broker_addresses import BrokerAddresses
from ii_api.resources.doors import (
    CapabilitiesChanged,
    EventSink,
    LocalCapabilityView,
    LocalSubscriptionsChanged,
    PublicationIds,
)
from ii_api.selectors.matching import CapabilityMatcher
from ii_api.settings.config import IIConfig
from ii_api.storage.store import AsyncStore, DuplicatePublicationIdError, Store, Table
from ii_api.storage.store import Delivery as StoredDelivery
from ii_api.storage.store import LocalCapability as StoredCapability
from ii_api.storage.store import LocalSubscription as StoredLocalSubscription
from ii_api.wire.errors import BadRequest, Conflict, NotFound
from ii_api.wire.models import (
    Capability,
    DeliveriesRequest,
    DeliveriesResponse,
    Delivery,
    DeliveryEndpoint,
    DeliveryStatus,
    LocalCapabilitiesRequest,
    LocalCapabilitiesResponse,
    LocalCapability,
    LocalEndpoint,
    LocalSubscription,
    LocalSubscriptionsRequest,
    LocalSubscriptionsResponse,
    SubscriptionRequestItem,
    SubscriptionStatus,
)
from interchange.broker.addresses import Origin, Scope, SourceSpec, TargetSpec

#: Prefixes of the broker addresses made for local actors (the II's addresses start "ii-";
#: config-file addresses must not).
LOCAL_SOURCE_PREFIX = "ii-local-"
DELIVERY_TARGET_PREFIX = "ii-delivery-"
#: Local subscription statuses that have a source (and may want subscriptions at neighbours).
LIVE_LOCAL = (SubscriptionStatus.CREATED.value, SubscriptionStatus.ERROR.value)
NO_OVERLAP_ERROR = "the selector matches none of your capabilities"


def _actor_path(base: str, actor: str, kind: str, item_id: int | None = None) -> str:
    path = f"{base}/{actor}/{kind}"
    return path if item_id is None else f"{path}/{item_id}"


def local_source_address(row: StoredLocalSubscription) -> str | None:
    """The address of a local subscription's source (its first endpoint's), None if it has none."""
    if row.endpoints and isinstance(row.endpoints[0], dict):
        source = row.endpoints[0].get("source")
        return source if isinstance(source, str) and source.startswith(LOCAL_SOURCE_PREFIX) else None
    return None


def _check_publication_ids(request: LocalCapabilitiesRequest) -> None:
    """IP_077: each publicationId is '<publisherId>:<id>', and appears once in the request."""
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


# ---------------------------------------------------------------------------------- capabilities
class ActorCapabilities:
    """Actors' capabilities (a :class:`~ii_api.resources.doors.LocalCapabilityView`); a change is reported to
    ``changed(actor, added, removed)``: the service rebuilds deliveries, turns neighbours' subscriptions RESUBSCRIBE
    where relevant and pushes our capabilities (IP_075/091)."""

    def __init__(self, *, base_path: str, store: AsyncStore, network: PublicationIds,
                 lock: asyncio.Lock, event: EventSink,
                 changed: CapabilitiesChanged) -> None:
        self._base = base_path
        self._store = store
        self._rows_table = store.capabilities
        self._network = network  # publicationId -> the neighbour announcing it
        self._lock = lock
        self._event = event
        self._changed = changed
        self._rows: dict[int, StoredCapability] = {}  #: by id (ours, IP_077/109)
        self._models: dict[int, Capability] = {}
        #: ids by actor, in id order: an actor's list must not cost a scan of every actor's
        self._by_actor: dict[str, dict[int, None]] = {}

    # ---- the view (LocalCapabilityView)
    def all(self) -> list[Capability]:
        """IP_077/IP_109: our capabilities are those our local actors registered, nothing learned."""
        return [self._models[i] for i in sorted(self._models)]

    def of_actor(self, actor: str) -> list[Capability]:
        return [self._models[i] for i in self._by_actor.get(actor, {})]

    def __len__(self) -> int:
        return len(self._models)

    # ---- the API
    def _wire(self, row: StoredCapability) -> LocalCapability:
        path = _actor_path(self._base, row.actor_cn, "capabilities", row.id)
        return LocalCapability(id=str(row.id), path=path, definition=self._models[row.id])

    async def add_capabilities(self, actor: str, request: LocalCapabilitiesRequest) -> LocalCapabilitiesResponse:
        """IP_077: register what an actor publishes; a publicationId is unique across the network."""
        _check_publication_ids(request)
        async with self._lock:
            elsewhere = self._network()
            for index, capability in enumerate(request.capabilities):
                pid = capability.application.publicationId
                if pid in elsewhere:
                    raise Conflict(f"publicationId {pid!r} is already announced by {elsewhere[pid]}",
                                   f"capabilities.{index}.application.publicationId")
            def add_all(store: Store) -> list[StoredCapability]:  # in the store's thread: encoding is heavy too
                pairs = [(c.application.publicationId, c.to_json()) for c in request.capabilities]
                return store.capabilities.add_all(actor, pairs)

            try:
                rows = await self._store.call(add_all)
            except DuplicatePublicationIdError as exc:
                raise Conflict(str(exc), "publicationId") from None
            for row, capability in zip(rows, request.capabilities):
                self._put(row, capability)  # the validated request's model: not validated twice
            self._event("info", "ii_capabilities_registered",
                        {"actor": actor, "publicationIds": [r.publication_id for r in rows]})
            await self._changed(actor, [self._models[r.id] for r in rows], [])
        return LocalCapabilitiesResponse(name=actor, capabilities=[self._wire(r) for r in rows])

    async def list_capabilities(self, actor: str) -> LocalCapabilitiesResponse:
        """The actor's capabilities; the loop gets a turn every few hundred (an actor may hold thousands)."""
        wired = []
        for index, cap_id in enumerate(list(self._by_actor.get(actor, {}))):
            if (row := self._rows.get(cap_id)) is not None:
                wired.append(self._wire(row))
            if index % 256 == 255:
                await asyncio.sleep(0)
        return LocalCapabilitiesResponse(name=actor, capabilities=wired)

    async def get_capability(self, actor: str, cap_id: int) -> LocalCapability:
        row = self._rows.get(cap_id)
        if row is None or row.actor_cn != actor:
            raise NotFound(f"no capability {cap_id} of {actor}")
        return self._wire(row)

    async def delete_capability(self, actor: str, cap_id: int) -> None:
        async with self._lock:
            row = self._rows.get(cap_id)
            if row is None or row.actor_cn != actor or not await self._rows_table.delete(cap_id, actor):
                raise NotFound(f"no capability {cap_id} of {actor}")
            del self._rows[cap_id]
            self._by_actor[actor].pop(cap_id, None)
            removed = self._models.pop(cap_id)
            self._event("info", "ii_capability_deleted", {"actor": actor, "publicationId": row.publication_id})
            await self._changed(actor, [], [removed])

    def _put(self, row: StoredCapability, model: Capability | None = None) -> None:
        self._rows[row.id] = row
        self._models[row.id] = Capability.model_validate(row.document) if model is None else model
        self._by_actor.setdefault(row.actor_cn, {})[row.id] = None  # ids only grow: kept in id order

    async def restore(self) -> None:
        """The stored capabilities back in memory (caller holds the lock); the loop gets a turn every
        few hundred (validating thousands takes a good part of a second)."""
        for index, row in enumerate(await self._rows_table.list()):
            self._put(row)
            if index % 128 == 127:
                await asyncio.sleep(0)


# ---------------------------------------------------------------------------------- deliveries
_Planned = tuple[str, str, "str | None", "str | None", "TargetSpec | None", "_Kept | None"]
_Kept = tuple[CapabilityMatcher, Covering]  #: a delivery's selector, parsed, and what its target covers
_REFRESHED = (DeliveryStatus.CREATED.value, DeliveryStatus.NO_OVERLAP.value)


def _covering(matcher: CapabilityMatcher, capabilities: Iterable[Capability]) -> Steps[Covering]:
    """The capabilities ``matcher``'s selector covers (yields between capabilities)."""
    covering = Covering()
    for index, capability in enumerate(capabilities):
        if matcher.matches(capability.application, capability.metadata, domains=capability.domains,
                           shape=capability.shape):
            covering.add(capability)
        if index % 64 == 63:
            yield
    yield from covering.prepare()
    return covering


def _changed(kept: _Kept, added: list[Capability], removed: list[Capability]) -> Steps[bool]:
    """Bring a delivery's covering up to date with capabilities just added and removed; whether its
    target changes (yields between capabilities)."""
    matcher, covering = kept
    changed = False
    for index, capability in enumerate(removed):
        changed = covering.remove(capability) or changed
        if index % 64 == 63:
            yield
    for index, capability in enumerate(added):
        if matcher.matches(capability.application, capability.metadata, domains=capability.domains,
                           shape=capability.shape):
            covering.add(capability)
            changed = True
        if index % 64 == 63:
            yield
    return changed


def _new_coverings(selectors: list[str], capabilities: list[Capability]) -> Steps[list[tuple[str | None, _Kept | None]]]:
    """(NOT_VALID reason, or the parsed selector and its covering) of each requested delivery selector."""
    answers: list[tuple[str | None, _Kept | None]] = []
    for selector in selectors:
        yield
        compiled, problem = compile_selector(selector)
        if compiled is None:
            answers.append((problem, None))
        else:
            matcher = CapabilityMatcher(compiled)
            answers.append((None, (matcher, (yield from _covering(matcher, capabilities)))))
    return answers


class ActorDeliveries:
    """Where actors publish: one broker target per CREATED delivery, updated when capabilities change."""

    def __init__(self, *, base_path: str, store: AsyncStore, broker: BrokerAddresses,
                 capabilities: LocalCapabilityView, lock: asyncio.Lock, event: EventSink) -> None:
        self._base = base_path
        self._rows = store.deliveries
        self._broker = broker
        self._capabilities = capabilities
        self._lock = lock
        self._event = event
        #: by delivery id, for those CREATED or NO_OVERLAP: its parsed selector and what it covers,
        #: so that a change of capabilities costs what changed (an actor holds thousands)
        self._kept: dict[int, _Kept] = {}

    def _wire(self, row: StoredDelivery) -> Delivery:
        endpoints = []
        if row.status == DeliveryStatus.CREATED.value and row.target_address:
            port = self._broker.target_port(row.target_address)
            endpoints = [DeliveryEndpoint(host=self._broker.amqp_host, port=port, target=row.target_address)]
        return Delivery(id=str(row.id), path=_actor_path(self._base, row.actor_cn, "deliveries", row.id),
                        selector=row.selector, status=DeliveryStatus(row.status), endpoints=endpoints,
                        lastUpdatedTimestamp=row.last_updated_ms, errorMessage=row.error)

    async def apply(self, actor: str | None = None, added: list[Capability] | None = None,
                    removed: list[Capability] | None = None) -> None:
        """Update the targets of the actor's deliveries (every actor's with None) to its
        capabilities (caller holds the lock).

        ``added``/``removed``: the capabilities just added or removed (None: rebuild from all the
        actor's); a delivery whose selector covers none of them keeps its target as it is. The
        matching runs in slices (recomputing every delivery against thousands of
        capabilities in one go would hold the broker's loop)."""
        rows = await self._rows.list(actor)
        for row in await in_slices(self._refreshed(rows, added, removed)):
            await self._apply(row)
            await asyncio.sleep(0)  # the loop gets a turn between targets

    def _refreshed(self, rows: list[StoredDelivery], added: list[Capability] | None,
                   removed: list[Capability] | None) -> Steps[list[StoredDelivery]]:
        """The deliveries whose target changes, their coverings brought up to date."""
        planned, everything = [], {}
        for row in rows:
            yield
            kept = self._kept.get(row.id)
            if row.status not in _REFRESHED:
                self._kept.pop(row.id, None)
                continue
            if kept is not None and (added is not None or removed is not None):
                if not (yield from _changed(kept, added or [], removed or [])):
                    continue
                yield from kept[1].prepare()
            else:
                compiled = compile_selector(row.selector)[0]
                if compiled is None:  # a CREATED or NO_OVERLAP row's selector compiled when it was made
                    continue
                if row.actor_cn not in everything:
                    everything[row.actor_cn] = self._capabilities.of_actor(row.actor_cn)
                matcher = CapabilityMatcher(compiled)
                self._kept[row.id] = (matcher, (yield from _covering(matcher, everything[row.actor_cn])))
            planned.append(row)
        return planned

    def _target(self, actor: str, selector: str, address: str, covering: Covering) -> TargetSpec | None:
        """A message is accepted when it matches the delivery's selector and fits a capability it covers."""
        if not covering:
            return None
        return TargetSpec(address=address, publishers=frozenset({actor}), selector=selector if selector.strip() else None,
                          coverage=covering.coverage(), origin=Origin.LOCAL, shard_count=covering.shard_count)

    async def _apply(self, row: StoredDelivery) -> StoredDelivery:
        """Create/replace/remove the delivery's target by what it covers (lock held)."""
        address = row.target_address or self._broker.new_address(DELIVERY_TARGET_PREFIX)
        spec = self._target(row.actor_cn, row.selector, address, self._kept[row.id][1])
        error: str | None
        if spec is None:
            self._broker.remove_target(address)
            status, error = DeliveryStatus.NO_OVERLAP.value, NO_OVERLAP_ERROR
        else:
            error = self._broker.open_target(spec)
            status = DeliveryStatus.CREATED.value if error is None else DeliveryStatus.ERROR.value
        if (status, address, error) != (row.status, row.target_address, row.error):
            row = await self._rows.update(row.id, status=status, target_address=address, error=error)
        return row

    async def _plan(self, actor: str, request: DeliveriesRequest) -> list[_Planned]:
        """(selector, status, target address, error, target, kept) of each requested delivery."""
        capabilities = self._capabilities.of_actor(actor)
        selectors = [item.selector for item in request.deliveries]
        answers = await in_slices(_new_coverings(selectors, capabilities))
        planned: list[_Planned] = []
        for selector, (problem, kept) in zip(selectors, answers):
            if kept is None:
                planned.append((selector, DeliveryStatus.NOT_VALID.value, None, problem, None, None))
                continue
            address = self._broker.new_address(DELIVERY_TARGET_PREFIX)
            spec = self._target(actor, selector, address, kept[1])
            if spec is None:
                planned.append((selector, DeliveryStatus.NO_OVERLAP.value, address, NO_OVERLAP_ERROR, None, kept))
            else:
                planned.append((selector, DeliveryStatus.CREATED.value, address, None, spec, kept))
        return planned

    async def add_deliveries(self, actor: str, request: DeliveriesRequest) -> DeliveriesResponse:
        """Where an actor publishes: CREATED with a target when its selector covers some of its
        capabilities, NO_OVERLAP otherwise, NOT_VALID for an invalid selector. All rows are written
        in one transaction before the targets are made and the answer is sent."""
        async with self._lock:
            planned = await self._plan(actor, request)

            def write(table: Table[StoredDelivery]) -> list[StoredDelivery]:
                return [table.add(actor_cn=actor, selector=selector, status=status, target_address=address,
                                  error=error) for selector, status, address, error, _, _ in planned]

            rows = await self._rows.batch(write)
            for index, (row, (_, _, _, _, spec, kept)) in enumerate(zip(list(rows), planned)):
                if spec is not None and (error := self._broker.open_target(spec)) is not None:
                    rows[index] = await self._rows.update(row.id, status=DeliveryStatus.ERROR.value, error=error)
                elif kept is not None:
                    self._kept[row.id] = kept
                await asyncio.sleep(0)  # each target compiles its selector: the loop gets a turn between
                self._event("info", "ii_delivery_created", {"actor": actor, "id": row.id,
                                                            "status": rows[index].status,
                                                            "target": row.target_address})
        return DeliveriesResponse(name=actor, deliveries=[self._wire(r) for r in rows])

    async def list_deliveries(self, actor: str) -> DeliveriesResponse:
        rows = await self._rows.list(actor)
        return DeliveriesResponse(name=actor, deliveries=[self._wire(r) for r in rows])

    async def get_delivery(self, actor: str, delivery_id: int) -> Delivery:
        row = await self._rows.get(delivery_id, actor)
        if row is None:
            raise NotFound(f"no delivery {delivery_id} of {actor}")
        return self._wire(row)

    async def delete_delivery(self, actor: str, delivery_id: int) -> None:
        async with self._lock:
            row = await self._rows.get(delivery_id, actor)
            if row is None or not await self._rows.delete(delivery_id, actor):
                raise NotFound(f"no delivery {delivery_id} of {actor}")
            self._kept.pop(row.id, None)
            self._broker.remove_target(row.target_address)


# ---------------------------------------------------------------------------------- subscriptions
_PlannedSubscription = tuple[SubscriptionRequestItem, SubscriptionStatus, "str | None", "str | None",
                             "CapabilityMatcher | None"]


class ActorSubscriptions:
    """Actors' subscriptions: a local source each; what neighbours serve them is requested by
    :class:`~ii_api.resources.outgoing.OutgoingSubscriptions` (the service calls it when ``changed()``)."""

    def __init__(self, *, config: IIConfig, store: AsyncStore, broker: BrokerAddresses, lock: asyncio.Lock,
                 event: EventSink, changed: LocalSubscriptionsChanged) -> None:
        self._base = config.base_path
        self._policy = config.policy
        self._table = store.local_subscriptions
        self._broker = broker
        self._lock = lock
        self._event = event
        self._changed = changed
        self._rows: dict[int, StoredLocalSubscription] = {}  #: by id
        #: each live subscription's selector, parsed once for planning at neighbours (not at every re-plan)
        self._matchers: dict[int, CapabilityMatcher] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def wanted(self) -> list[LocalSubscriptionView]:
        """The subscriptions with a source: what may be requested from neighbours (IP_079)."""
        return [LocalSubscriptionView(r.id, r.actor_cn, r.selector, r.consumer_common_name is not None,
                                      matcher=self._matchers.get(r.id))
                for r in self._rows.values() if r.status in LIVE_LOCAL and local_source_address(r)]

    def sources(self, sub_ids: Iterable[int]) -> list[str]:
        """The source addresses of these subscriptions (where what neighbours send them goes)."""
        addresses = []
        for sub_id in sub_ids:
            row = self._rows.get(sub_id)
            address = local_source_address(row) if row is not None else None
            if address:
                addresses.append(address)
        return addresses

    def _wire(self, row: StoredLocalSubscription) -> LocalSubscription:
        path = _actor_path(self._base, row.actor_cn, "subscriptions", row.id)
        return LocalSubscription(id=str(row.id), path=path,
                                 selector=row.selector, consumerCommonName=row.consumer_common_name,
                                 status=SubscriptionStatus(row.status),
                                 endpoints=[LocalEndpoint.model_validate(e) for e in row.endpoints],
                                 lastUpdatedTimestamp=row.last_updated_ms, errorMessage=row.error)

    @staticmethod
    def _source(row: StoredLocalSubscription, address: str) -> SourceSpec:
        selector = row.selector if row.selector.strip() else None
        return SourceSpec(address=address, consumers=frozenset({row.actor_cn}), selector=selector, scope=Scope.ALL)

    async def _open_source(self, row: StoredLocalSubscription, address: str) -> StoredLocalSubscription:
        """Create the subscription's source; the row as it is now: ERROR if the source was refused, with
        no endpoints, so nothing is requested from neighbours for it."""
        error = self._broker.open_source(self._source(row, address))
        if error is None:
            return row
        self._event("warning", "ii_source_failed", {"actor": row.actor_cn, "id": row.id, "error": error})
        return await self._table.update(row.id, status=SubscriptionStatus.ERROR.value, endpoints=[], error=error)

    def _plan(self, actor: str, request: LocalSubscriptionsRequest) -> Steps[list[_PlannedSubscription]]:
        """(item, status, source address if CREATED, error, matcher if CREATED) of each requested
        subscription (yields between them: a long selector takes milliseconds to compile)."""
        existing = sum(1 for r in self._rows.values() if r.actor_cn == actor)
        planned: list[_PlannedSubscription] = []
        for item in request.subscriptions:
            yield
            ccn = item.consumerCommonName
            compiled, problem = compile_selector(item.selector)
            if ccn is not None and ccn != actor:
                planned.append((item, SubscriptionStatus.ILLEGAL, None, "consumerCommonName may only be your "
                                "own common name (to ask for a redirect)", None))
            elif compiled is None:
                planned.append((item, SubscriptionStatus.NOT_VALID, None, problem, None))
            elif (problem := self._policy.check(item.selector, compiled.ast, existing=existing)) is not None:
                planned.append((item, SubscriptionStatus.ILLEGAL, None, problem, None))
            else:
                planned.append((item, SubscriptionStatus.CREATED, self._broker.new_address(LOCAL_SOURCE_PREFIX),
                                None, CapabilityMatcher(compiled)))
                existing += 1
        return planned

    async def add_local_subscriptions(self, actor: str,
                                      request: LocalSubscriptionsRequest) -> LocalSubscriptionsResponse:
        """An actor's subscriptions: a local source now (CREATED), subscriptions at neighbours that can
        serve it requested at once (IP_079); NOT_VALID / ILLEGAL with an errorMessage otherwise.
        All rows are written in one transaction before the sources are made and the answer is sent."""
        async with self._lock:
            planned = await in_slices(self._plan(actor, request))

            def write(table: Table[StoredLocalSubscription]) -> list[StoredLocalSubscription]:
                rows = []
                for item, status, address, problem, _ in planned:
                    row = table.add(actor_cn=actor, selector=item.selector, status=status.value,
                                    consumer_common_name=item.consumerCommonName, error=problem)
                    if address is not None:
                        row = table.update(row.id, endpoints=[e.to_json() for e in self._broker.local_endpoints(
                            address)])
                    rows.append(row)
                return rows

            rows = await self._table.batch(write)
            for row, (_, _, address, _, matcher) in zip(rows, planned):
                if address is not None:
                    row = await self._open_source(row, address)
                    await asyncio.sleep(0)  # each source compiles its selector: the loop gets a turn between
                if matcher is not None:
                    self._matchers[row.id] = matcher
                self._rows[row.id] = row
                self._event("info", "ii_local_subscription_created",
                            {"actor": actor, "id": row.id, "selector": row.selector, "status": row.status,
                             "redirect": row.consumer_common_name is not None, "error": row.error})
            await self._changed()
            rows = [self._rows[r.id] for r in rows]
        return LocalSubscriptionsResponse(name=actor, subscriptions=[self._wire(r) for r in rows])

    async def list_local_subscriptions(self, actor: str) -> LocalSubscriptionsResponse:
        rows = [r for _, r in sorted(self._rows.items()) if r.actor_cn == actor]
        return LocalSubscriptionsResponse(name=actor, subscriptions=[self._wire(r) for r in rows])

    async def get_local_subscription(self, actor: str, sub_id: int) -> LocalSubscription:
        row = self._rows.get(sub_id)
        if row is None or row.actor_cn != actor:
            raise NotFound(f"no subscription {sub_id} of {actor}")
        return self._wire(row)

    async def delete_local_subscription(self, actor: str, sub_id: int) -> None:
        """The source goes; subscriptions at neighbours serving only it are deleted there."""
        async with self._lock:
            row = self._rows.get(sub_id)
            if row is None or row.actor_cn != actor or not await self._table.delete(sub_id, actor):
                raise NotFound(f"no subscription {sub_id} of {actor}")
            del self._rows[sub_id]
            self._matchers.pop(sub_id, None)
            self._broker.remove_source(local_source_address(row))
            self._event("info", "ii_local_subscription_deleted", {"actor": actor, "id": sub_id})
            await self._changed()

    async def refresh(self, sub_ids: Iterable[int], outgoing: Mapping[int, list[OutgoingView]]) -> None:
        """Recompute local subscriptions' status and endpoints from the views of the subscriptions at
        neighbours serving each (``outgoing``, by local subscription id; lock held)."""
        for sub_id in sorted(set(sub_ids)):
            row = self._rows.get(sub_id)
            address = local_source_address(row) if row is not None else None
            if row is None or row.status not in LIVE_LOCAL or address is None:
                continue
            local = self._broker.local_endpoints(address)  # as advertised now
            status, endpoints, error = local_subscription_state(row.consumer_common_name is not None, local,
                                                                outgoing.get(sub_id, []))
            wire = [e.to_json() for e in endpoints]
            if (status.value, wire, error) != (row.status, row.endpoints, row.error):
                self._rows[sub_id] = await self._table.update(sub_id, status=status.value, endpoints=wire,
                                                              error=error)

    async def restore(self) -> None:
        """The stored subscriptions back in memory, their sources recreated (caller holds the lock)."""
        for sub in await self._table.list():
            address = local_source_address(sub)
            if sub.status in LIVE_LOCAL and address:
                sub = await self._open_source(sub, address)
                if (compiled := compile_selector(sub.selector)[0]) is not None:
                    self._matchers[sub.id] = CapabilityMatcher(compiled)
                await asyncio.sleep(0)
            self._rows[sub.id] = sub
