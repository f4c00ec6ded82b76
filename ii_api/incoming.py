"""Neighbours' subscriptions at this interchange (incoming, IP_078/097/107/108/134).

Each requested subscription is decided by :func:`~ii_api.subscriptions.decide_incoming`; a CREATED
one gets a broker source of scope LOCAL (IP_109) granted to its consumer, serving the
publicationIds of the capabilities it matched (its *grant*, stored with it and restored as is
after a restart). A capability added later (also while the node was down) turns the
subscriptions it is relevant to RESUBSCRIBE (:func:`~ii_api.subscriptions.recheck_incoming`).
A source that cannot be created (the address book refuses it) makes the subscription ERROR
with an ``errorMessage`` (Table 14/15).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ii_api.capability_selector import granted_selector
from ii_api.errors import NotFound
from ii_api.models import (
    Endpoint,
    Subscription,
    SubscriptionPollResponse,
    SubscriptionRequest,
    SubscriptionResponse,
    SubscriptionStatus,
)
from ii_api.store import IncomingSubscription, Store
from ii_api.subscriptions import decide_incoming, grant_for, recheck_incoming
from interchange.broker.addresses import Scope, SourceSpec

if TYPE_CHECKING:  # pragma: no cover
    from ii_api.service import IIService

#: Prefix of the broker sources made for neighbours' subscriptions (the II's addresses start "ii-";
#: config-file addresses must not).
NEIGHBOUR_SOURCE_PREFIX = "ii-sub-"


class IncomingSubscriptions:
    """Neighbours' subscriptions here (their grants are stored with them)."""

    def __init__(self, service: IIService) -> None:
        self.service = service

    def _path(self, owner: str, sub_id: int) -> str:
        return f"{self.service.base}/{owner}/subscriptions/{sub_id}"

    def _advertised(self, source: str) -> list[dict[str, Any]]:
        """A source's endpoints: one per broker process (each routes its own targets' data to its copy)."""
        return [e.to_json() for e in self.service.local_endpoints(source)]

    def _wire(self, row: IncomingSubscription) -> Subscription:
        return Subscription(id=str(row.id), selector=row.selector, consumerCommonName=row.consumer_common_name,
                            path=self._path(row.owner_cn, row.id), status=SubscriptionStatus(row.status),
                            errorMessage=row.error, endpoints=[Endpoint.model_validate(e) for e in row.endpoints],
                            lastUpdatedTimestamp=row.last_updated_ms)

    def _poll(self, row: IncomingSubscription) -> SubscriptionPollResponse:
        return SubscriptionPollResponse(
            id=str(row.id), selector=row.selector, consumerCommonName=row.consumer_common_name,
            path=self._path(row.owner_cn, row.id), status=SubscriptionStatus(row.status),
            endpoints=[Endpoint.model_validate(e) for e in row.endpoints], errorMessage=row.error,
            lastUpdatedTimestamp=row.last_updated_ms)

    @staticmethod
    def _source(row: IncomingSubscription) -> SourceSpec:
        """The source of a subscription with a grant: its selector restricted to the grant (IP_134),
        scope LOCAL (IP_109: only locally produced data is served to other interchanges)."""
        assert row.source_address is not None
        return SourceSpec(address=row.source_address, consumers=frozenset({row.consumer_common_name or row.owner_cn}),
                          selector=granted_selector(row.selector, row.granted or ()), scope=Scope.LOCAL)

    async def _open_source(self, row: IncomingSubscription) -> IncomingSubscription:
        """Create the row's broker source; the row as it is now (ERROR if the source was refused)."""
        service = self.service
        failed = await service.open_source(self._source(row), row.id, service.store.update_incoming_subscription,
                                           {"neighbour": row.owner_cn})
        return failed or row

    def _remove_source(self, row: IncomingSubscription) -> None:
        addresses = self.service.addresses
        if row.source_address and addresses.source(row.source_address) is not None:
            addresses.remove(row.source_address)

    async def receive_subscriptions(self, cn: str, request: SubscriptionRequest) -> SubscriptionResponse:
        """IP_078/097/134: decide each requested subscription, create the sources, answer (202)."""
        service = self.service
        name = service.require_neighbour(cn, request.name)
        async with service.lock:
            capabilities = service.local_capabilities()
            existing = len(await service.store.list_incoming_subscriptions(name))
            decisions = []
            for item in request.subscriptions:
                decision = decide_incoming(item.selector, item.consumerCommonName, name, capabilities,
                                           service.config.policy, existing=existing, own_name=service.name)
                address = (service.new_address(NEIGHBOUR_SOURCE_PREFIX)
                           if decision.status is SubscriptionStatus.CREATED else None)
                decisions.append((item, decision, address))
                existing += 1

            def write(store: Store) -> list[IncomingSubscription]:
                rows = []
                with store.transaction():
                    for item, decision, address in decisions:
                        row = store.add_incoming_subscription(
                            name, item.selector, status=decision.status.value,
                            consumer_common_name=decision.consumer, source_address=address,
                            granted=decision.grant if address else None)
                        rows.append(store.update_incoming_subscription(
                            row.id, endpoints=self._advertised(address) if address else [], error=decision.error))
                return rows

            rows = await service.store.call(write)
            for index, (row, (item, decision, address)) in enumerate(zip(list(rows), decisions)):
                if address is not None:
                    rows[index] = await self._open_source(row)
                service.event("info", "ii_subscription_received",
                              {"neighbour": name, "id": row.id, "selector": item.selector,
                               "consumer": decision.consumer, "status": decision.status.value,
                               "error": decision.error})
        answer = [self._wire(r) for r in rows]
        if not service.config.created_in_answer:  # the appendix D way: REQUESTED now, CREATED when polled
            answer = [s.model_copy(update={"status": SubscriptionStatus.REQUESTED, "endpoints": None})
                      if s.status is SubscriptionStatus.CREATED else s for s in answer]
        return SubscriptionResponse(name=service.name, subscriptions=answer)

    async def list_incoming(self, cn: str) -> SubscriptionResponse:
        """IP_107: the requesting interchange's subscriptions here."""
        service = self.service
        name = service.require_neighbour(cn)
        rows = await service.store.list_incoming_subscriptions(name)
        return SubscriptionResponse(name=service.name, subscriptions=[self._wire(r) for r in rows])

    async def get_incoming(self, cn: str, sub_id: int) -> SubscriptionPollResponse:
        """IP_108: one subscription's status; only its owner may see it."""
        service = self.service
        name = service.require_neighbour(cn)
        row = await service.store.get_incoming_subscription(sub_id, owner_cn=name)
        if row is None:
            raise NotFound(f"no subscription {sub_id} of {name}")
        return self._poll(row)

    async def delete_incoming(self, cn: str, sub_id: int) -> None:
        """IP_107: terminate a subscription (its source goes); only its owner may."""
        service = self.service
        name = service.require_neighbour(cn)
        async with service.lock:
            row = await service.store.get_incoming_subscription(sub_id, owner_cn=name)
            if row is None or not await service.store.delete_incoming_subscription(sub_id, owner_cn=name):
                raise NotFound(f"no subscription {sub_id} of {name}")
            self._remove_source(row)
        service.event("info", "ii_subscription_deleted", {"neighbour": name, "id": sub_id})

    async def expire(self, name: str) -> None:
        """The grace period of a neighbour that left DNS is over (:mod:`ii_api.departures`): its
        subscriptions and their sources go (caller holds the lock)."""
        rows = await self.service.store.expire_departure(name)
        for row in rows:
            self._remove_source(row)
        self.service.event("info", "ii_neighbour_subscriptions_expired",
                           {"neighbour": name, "ids": [r.id for r in rows]})

    async def recheck(self) -> None:
        """RESUBSCRIBE where a new capability is relevant (caller holds the lock)."""
        service = self.service
        capabilities = service.local_capabilities()
        for row in await service.store.list_incoming_subscriptions():
            grant = frozenset(row.granted or ())
            new = recheck_incoming(SubscriptionStatus(row.status), grant, row.selector, row.consumer_common_name,
                                   row.owner_cn, capabilities)
            if new is not None:
                await service.store.update_incoming_subscription(row.id, status=new.value, error=None)
                service.event("info", "ii_subscription_resubscribe", {"neighbour": row.owner_cn, "id": row.id})

    async def restore(self) -> None:
        """Sources of the stored subscriptions, each serving its stored grant (a restart neither widens
        nor narrows a subscription; :meth:`recheck` then finds capabilities added meanwhile); endpoints
        re-advertised if the host, port or process count changed (caller holds the lock)."""
        service = self.service
        for incoming in await service.store.list_incoming_subscriptions():
            if incoming.source_address and incoming.endpoints and incoming.endpoints != self._advertised(
                    incoming.source_address):  # the advertised host, port or process count changed
                incoming = await service.store.update_incoming_subscription(
                    incoming.id, endpoints=self._advertised(incoming.source_address))
            if incoming.source_address and incoming.status != SubscriptionStatus.ERROR.value:
                if incoming.granted is None:  # stored before grants were (schema 1): computed once, kept
                    _, grant = grant_for(incoming.selector, incoming.consumer_common_name, incoming.owner_cn,
                                         service.local_capabilities())
                    incoming = await service.store.update_incoming_subscription(incoming.id, granted=grant)
                await self._open_source(incoming)
