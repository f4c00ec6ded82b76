"""Multi-hop federation in the capability exchange (IP_109, IP_132), sans-I/O.

IP_109 allows re-distributing another interchange's messages only with loop prevention (the hop
trace, :mod:`interchange.broker.hop_trace`); a neighbour announces it has it with the IP_132
extension property :data:`ANNOUNCE_KEY`, and re-exported capabilities carry their route in
:data:`ROUTE_KEY`. :func:`reexported`: what is announced to one neighbour (only when both sides
have it on, split horizon, within the hop limit, each publicationId over its shortest route).
:func:`desired_routes`: where to subscribe (each publicationId from the neighbour with the
shortest route, ties: the smaller name; wants that need the same share one subscription).
Route changes are make-before-break (:mod:`ii_api.decisions.handover`). The design, and the
ring measured with no loss or duplicate: docs/improved-interface.md ("Multi-hop federation").
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ii_api.decisions.capability_selector import granted_selector
from ii_api.decisions.subscriptions import LocalSubscriptionView, OutgoingKey, compile_selector, redirect_compliant
from ii_api.selectors.matching import CapabilityMatcher
from ii_api.wire.models import CapabilitiesMessage, Capability

__all__ = ["ANNOUNCE_KEY", "ROUTE_KEY", "ReexportWant", "announcement", "announced_hop_limit", "best_offers",
           "desired_routes", "reexported", "restricted", "route_of"]

ANNOUNCE_KEY = "custom-croadsix-multihop"
ROUTE_KEY = "custom-croadsix-route"
VERSION = 1
_RESTRICTION = "\n) AND publicationId IN ("  #: what granted_selector puts between a selector and its ids
_LITERAL = re.compile(r"'((?:[^']|'')*)'")


@dataclass(frozen=True)
class ReexportWant(LocalSubscriptionView):
    """A neighbour's subscription here, as far as it wants re-exported data: planned like a local
    subscription, never at the neighbour it is for."""

    neighbour: str = ""


def announcement(hop_limit: int) -> dict[str, Any]:
    """The capabilities-message property announcing multi-hop federation."""
    return {"version": VERSION, "hopLimit": hop_limit}


def announced_hop_limit(message: CapabilitiesMessage) -> int | None:
    """The hop limit a neighbour announced with its capabilities, None if it does not do multi-hop."""
    value = message.custom_properties.get(ANNOUNCE_KEY)
    if not isinstance(value, dict) or value.get("version") != VERSION:
        return None
    limit = value.get("hopLimit")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1 else None


def route_of(capability: Capability) -> tuple[str, ...]:
    """The interchanges before the announcer on the capability's route (empty: its own)."""
    value = capability.custom_properties.get(ROUTE_KEY)
    via = value.get("via") if isinstance(value, dict) else None
    if not isinstance(via, list) or not all(isinstance(name, str) for name in via):
        return ()
    return tuple(via)


def _with_route(capability: Capability, via: tuple[str, ...]) -> Capability:
    data = capability.to_json()
    data[ROUTE_KEY] = {"via": list(via)}
    return Capability.model_validate(data)


def reexported(own: str, to: str, offers: Mapping[str, Sequence[Capability]], multihop: Mapping[str, int],
               hop_limit: int) -> list[Capability]:
    """The capabilities learnt from other multi-hop neighbours to announce to ``to`` (itself one:
    the caller checks), each with its route; ``multihop`` maps those neighbours to their hop limits."""
    best: dict[str, tuple[tuple[str, ...], Capability]] = {}
    for neighbour in sorted(offers):
        if neighbour == to or neighbour not in multihop:
            continue
        for capability in offers[neighbour]:
            via = route_of(capability) + (neighbour,)
            if to in via or own in via or len(via) + 1 > min(hop_limit, multihop[neighbour]):
                continue  # back where it came from, a loop, or more hops (origin .. own, to) than allowed
            key = capability.application.publicationId
            if key not in best or (len(via), via) < (len(best[key][0]), best[key][0]):
                best[key] = (via, capability)
    return [_with_route(capability, via) for via, capability in (best[k] for k in sorted(best))]


def best_offers(offers: Mapping[str, Sequence[Capability]]) -> dict[str, str]:
    """publicationId -> the neighbour with the shortest route to it (ties: the smaller name)."""
    best: dict[str, tuple[int, str]] = {}
    for neighbour, capabilities in offers.items():
        for capability in capabilities:
            key = capability.application.publicationId
            candidate = (len(route_of(capability)), neighbour)
            if key not in best or candidate < best[key]:
                best[key] = candidate
    return {key: neighbour for key, (_, neighbour) in best.items()}


def restricted(selector: str) -> tuple[str, frozenset[str] | None]:
    """``selector`` as (root, publicationIds) when it is exactly what
    :func:`~ii_api.decisions.capability_selector.granted_selector` makes of a root (several times: the ids
    intersect), the root a valid selector of its own (so the parentheses enclose it); else
    (``selector``, None)."""
    root, ids = selector, None
    while root.startswith("(") and root.endswith(")") and (cut := root.rfind(_RESTRICTION)) > 0:
        inner, listed = root[1:cut], [m.replace("''", "'") for m in _LITERAL.findall(root[cut + len(_RESTRICTION):-1])]
        if not listed or granted_selector(inner, listed) != root or compile_selector(inner)[0] is None:
            break
        ids = frozenset(listed) if ids is None else ids & frozenset(listed)
        root = inner
    return root, ids


def _canonical(root: str, root_matcher: CapabilityMatcher, capabilities: Sequence[Capability], redirect: bool,
               mine: list[str]) -> str:
    """The selector to ask a neighbour for ``mine`` (publicationIds) of ``root``: the root itself
    when that is all it matches there, else the root restricted to them."""
    everything = {c.application.publicationId for c in capabilities
                  if root_matcher.matches(c.application, c.metadata) and redirect_compliant(c, redirect)}
    return root if everything == set(mine) else granted_selector(root, mine)


def desired_routes(local_subscriptions: Iterable[LocalSubscriptionView],
                   offers: Mapping[str, Sequence[Capability]]) -> dict[OutgoingKey, frozenset[int]]:
    """IP_079/IP_133 over the shortest routes: the subscriptions to request, each with the local
    subscriptions (and :class:`ReexportWant`) it serves; wants that need the same from a neighbour
    share one (see the module docstring)."""
    wanted: dict[OutgoingKey, set[int]] = {}
    for sub in local_subscriptions:
        compiled = compile_selector(sub.selector)[0]
        if compiled is None:
            continue
        matcher = CapabilityMatcher(compiled)
        root = restricted(sub.selector)[0]
        root_compiled = compiled if root == sub.selector else compile_selector(root)[0]
        assert root_compiled is not None  # restricted() returns valid roots only
        root_matcher = matcher if root == sub.selector else CapabilityMatcher(root_compiled)
        exclude = sub.neighbour if isinstance(sub, ReexportWant) else None
        usable = {n: c for n, c in offers.items() if n != exclude}
        routes = best_offers(usable)
        for neighbour, capabilities in usable.items():
            matching = [c for c in capabilities if matcher.matches(c.application, c.metadata)
                        and redirect_compliant(c, sub.redirect)]
            mine = sorted({c.application.publicationId for c in matching
                           if routes[c.application.publicationId] == neighbour})
            if not mine:
                continue
            selector = _canonical(root, root_matcher, capabilities, sub.redirect, mine)
            key = OutgoingKey(neighbour, selector, sub.actor_cn if sub.redirect else None)
            wanted.setdefault(key, set()).add(sub.id)
    return {key: frozenset(ids) for key, ids in wanted.items()}
