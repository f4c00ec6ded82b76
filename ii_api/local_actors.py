"""The local actor API: what C-ITS actors of this interchange register (IP_068/077/079).

* :class:`ActorCapabilities`: what an actor publishes; the interchange's own capabilities are
  exactly these (IP_077/109);
* :class:`ActorDeliveries`: where an actor publishes: a broker target that accepts only the
  messages fitting the actor's capabilities its selector covers;
* :class:`ActorSubscriptions`: what an actor consumes: a broker source, plus subscriptions at
  neighbours (:mod:`ii_api.outgoing`) whose status and endpoints show in the local one.

Each part changes the broker's addresses and the store; the shared state is on the
:class:`~ii_api.service.IIService` it is given.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ii_api.capability_selector import capabilities_selector
from ii_api.errors import BadRequest, Conflict, NotFound
from ii_api.matching import CapabilityMatcher
from ii_api.models import (
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
from ii_api.store import DuplicatePublicationIdError, Store
from ii_api.store import LocalCapability as StoredCapability
from ii_api.store import LocalSubscription as StoredLocalSubscription
from ii_api.subscriptions import OutgoingView, compile_selector, local_subscription_state
from interchange.broker.addresses import AddressError, Origin, Scope, SourceSpec, TargetSpec

if TYPE_CHECKING:  # pragma: no cover
    from ii_api.service import IIService

#: Prefixes of the broker addresses made for local actors (the II's addresses start "ii-";
#: config-file addresses must not).
LOCAL_SOURCE_PREFIX = "ii-local-"
DELIVERY_TARGET_PREFIX = "ii-delivery-"
#: Local subscription statuses that have a source (and may want subscriptions at neighbours).
LIVE_LOCAL = (SubscriptionStatus.CREATED.value, SubscriptionStatus.ERROR.value)


def _actor_path(base: str, actor: str, kind: str, item_id: int | None = None) -> str:
    path = f"{base}/{actor}/{kind}"
    return path if item_id is None else f"{path}/{item_id}"


def _and(*selectors: str) -> str:
    """Selectors ANDed, each closed on its own line (a ``--`` comment cannot swallow the rest)."""
    parts = [s for s in selectors if s.strip()]
    if not parts:
        return "TRUE"
    if len(parts) == 1:
        return parts[0]
    return " AND ".join(f"({p}\n)" for p in parts)


def local_source_address(row: StoredLocalSubscription) -> str | None:
    """The address of a local subscription's source (its first endpoint's), None if it has none."""
    if row.endpoints and isinstance(row.endpoints[0], dict):
        source = row.endpoints[0].get("source")
        return source if isinstance(source, str) and source.startswith(LOCAL_SOURCE_PREFIX) else None
    return None


# ---------------------------------------------------------------------------------- capabilities
class ActorCapabilities:
    """Actors' capabilities (``service.local_caps``); a change rebuilds deliveries, turns neighbours'
    subscriptions RESUBSCRIBE where relevant and pushes our capabilities (IP_075/091)."""

    def __init__(self, service: IIService) -> None:
        self.service = service

    def _wire(self, row: StoredCapability) -> LocalCapability:
        path = _actor_path(self.service.base, row.actor_cn, "capabilities", row.id)
        return LocalCapability(id=str(row.id), path=path, definition=self.service.local_cap_models[row.id])

    def _network_publication_ids(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for neighbour, capabilities in self.service.neighbour_caps.items():
            for capability in capabilities:
                found.setdefault(capability.application.publicationId, neighbour)
        return found

    async def add_capabilities(self, actor: str, request: LocalCapabilitiesRequest) -> LocalCapabilitiesResponse:
        """IP_077: register what an actor publishes; a publicationId is unique across the network."""
        service = self.service
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
        async with service.lock:
            elsewhere = self._network_publication_ids()
            for index, capability in enumerate(request.capabilities):
                pid = capability.application.publicationId
                if pid in elsewhere:
                    raise Conflict(f"publicationId {pid!r} is already announced by {elsewhere[pid]}",
                                   f"capabilities.{index}.application.publicationId")
            try:
                rows = await service.store.add_local_capabilities(
                    actor, [(c.application.publicationId, c.to_json()) for c in request.capabilities])
            except DuplicatePublicationIdError as exc:
                raise Conflict(str(exc), "publicationId") from None
            for row in rows:
                self._put(row)
            service.event("info", "ii_capabilities_registered",
                          {"actor": actor, "publicationIds": [r.publication_id for r in rows]})
            await self._changed(actor)
        return LocalCapabilitiesResponse(name=actor, capabilities=[self._wire(r) for r in rows])

    async def list_capabilities(self, actor: str) -> LocalCapabilitiesResponse:
        rows = [r for i, r in sorted(self.service.local_caps.items()) if r.actor_cn == actor]
        return LocalCapabilitiesResponse(name=actor, capabilities=[self._wire(r) for r in rows])

    async def get_capability(self, actor: str, cap_id: int) -> LocalCapability:
        row = self.service.local_caps.get(cap_id)
        if row is None or row.actor_cn != actor:
            raise NotFound(f"no capability {cap_id} of {actor}")
        return self._wire(row)

    async def delete_capability(self, actor: str, cap_id: int) -> None:
        service = self.service
        async with service.lock:
            row = service.local_caps.get(cap_id)
            if row is None or row.actor_cn != actor or not await service.store.delete_local_capability(
                    cap_id, actor_cn=actor):
                raise NotFound(f"no capability {cap_id} of {actor}")
            del service.local_caps[cap_id]
            del service.local_cap_models[cap_id]
            service.event("info", "ii_capability_deleted", {"actor": actor, "publicationId": row.publication_id})
            await self._changed(actor)

    def _put(self, row: StoredCapability) -> None:
        self.service.local_caps[row.id] = row
        self.service.local_cap_models[row.id] = Capability.model_validate(row.document)

    async def _changed(self, actor: str) -> None:
        """Caller holds the lock. Deliveries rebuilt, RESUBSCRIBE checks, neighbours told (IP_075/091)."""
        service = self.service
        await service.deliveries.apply(actor)
        await service.incoming.recheck()
        service.pushes.wake_all()

    async def restore(self) -> None:
        """The stored capabilities back in memory (caller holds the lock)."""
        for row in await self.service.store.list_local_capabilities():
            self._put(row)


# ---------------------------------------------------------------------------------- deliveries
class ActorDeliveries:
    """Where actors publish: one broker target per CREATED delivery, rebuilt when capabilities change."""

    def __init__(self, service: IIService) -> None:
        self.service = service

    def _actor_capabilities(self, actor: str) -> list[Capability]:
        service = self.service
        return [service.local_cap_models[i] for i, r in sorted(service.local_caps.items()) if r.actor_cn == actor]

    def _target_port(self, target: str) -> int:
        """The advertised port of the broker process that serves ``target`` (interchange.broker.placement)."""
        service = self.service
        spec = service.addresses.target(target)
        return service.amqp_ports[service.placement.owner_of(target, spec.process if spec is not None else None)]

    def _wire(self, row: Any) -> Delivery:
        endpoints = []
        if row.status == DeliveryStatus.CREATED.value and row.target_address:
            endpoints = [DeliveryEndpoint(host=self.service.amqp_host, port=self._target_port(row.target_address),
                                          target=row.target_address)]
        return Delivery(id=str(row.id), path=_actor_path(self.service.base, row.actor_cn, "deliveries", row.id),
                        selector=row.selector, status=DeliveryStatus(row.status), endpoints=endpoints,
                        lastUpdatedTimestamp=row.last_updated_ms, errorMessage=row.error)

    def _target(self, actor: str, selector: str, address: str) -> TargetSpec | None:
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

    async def apply(self, actor: str | None = None) -> None:
        """Recreate the targets of the actor's deliveries (every actor's with None) by its
        capabilities (caller holds the lock)."""
        for delivery in await self.service.store.list_deliveries(actor):
            await self._apply(delivery)

    async def _apply(self, row: Any) -> Any:
        """Create/replace/remove the delivery's target by the actor's capabilities (lock held)."""
        service = self.service
        if row.status not in (DeliveryStatus.CREATED.value, DeliveryStatus.NO_OVERLAP.value):
            return row
        address = row.target_address or service.new_address(DELIVERY_TARGET_PREFIX)
        spec = self._target(row.actor_cn, row.selector, address)
        if spec is None:
            if service.addresses.target(address) is not None:
                service.addresses.remove(address)
            status, error = DeliveryStatus.NO_OVERLAP.value, "the selector matches none of your capabilities"
        else:
            try:
                service.addresses.put_target(spec)
                status, error = DeliveryStatus.CREATED.value, None
            except AddressError as exc:
                status, error = DeliveryStatus.ERROR.value, f"the target could not be created: {exc}"
        if (status, address, error) != (row.status, row.target_address, row.error):
            row = await service.store.update_delivery(row.id, status=status, target_address=address, error=error)
        return row

    async def add_deliveries(self, actor: str, request: DeliveriesRequest) -> DeliveriesResponse:
        """Where an actor publishes: CREATED with a target when its selector covers some of its
        capabilities, NO_OVERLAP otherwise, NOT_VALID for an invalid selector. All rows are written
        in one transaction before the targets are made and the answer is sent."""
        service = self.service
        async with service.lock:
            planned: list[tuple[str, str, str | None, str | None, TargetSpec | None]] = []
            for item in request.deliveries:
                compiled, problem = compile_selector(item.selector)
                if compiled is None:
                    planned.append((item.selector, DeliveryStatus.NOT_VALID.value, None, problem, None))
                    continue
                address = service.new_address(DELIVERY_TARGET_PREFIX)
                spec = self._target(actor, item.selector, address)
                if spec is None:
                    planned.append((item.selector, DeliveryStatus.NO_OVERLAP.value, address,
                                    "the selector matches none of your capabilities", None))
                else:
                    planned.append((item.selector, DeliveryStatus.CREATED.value, address, None, spec))

            def write(store: Store) -> list[Any]:
                with store.transaction():
                    return [store.add_delivery(actor, selector, status=status, target_address=address, error=error)
                            for selector, status, address, error, _ in planned]

            rows = await service.store.call(write)
            for index, (row, (_, _, _, _, spec)) in enumerate(zip(list(rows), planned)):
                if spec is not None:
                    try:
                        service.addresses.put_target(spec)
                    except AddressError as exc:
                        rows[index] = await service.store.update_delivery(
                            row.id, status=DeliveryStatus.ERROR.value, error=f"the target could not be created: {exc}")
                service.event("info", "ii_delivery_created", {"actor": actor, "id": row.id,
                                                              "status": rows[index].status,
                                                              "target": row.target_address})
        return DeliveriesResponse(name=actor, deliveries=[self._wire(r) for r in rows])

    async def list_deliveries(self, actor: str) -> DeliveriesResponse:
        rows = await self.service.store.list_deliveries(actor)
        return DeliveriesResponse(name=actor, deliveries=[self._wire(r) for r in rows])

    async def get_delivery(self, actor: str, delivery_id: int) -> Delivery:
        row = await self.service.store.get_delivery(delivery_id, actor_cn=actor)
        if row is None:
            raise NotFound(f"no delivery {delivery_id} of {actor}")
        return self._wire(row)

    async def delete_delivery(self, actor: str, delivery_id: int) -> None:
        service = self.service
        async with service.lock:
            row = await service.store.get_delivery(delivery_id, actor_cn=actor)
            if row is None or not await service.store.delete_delivery(delivery_id, actor_cn=actor):
                raise NotFound(f"no delivery {delivery_id} of {actor}")
            if row.target_address and service.addresses.target(row.target_address) is not None:
                service.addresses.remove(row.target_address)


# ---------------------------------------------------------------------------------- subscriptions
class ActorSubscriptions:
    """Actors' subscriptions (``service.local_subs``): a local source each; what neighbours serve
    them is requested by :class:`~ii_api.outgoing.OutgoingSubscriptions`."""

    def __init__(self, service: IIService) -> None:
        self.service = service

    def _wire(self, row: StoredLocalSubscription) -> LocalSubscription:
        path = _actor_path(self.service.base, row.actor_cn, "subscriptions", row.id)
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
        service = self.service
        failed = await service.open_source(self._source(row, address), row.id, service.store.update_local_subscription,
                                           {"actor": row.actor_cn})
        return failed or row

    async def add_local_subscriptions(self, actor: str,
                                      request: LocalSubscriptionsRequest) -> LocalSubscriptionsResponse:
        """An actor's subscriptions: a local source now (CREATED), subscriptions at neighbours that can
        serve it requested at once (IP_079); NOT_VALID / ILLEGAL with an errorMessage otherwise.
        All rows are written in one transaction before the sources are made and the answer is sent."""
        service = self.service
        async with service.lock:
            existing = sum(1 for r in service.local_subs.values() if r.actor_cn == actor)
            planned: list[tuple[SubscriptionRequestItem, SubscriptionStatus, str | None, str | None]] = []
            for item in request.subscriptions:
                ccn = item.consumerCommonName
                compiled, problem = compile_selector(item.selector)
                if ccn is not None and ccn != actor:
                    planned.append((item, SubscriptionStatus.ILLEGAL, None, "consumerCommonName may only be your "
                                    "own common name (to ask for a redirect)"))
                elif compiled is None:
                    planned.append((item, SubscriptionStatus.NOT_VALID, None, problem))
                elif (problem := service.config.policy.check(item.selector, compiled.ast,
                                                             existing=existing)) is not None:
                    planned.append((item, SubscriptionStatus.ILLEGAL, None, problem))
                else:
                    planned.append((item, SubscriptionStatus.CREATED, service.new_address(LOCAL_SOURCE_PREFIX), None))
                    existing += 1

            def write(store: Store) -> list[StoredLocalSubscription]:
                rows = []
                with store.transaction():
                    for item, status, address, problem in planned:
                        row = store.add_local_subscription(actor, item.selector, status=status.value,
                                                           consumer_common_name=item.consumerCommonName, error=problem)
                        if address is not None:
                            row = store.update_local_subscription(row.id, endpoints=[
                                e.to_json() for e in service.local_endpoints(address)])
                        rows.append(row)
                return rows

            rows = await service.store.call(write)
            for row, (_, _, address, _) in zip(rows, planned):
                if address is not None:
                    row = await self._open_source(row, address)
                service.local_subs[row.id] = row
                service.event("info", "ii_local_subscription_created",
                              {"actor": actor, "id": row.id, "selector": row.selector, "status": row.status,
                               "redirect": row.consumer_common_name is not None, "error": row.error})
            await service.outgoing.reconcile()
            rows = [service.local_subs[r.id] for r in rows]
        return LocalSubscriptionsResponse(name=actor, subscriptions=[self._wire(r) for r in rows])

    async def list_local_subscriptions(self, actor: str) -> LocalSubscriptionsResponse:
        rows = [r for _, r in sorted(self.service.local_subs.items()) if r.actor_cn == actor]
        return LocalSubscriptionsResponse(name=actor, subscriptions=[self._wire(r) for r in rows])

    async def get_local_subscription(self, actor: str, sub_id: int) -> LocalSubscription:
        row = self.service.local_subs.get(sub_id)
        if row is None or row.actor_cn != actor:
            raise NotFound(f"no subscription {sub_id} of {actor}")
        return self._wire(row)

    async def delete_local_subscription(self, actor: str, sub_id: int) -> None:
        """The source goes; subscriptions at neighbours serving only it are deleted there."""
        service = self.service
        async with service.lock:
            row = service.local_subs.get(sub_id)
            if row is None or row.actor_cn != actor or not await service.store.delete_local_subscription(
                    sub_id, actor_cn=actor):
                raise NotFound(f"no subscription {sub_id} of {actor}")
            del service.local_subs[sub_id]
            address = local_source_address(row)
            if address and service.addresses.source(address) is not None:
                service.addresses.remove(address)
            service.event("info", "ii_local_subscription_deleted", {"actor": actor, "id": sub_id})
            await service.outgoing.reconcile()

    async def refresh(self, sub_ids: Iterable[int]) -> None:
        """Recompute local subscriptions' status and endpoints from the outgoing ones (lock held)."""
        service, outgoing = self.service, self.service.outgoing
        views: dict[int, list[OutgoingView]] = {}
        for key, ids in outgoing.serves.items():
            runner = outgoing.active.get(key)
            if runner is not None:
                for sub_id in ids:
                    views.setdefault(sub_id, []).append(runner.view())
        for sub_id in sorted(set(sub_ids)):
            row = service.local_subs.get(sub_id)
            address = local_source_address(row) if row is not None else None
            if row is None or row.status not in LIVE_LOCAL or address is None:
                continue
            local = service.local_endpoints(address)  # as advertised now
            status, endpoints, error = local_subscription_state(row.consumer_common_name is not None, local,
                                                                views.get(sub_id, []))
            wire = [e.to_json() for e in endpoints]
            if (status.value, wire, error) != (row.status, row.endpoints, row.error):
                service.local_subs[sub_id] = await service.store.update_local_subscription(
                    sub_id, status=status.value, endpoints=wire, error=error)

    async def restore(self) -> None:
        """The stored subscriptions back in memory, their sources recreated (caller holds the lock)."""
        service = self.service
        for sub in await service.store.list_local_subscriptions():
            address = local_source_address(sub)
            if sub.status in LIVE_LOCAL and address:
                sub = await self._open_source(sub, address)
            service.local_subs[sub.id] = sub
