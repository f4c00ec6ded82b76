"""Re-export of imported data to multi-hop neighbours (IP_109 with loop prevention).

Off unless ``[ii.multihop] enabled``; then, towards a neighbour that announced multi-hop too
(:mod:`ii_api.decisions.multihop`), this interchange announces the capabilities learnt from other
multi-hop neighbours with their routes (:meth:`Reexport.capabilities_for`, the same list deciding
that neighbour's subscriptions here, :meth:`Reexport.offered_to`) and gives a subscription whose
grant includes them a source of scope ``all`` (:meth:`Reexport.scope`), wanted from the other
neighbours like a local subscription (:class:`~ii_api.decisions.multihop.ReexportWant`). Imports
carry the hop trace, so a message that comes round again is dropped; a neighbour without multi-hop
gets our own capabilities and sources of scope ``local``. More: docs/improved-interface.md.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ii_api.decisions.capability_selector import granted_selector
from ii_api.decisions.multihop import ANNOUNCE_KEY, ReexportWant, announcement, reexported
from ii_api.resources.doors import CapabilityList, HopLimits, Offers
from ii_api.settings.config import MultihopConfig
from ii_api.storage.store import IncomingSubscription
from ii_api.wire.models import CapabilitiesMessage, Capability, SubscriptionStatus
from interchange.broker.addresses import Scope

__all__ = ["Reexport"]

#: Statuses of a neighbour's subscription whose source is served.
_SERVED = frozenset({SubscriptionStatus.CREATED.value, SubscriptionStatus.RESUBSCRIBE.value})


class Reexport:
    """Which capabilities each neighbour is offered and which of its subscriptions want imported data."""

    def __init__(self, *, name: str, config: MultihopConfig, local: CapabilityList, offers: Offers,
                 hop_limits: HopLimits) -> None:
        self.name = name
        self.config = config
        self._local = local
        self._offers = offers
        self._hop_limits = hop_limits  #: neighbours that announced multi-hop -> their hop limit
        self._wants: dict[int, tuple[ReexportWant, str]] = {}  #: -incoming id -> (want, source address)
        self._announced: dict[str, Any] = {}  #: neighbour -> what we last announced to it

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def forget(self, name: str) -> None:
        """A neighbour gone: what it was last told is forgotten."""
        self._announced.pop(name, None)

    def multihop(self, name: str) -> bool:
        """Whether re-exported data may go to ``name``: switched on here and announced there."""
        return self.enabled and name in self._hop_limits()

    def capabilities_for(self, to: str | None) -> list[Capability]:
        """Our own capabilities, and for a multi-hop neighbour those we re-export to it."""
        own = self._local()
        if to is None or not self.multihop(to):
            return own
        return own + reexported(self.name, to, self._offers(), self._hop_limits(), self.config.hop_limit)

    def message_for(self, to: str | None) -> CapabilitiesMessage:
        """Our capabilities message for ``to`` (remembered, see :meth:`stale`)."""
        message = self._message(to)
        if to is not None and self.enabled:
            self._announced[to] = message.to_json()
        return message

    def _message(self, to: str | None) -> CapabilitiesMessage:
        if not self.enabled:
            return CapabilitiesMessage(name=self.name, capabilities=self._local())
        return CapabilitiesMessage.model_validate({"name": self.name, "capabilities": self.capabilities_for(to),
                                                   ANNOUNCE_KEY: announcement(self.config.hop_limit)})

    def stale(self, names: Iterable[str]) -> list[str]:
        """The neighbours whose capabilities message from us would differ from the last one they got."""
        if not self.enabled:
            return []
        return [n for n in names if self._message(n).to_json() != self._announced.get(n)]

    # ------------------------------------------------------------ neighbours' subscriptions here
    def offered_to(self, requester: str) -> list[Capability]:
        """What a subscription of ``requester`` is decided against (IP_097)."""
        return self.capabilities_for(requester)

    def scope(self, requester: str, grant: Iterable[str]) -> Scope:
        """IP_109: ``local`` unless the grant includes re-exported publicationIds for a multi-hop neighbour."""
        if not self.multihop(requester):
            return Scope.LOCAL
        own = {c.application.publicationId for c in self._local()}
        return Scope.ALL if any(i not in own for i in grant) else Scope.LOCAL

    def refresh(self, rows: Iterable[IncomingSubscription]) -> None:
        """Rebuild the wants from the neighbours' subscriptions here."""
        own = {c.application.publicationId for c in self._local()}
        wants: dict[int, tuple[ReexportWant, str]] = {}
        for row in rows:
            if (row.status not in _SERVED or not row.source_address
                    or not self.multihop(row.owner_cn)):
                continue
            foreign = sorted(set(row.granted or ()) - own)
            if foreign:
                want = ReexportWant(-row.id, row.owner_cn, granted_selector(row.selector, foreign), False,
                                    neighbour=row.owner_cn)
                wants[-row.id] = (want, row.source_address)
        self._wants = wants

    def wanted(self) -> list[ReexportWant]:
        return [want for want, _ in self._wants.values()]

    def sources(self, ids: Iterable[int]) -> list[str]:
        return [self._wants[i][1] for i in ids if i in self._wants]
