"""Make-before-break route changes for multi-hop federation, sans-I/O.

When routes change, a want (a local subscription, or a neighbour's subscription here that wants
re-exported data) moves from a subscription at one neighbour to one at another
(:func:`ii_api.decisions.multihop.desired_routes`). :class:`RouteHandover` keeps the old one, still
feeding the sources it fed, until every new one is CREATED with its links connected (the first hop
*ready*) and has been for ``overlap_s``; second copies in the overlap are dropped at import
(:mod:`interchange.broker.import_duplicates`). It goes at once when its neighbour is unreachable or
none of its wants is wanted, and after ``timeout_s`` whatever happens. Break-before-make lost 2-21
of 157-231 messages per subscriber on the ring; the design and measurements:
docs/improved-interface.md ("Multi-hop federation").
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ii_api.decisions.subscriptions import OutgoingKey

__all__ = ["RouteHandover", "RoutePlan"]


@dataclass(frozen=True)
class RoutePlan:
    """What one planning round decided."""

    create: list[OutgoingKey]  #: to request (IP_106: only new ones)
    withdraw: list[OutgoingKey]  #: to withdraw now
    serves: dict[OutgoingKey, frozenset[int]]  #: the wanted ones and the old routes kept, with the wants they feed
    kept: dict[OutgoingKey, frozenset[OutgoingKey]]  #: old route -> the new ones it waits for
    wake_at: float | None  #: plan again then (None: only when something changes)
    not_ready: frozenset[OutgoingKey] = frozenset()  #: plan again as soon as one of these is ready


class RouteHandover:
    """The make-before-break state: since when each subscription is ready, and each old route kept."""

    def __init__(self, overlap_s: float = 0.5, timeout_s: float = 30.0) -> None:
        self.overlap_s = overlap_s
        self.timeout_s = timeout_s
        self._ready_since: dict[OutgoingKey, float] = {}
        self._kept_since: dict[OutgoingKey, float] = {}

    def plan(self, now: float, desired: Mapping[OutgoingKey, frozenset[int]],
             active: Mapping[OutgoingKey, frozenset[int]], ready: Collection[OutgoingKey],
             reachable: Collection[str]) -> RoutePlan:
        """``desired``: the subscriptions wanted now, with the wants each serves; ``active``: those
        that exist, with the wants each served so far; ``ready``: the active ones that are CREATED
        with their links connected; ``reachable``: the neighbours discovered now. Returns what to
        request, what to withdraw, what each subscription serves meanwhile, and when to plan again."""
        self._note_ready(now, active, ready)
        wanted_ids = frozenset().union(*desired.values()) if desired else frozenset()
        kept: dict[OutgoingKey, frozenset[OutgoingKey]] = {}
        feeds: dict[OutgoingKey, frozenset[int]] = {}
        withdraw: list[OutgoingKey] = []
        wakes: list[float] = []
        for key in sorted(k for k in active if k not in desired):
            still = active[key] & wanted_ids
            waiting = frozenset(n for n, ids in desired.items() if ids & still and not self._settled(n, now))
            since = self._kept_since.setdefault(key, now)
            if key.neighbour in reachable and waiting and now < since + self.timeout_s:
                kept[key], feeds[key] = waiting, still
                wakes += [since + self.timeout_s, *(self._ready_since[n] + self.overlap_s
                                                    for n in waiting if n in self._ready_since)]
            else:
                withdraw.append(key)
                del self._kept_since[key]
        for key in list(self._kept_since):
            if key not in kept:
                del self._kept_since[key]  # wanted again (or gone): no longer kept
        not_ready = frozenset(n for waiting in kept.values() for n in waiting if n not in self._ready_since)
        return RoutePlan(sorted(k for k in desired if k not in active), withdraw, {**desired, **feeds}, kept,
                         min(wakes) if wakes else None, not_ready)

    def _note_ready(self, now: float, active: Collection[OutgoingKey], ready: Collection[OutgoingKey]) -> None:
        for key in list(self._ready_since):
            if key not in ready or key not in active:
                del self._ready_since[key]  # not ready (any more): the overlap starts again when it is
        for key in ready:
            if key in active:
                self._ready_since.setdefault(key, now)

    def _settled(self, key: OutgoingKey, now: float) -> bool:
        """Ready for the whole overlap."""
        since = self._ready_since.get(key)
        return since is not None and now >= since + self.overlap_s
