"""Neighbours' subscriptions at this interchange (incoming, IP_078/097/107/108/134).

Each requested subscription is decided by :func:`~ii_api.decisions.subscriptions.decide_incoming`; a CREATED
one gets a broker source of scope LOCAL (IP_109) granted to its consumer, serving the
publicationIds of the capabilities it matched (its *grant*, stored with it and restored as is
after a restart). A capability added later (also while the node was down) turns the
subscriptions it is relevant to RESUBSCRIBE (:func:`~ii_api.decisions.subscriptions.recheck_incoming`).
A source that cannot be created (the address book refuses it) makes the subscription ERROR
with an ``errorMessage`` (Table 14/15).
"""
from __future__ import annotations

import asyncio
from typing import Any

from ii_api.decisions.capability_selector import granted_selector
from ii_api.decisions.slices import Steps, in_slices
from ii_api.decisions.subscriptions import IncomingDecision, decide_incoming_steps, grant_for, recheck_incoming
from ii_api.resources.broker_addresses import BrokerAddresses
from ii_api.resources.doors import EventSink, IncomingChanged, LocalCapabilityView, NeighbourDirectory
from ii_api.resources.reexport import Reexport
from ii_api.selectors.policy import SubscriptionPolicy
from ii_api.settings.config import IIConfig
from ii_api.storage.store import AsyncStore, IncomingSubscription, Table
from ii_api.wire.errors import NotFound
from ii_api.wire.models import (
    Capability,
    Endpoint,
    Subscription,
    SubscriptionPollResponse,
    SubscriptionRequest,
    SubscriptionResponse,
    SubscriptionStatus,
)
from interchange.broker.addresses import Scope, SourceSpec

#: Prefix of the broker sources made for neighbours' subscriptions (the II's addresses start "ii-";
#: config-file addresses must not).
NEIGHBOUR_SOURCE_PREFIX = "ii-sub-"
_CHUNK = 256  #: capabilities matched against one subscription between turns of the loop


def _to_resubscribe(rows: list[IncomingSubscription], capabilities: list[Capability]) -> Steps[list[IncomingSubscription]]:
    """The subscriptions that ``capabilities`` make RESUBSCRIBE (yields between checks). The
    capabilities go in chunks: one chunk granting something new is enough."""
    found = []
    chunks = [capabilities[i:i + _CHUNK] for i in range(0, len(capabilities), _CHUNK)]
    for row in rows:
        for chunk in chunks:
            yield
            new = recheck_incoming(SubscriptionStatus(row.status), frozenset(row.granted or ()), row.selector,
                                   row.consumer_common_name, row.owner_cn, chunk)
            if new is SubscriptionStatus.RESUBSCRIBE:
                found.append(row)
                break
    return found


def _decisions(name: str, request: SubscriptionRequest, capabilities: list[Capability], policy: SubscriptionPolicy,
               existing: int, own_name: str) -> Steps[list[IncomingDecision]]:
    decisions = []
    for index, item in enumerate(request.subscriptions):
        yield
        decisions.append((yield from decide_incoming_steps(item.selector, item.consumerCommonName, name, capabilities,
                                                           policy, existing=existing + index, own_name=own_name)))
    return decisions


class IncomingSubscriptions:
    """Neighbours' subscriptions here, stored with their grants, and their broker sources."""

    def __init__(self, *, name: str, config: IIConfig, store: AsyncStore, broker: BrokerAddresses,
                 neighbours: NeighbourDirectory, capabilities: LocalCapabilityView, lock: asyncio.Lock,
                 event: EventSink, reexport: Reexport | None = None,
                 changed: IncomingChanged | None = None) -> None:
        self._name = name
        self._config = config
        self._store = store
        self._rows = store.incoming
        self._broker = broker
        self._neighbours = neighbours
        self._capabilities = capabilities
        self._lock = lock
        self._event = event
        self._reexport = reexport  #: multi-hop federation: what a neighbour is offered, source scopes
        self._changed = changed  #: told when subscriptions here come or go (lock held)

    def _path(self, owner: str, sub_id: int) -> str:
        return f"{self._config.base_path}/{owner}/subscriptions/{sub_id}"

    def _advertised(self, source: str) -> list[dict[str, Any]]:
        """A source's endpoints: one per broker process (each routes its own targets' data to its copy)."""
        return [e.to_json() for e in self._broker.local_endpoints(source)]

    def _fields(self, row: IncomingSubscription) -> dict[str, Any]:
        """A row as the fields of its wire forms (Table 14 in lists and answers, Table 15 when polled)."""
        return {"id": str(row.id), "selector": row.selector, "consumerCommonName": row.consumer_common_name,
                "path": self._path(row.owner_cn, row.id), "status": SubscriptionStatus(row.status),
                "errorMessage": row.error, "endpoints": [Endpoint.model_validate(e) for e in row.endpoints],
                "lastUpdatedTimestamp": row.last_updated_ms}

    def _wire(self, row: IncomingSubscription) -> Subscription:
        return Subscription(**self._fields(row))

    def _poll(self, row: IncomingSubscription) -> SubscriptionPollResponse:
        return SubscriptionPollResponse(**self._fields(row))

    def _source(self, row: IncomingSubscription) -> SourceSpec:
        """The source of a subscription with a grant: its selector restricted to the grant (IP_134),
        scope LOCAL (IP_109: only locally produced data is served to other interchanges) unless the
        grant includes data re-exported to a multi-hop neighbour (:mod:`ii_api.resources.reexport`)."""
        assert row.source_address is not None
        scope = Scope.LOCAL if self._reexport is None else self._reexport.scope(row.owner_cn, row.granted or ())
        return SourceSpec(address=row.source_address, consumers=frozenset({row.consumer_common_name or row.owner_cn}),
                          selector=granted_selector(row.selector, row.granted or ()), scope=scope)

    async def _tell(self) -> None:
        if self._changed is not None:
            await self._changed()

    async def _open_source(self, row: IncomingSubscription) -> IncomingSubscription:
        """Create the row's broker source; the row as it is now: ERROR with an errorMessage and no
        endpoints if the address book refused the source (Table 14/15)."""
        error = self._broker.open_source(self._source(row))
        if error is None:
            return row
        self._event("warning", "ii_source_failed", {"neighbour": row.owner_cn, "id": row.id, "error": error})
        return await self._rows.update(row.id, status=SubscriptionStatus.ERROR.value, endpoints=[], error=error)

    async def _decide(self, name: str, request: SubscriptionRequest,
                      existing: int) -> list[tuple[str, IncomingDecision, str | None]]:
        """(selector, decision, source address if CREATED) for each requested subscription; the
        decisions (selectors against every capability) are made in slices."""
        capabilities = self._capabilities.all() if self._reexport is None else self._reexport.offered_to(name)
        decided = await in_slices(_decisions(name, request, capabilities, self._config.policy, existing, self._name))
        return [(item.selector, decision, self._broker.new_address(NEIGHBOUR_SOURCE_PREFIX)
                 if decision.status is SubscriptionStatus.CREATED else None)
                for item, decision in zip(request.subscriptions, decided)]

    async def receive_subscriptions(self, cn: str, request: SubscriptionRequest) -> SubscriptionResponse:
        """IP_078/097/134: decide each requested subscription, create the sources, answer (202).
        All rows are written in one transaction before the sources are made."""
        name = self._neighbours.require(cn, request.name)
        async with self._lock:
            decisions = await self._decide(name, request, len(await self._rows.list(name)))

            def write(table: Table[IncomingSubscription]) -> list[IncomingSubscription]:
                rows = []
                for selector, decision, address in decisions:
                    row = table.add(owner_cn=name, selector=selector, status=decision.status.value,
                                    consumer_common_name=decision.consumer, source_address=address,
                                    granted=decision.grant if address else None)
                    rows.append(table.update(row.id, endpoints=self._advertised(address) if address else [],
                                             error=decision.error))
                return rows

            rows = await self._rows.batch(write)
            for index, (row, (selector, decision, address)) in enumerate(zip(list(rows), decisions)):
                if address is not None:
                    rows[index] = await self._open_source(row)
                    await asyncio.sleep(0)  # each source compiles its selector: the loop gets a turn between
                self._event("info", "ii_subscription_received",
                            {"neighbour": name, "id": row.id, "selector": selector, "consumer": decision.consumer,
                             "status": decision.status.value, "error": decision.error})
            await self._tell()
        answer = [self._wire(r) for r in rows]
        if not self._config.created_in_answer:  # the appendix D way: REQUESTED now, CREATED when polled
            answer = [s.model_copy(update={"status": SubscriptionStatus.REQUESTED, "endpoints": None})
                      if s.status is SubscriptionStatus.CREATED else s for s in answer]
        return SubscriptionResponse(name=self._name, subscriptions=answer)

    async def list_incoming(self, cn: str) -> SubscriptionResponse:
        """IP_107: the requesting interchange's subscriptions here."""
        rows = await self._rows.list(self._neighbours.require(cn))
        return SubscriptionResponse(name=self._name, subscriptions=[self._wire(r) for r in rows])

    async def get_incoming(self, cn: str, sub_id: int) -> SubscriptionPollResponse:
        """IP_108: one subscription's status; only its owner may see it."""
        name = self._neighbours.require(cn)
        row = await self._rows.get(sub_id, name)
        if row is None:
            raise NotFound(f"no subscription {sub_id} of {name}")
        return self._poll(row)

    async def delete_incoming(self, cn: str, sub_id: int) -> None:
        """IP_107: terminate a subscription (its source goes); only its owner may."""
        name = self._neighbours.require(cn)
        async with self._lock:
            row = await self._rows.get(sub_id, name)
            if row is None or not await self._rows.delete(sub_id, name):
                raise NotFound(f"no subscription {sub_id} of {name}")
            self._broker.remove_source(row.source_address)
            await self._tell()
        self._event("info", "ii_subscription_deleted", {"neighbour": name, "id": sub_id})

    async def owners(self) -> set[str]:
        """The neighbours (present or departed) that have subscriptions here."""
        return {row.owner_cn for row in await self._rows.list()}

    async def expire(self, name: str) -> None:
        """The grace period of a neighbour that left DNS is over (:mod:`ii_api.resources.departures`): its
        subscriptions, their sources and its departure record go (caller holds the lock)."""
        rows = await self._store.call(lambda s: s.expire_departure(name))
        for row in rows:
            self._broker.remove_source(row.source_address)
        await self._tell()
        self._event("info", "ii_neighbour_subscriptions_expired", {"neighbour": name, "ids": [r.id for r in rows]})

    async def recheck(self, added: list[Capability] | None = None) -> None:
        """RESUBSCRIBE where a new capability is relevant (caller holds the lock).

        ``added``: the capabilities just registered (only they can widen a grant); None: all of
        ours (after a restart). The matching runs in slices."""
        capabilities = self._capabilities.all() if added is None else added
        rows = await self._rows.list()
        for row in await in_slices(_to_resubscribe(rows, capabilities)):
            await self._rows.update(row.id, status=SubscriptionStatus.RESUBSCRIBE.value, error=None)
            self._event("info", "ii_subscription_resubscribe", {"neighbour": row.owner_cn, "id": row.id})

    async def restore(self) -> None:
        """Sources of the stored subscriptions, each serving its stored grant (a restart neither widens
        nor narrows a subscription; :meth:`recheck` then finds capabilities added meanwhile); endpoints
        re-advertised if the host, port or process count changed (caller holds the lock)."""
        for incoming in await self._rows.list():
            if incoming.source_address and incoming.endpoints and incoming.endpoints != self._advertised(
                    incoming.source_address):  # the advertised host, port or process count changed
                incoming = await self._rows.update(incoming.id, endpoints=self._advertised(incoming.source_address))
            if incoming.source_address and incoming.status != SubscriptionStatus.ERROR.value:
                if incoming.granted is None:  # stored before grants were (schema 1): computed once, kept
                    _, grant = grant_for(incoming.selector, incoming.consumer_common_name, incoming.owner_cn,
                                         self._capabilities.all())
                    incoming = await self._rows.update(incoming.id, granted=grant)
                await self._open_source(incoming)
