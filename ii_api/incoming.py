"""Neighbours' subscriptions at this interchange (incoming, IP_078/097/107/108/134).

Each requested subscription is decided by :func:`~ii_api.subscriptions.decide_incoming`; a CREATED
one gets a broker source of scope LOCAL (IP_109) granted to its consumer, serving the
publicationIds of the capabilities it matched (its *grant*). A capability added later turns the
subscriptions it is relevant to RESUBSCRIBE (:func:`~ii_api.subscriptions.recheck_incoming`).
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
from interchange.broker.addresses import AddressError, Scope, SourceSpec

if TYPE_CHECKING:  # pragma: no cover
    from ii_api.service import IIService

#: Prefix of the broker sources made for neighbours' subscriptions (the II's addresses start "ii-";
#: config-file addresses must not).
NEIGHBOUR_SOURCE_PREFIX = "ii-sub-"


class IncomingSubscriptions:
    """Neighbours' subscriptions here, and the grant of each one with a source."""

    def __init__(self, service: IIService) -> None:
        self.service = service
        self._grants: dict[int, frozenset[str]] = {}

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
    def _source(address: str, consumer: str, selector: str) -> SourceSpec:
        # IP_109: scope LOCAL, only locally produced data is served to other interchanges.
        return SourceSpec(address=address, consumers=frozenset({consumer}), selector=selector, scope=Scope.LOCAL)

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
                            consumer_common_name=decision.consumer, source_address=address)
                        rows.append(store.update_incoming_subscription(
                            row.id, endpoints=self._advertised(address) if address else [], error=decision.error))
                return rows

            rows = await service.store.call(write)
            for index, (row, (item, decision, address)) in enumerate(zip(list(rows), decisions)):
                if address is not None:
                    self._grants[row.id] = decision.grant
                    try:
                        service.addresses.put_source(self._source(address, decision.consumer,
                                                                  decision.source_selector or "FALSE"))
                    except AddressError as exc:
                        rows[index] = await service.store.update_incoming_subscription(
                            row.id, status=SubscriptionStatus.ERROR.value, endpoints=[],
                            error=f"the source could not be created: {exc}")
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
            self._grants.pop(sub_id, None)
            if row.source_address and service.addresses.source(row.source_address) is not None:
                service.addresses.remove(row.source_address)
        service.event("info", "ii_subscription_deleted", {"neighbour": name, "id": sub_id})

    async def recheck(self) -> None:
        """RESUBSCRIBE where a new capability is relevant (caller holds the lock)."""
        service = self.service
        capabilities = service.local_capabilities()
        for row in await service.store.list_incoming_subscriptions():
            grant = self._grants.get(row.id, frozenset())
            new = recheck_incoming(SubscriptionStatus(row.status), grant, row.selector, row.consumer_common_name,
                                   row.owner_cn, capabilities)
            if new is not None:
                await service.store.update_incoming_subscription(row.id, status=new.value, error=None)
                service.event("info", "ii_subscription_resubscribe", {"neighbour": row.owner_cn, "id": row.id})

    async def restore(self) -> None:
        """Sources (and grants, recomputed from the current capabilities) of the stored subscriptions;
        endpoints re-advertised if the host, port or process count changed (caller holds the lock)."""
        service = self.service
        capabilities = service.local_capabilities()
        for incoming in await service.store.list_incoming_subscriptions():
            if incoming.source_address and incoming.endpoints and incoming.endpoints != self._advertised(
                    incoming.source_address):  # the advertised host, port or process count changed
                incoming = await service.store.update_incoming_subscription(
                    incoming.id, endpoints=self._advertised(incoming.source_address))
            if incoming.source_address and incoming.status != SubscriptionStatus.ERROR.value:
                _, grant = grant_for(incoming.selector, incoming.consumer_common_name, incoming.owner_cn, capabilities)
                self._grants[incoming.id] = grant
                service.addresses.put_source(self._source(
                    incoming.source_address, incoming.consumer_common_name or incoming.owner_cn,
                    granted_selector(incoming.selector, grant)))
