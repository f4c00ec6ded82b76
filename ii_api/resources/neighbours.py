"""The neighbours of this interchange and what they announced (IP_073/076/089/125/126).

* :class:`Neighbours`: the interchanges discovery found (the targets of SRV records of trusted
  domains, IP_089), the only ones allowed to use the II (IP_126); stored, so a restart knows
  them before the first DNS round.
* :class:`NeighbourCapabilities`: the capabilities each neighbour POSTed, or answered to ours
  (IP_076/094), replaced as a whole each time.

Each owns its memory state and its rows in the store (:class:`~ii_api.storage.store.AsyncStore`);
changes are made while the service's lock is held (by :class:`~ii_api.node.propagation.Propagation`).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from ii_api.decisions.multihop import announced_hop_limit
from ii_api.decisions.subscriptions import same_cn
from ii_api.peers.discovery import DiscoveryResult, Neighbour, merge_neighbours, neighbour_changes, normalise_name
from ii_api.storage.store import AsyncStore
from ii_api.wire.errors import Forbidden
from ii_api.wire.models import CapabilitiesMessage, Capability

__all__ = ["NeighbourCapabilities", "NeighbourUpdate", "Neighbours"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class NeighbourUpdate:
    """A discovery round's outcome, planned before it is applied."""

    result: DiscoveryResult
    merged: Mapping[str, Neighbour]  #: the neighbour set after it
    gone: frozenset[str]
    changed: frozenset[str]  #: new or moved (host or port)


class Neighbours:
    """The neighbour set, by name (a :class:`~ii_api.resources.doors.NeighbourDirectory`)."""

    def __init__(self, store: AsyncStore) -> None:
        self._store = store
        self._by_name: dict[str, Neighbour] = {}

    def neighbour(self, name: str) -> Neighbour | None:
        try:
            return self._by_name.get(normalise_name(name))
        except ValueError:
            return None

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def all(self) -> tuple[Neighbour, ...]:
        return tuple(self._by_name[n] for n in sorted(self._by_name))

    def require(self, cn: str, body_name: str | None = None) -> str:
        """The neighbour's name for a request by ``cn``; Forbidden (IP_126) otherwise."""
        peer = self.neighbour(cn)
        if peer is None:
            raise Forbidden(f"{cn!r} is not the target of a discovered SRV record of a trusted domain (IP_126)")
        if body_name is not None and not same_cn(body_name, cn):
            raise Forbidden(f"the name in the body ({body_name!r}) is not the certificate's common name ({cn!r})",
                            "name")
        return peer.name

    def endpoint_address(self, neighbour: str, host: str | None) -> str:
        """Where to connect for an endpoint: a host that is the neighbour's own name is reached at the
        address discovery found for it (its A record, IP_085); other hosts (e.g. a load balancer)
        as given. TLS still checks the neighbour's name (IP_125)."""
        peer = self.neighbour(neighbour)
        if host is None or (peer is not None and same_cn(host.rstrip("."), peer.name)):
            return peer.host if peer is not None else neighbour
        return host

    def plan(self, result: DiscoveryResult) -> NeighbourUpdate:
        """What a discovery round changes: the set follows DNS (:func:`~ii_api.peers.discovery.merge_neighbours`)."""
        merged = {n.name: n for n in merge_neighbours(self._by_name.values(), result)}
        gone, changed = neighbour_changes(self._by_name, merged)
        return NeighbourUpdate(result, merged, gone, changed)

    async def apply(self, update: NeighbourUpdate) -> None:
        """The planned set stored (the neighbours DNS answered) and made current."""
        await self._store.call(lambda s: s.neighbours.upsert(update.result.neighbours))
        self._by_name = dict(update.merged)

    async def restore(self) -> None:
        for stored in await self._store.call(lambda s: s.neighbours.list()):
            self._by_name[stored.name] = Neighbour(stored.name, stored.host, stored.port, stored.domain,
                                                   stored.priority, stored.weight)


class NeighbourCapabilities:
    """The capabilities each neighbour announced (a :class:`~ii_api.resources.doors.NeighbourCapabilityView`)."""

    def __init__(self, store: AsyncStore) -> None:
        self._store = store
        self._by_neighbour: dict[str, list[Capability]] = {}
        self._hop_limits: dict[str, int] = {}  #: neighbours that announced multi-hop federation (ii_api.decisions.multihop)

    def of(self, name: str) -> list[Capability]:
        return list(self._by_neighbour.get(name, ()))

    def by_neighbour(self) -> Mapping[str, list[Capability]]:
        return self._by_neighbour

    def everything(self) -> list[Capability]:
        """Every neighbour's capabilities, by neighbour name."""
        return [c for n in sorted(self._by_neighbour) for c in self._by_neighbour[n]]

    def publication_ids(self) -> dict[str, str]:
        """publicationId -> the neighbour announcing it (a publicationId is unique in the network)."""
        found: dict[str, str] = {}
        for neighbour, capabilities in self._by_neighbour.items():
            for capability in capabilities:
                found.setdefault(capability.application.publicationId, neighbour)
        return found

    async def put(self, name: str, message: CapabilitiesMessage) -> None:
        """IP_076/094: the neighbour's capabilities replaced (stored first)."""
        await self._store.call(lambda s: s.neighbour_capabilities.put(name, message.to_json()))
        self._by_neighbour[name] = list(message.capabilities)
        self._announced(name, message)

    def _announced(self, name: str, message: CapabilitiesMessage) -> None:
        limit = announced_hop_limit(message)
        if limit is None:
            self._hop_limits.pop(name, None)
        else:
            self._hop_limits[name] = limit

    def multihop(self) -> Mapping[str, int]:
        """The neighbours that announced multi-hop federation, with their hop limits."""
        return self._hop_limits

    def forget(self, name: str) -> None:
        """A neighbour gone from DNS (its stored document goes with its departure record)."""
        self._by_neighbour.pop(name, None)
        self._hop_limits.pop(name, None)

    async def restore(self) -> None:
        for document in await self._store.call(lambda s: s.neighbour_capabilities.list()):
            try:
                message = CapabilitiesMessage.model_validate(document.document)
                self._by_neighbour[document.neighbour] = list(message.capabilities)
                self._announced(document.neighbour, message)
            except ValidationError:
                log.warning("ii: stored capabilities of %s are unreadable; ignored", document.neighbour)
