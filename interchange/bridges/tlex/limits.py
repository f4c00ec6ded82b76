"""What the node's Improved Interface takes from the bridge's actor, and whether a ``[tlex]``
config fits it (sans-I/O; checked when the node config is read, before anything starts).

``[ii.limits]`` and ``[ii.policy]`` apply to the bridge as to any actor: capabilities in batches
(:func:`batches`), one delivery, SREM subscriptions of at most 1,900-character selectors (about 80
intersections each) and at most ``max_subscriptions_per_owner`` of them (Table 14 ILLEGAL:
:func:`refusal` names it). The arithmetic: docs/tlex-bridge.md ("What the node's II takes").
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from interchange.bridges.tlex.config import TlexBridgeConfig
from interchange.bridges.tlex.publication import SELECTOR_BUDGET, srem_selectors

__all__ = ["ActorLimits", "batches", "refusal"]


@dataclass(frozen=True)
class ActorLimits:
    """The node's ``[ii.limits]`` and ``[ii.policy]`` as they bear on the bridge (their defaults)."""

    capabilities_per_request: int = 5000
    capabilities_body_bytes: int = 4 * 1024 * 1024
    subscriptions_per_request: int = 500
    max_selector_length: int = 2000
    max_subscriptions: int = 1000  #: per subscriber (``max_subscriptions_per_owner``)

    @property
    def srem_selector_length(self) -> int:
        """The longest SREM subscription selector the bridge makes: what this node and, by default,
        its neighbours accept (:data:`~.publication.SELECTOR_BUDGET`)."""
        return min(self.max_selector_length, SELECTOR_BUDGET)


def batches(items: list[Any], field: str, most: int, body_bytes: int | None = None,
            as_json: Callable[[Any], Any] = lambda item: item) -> Iterator[list[Any]]:
    """``items`` in order, in lists of at most ``most`` whose JSON body (``{field: [...]}``, as aiohttp
    encodes it; ``as_json`` gives an item's JSON value) stays within ``body_bytes``; an item too
    big alone goes alone (the II answers 413 for it, with the reason)."""
    empty = len(json.dumps({field: []}))
    batch: list[Any] = []
    size = empty
    for item in items:
        item_size = len(json.dumps(as_json(item))) + 2  # and ", "
        if batch and (len(batch) >= most or (body_bytes is not None and size + item_size > body_bytes)):
            yield batch
            batch, size = [], empty
        batch.append(item)
        size += item_size
    if batch:
        yield batch


def refusal(config: TlexBridgeConfig, limits: ActorLimits) -> str | None:
    """Why the node could not take ``config``'s registrations, or None."""
    budget = limits.srem_selector_length
    selectors = srem_selectors([i for c in config.controllers for i in c.intersections], budget)
    longest = max(selectors, key=len)
    if len(longest) > budget:
        shown = longest if len(longest) <= 80 else longest[:77] + "..."
        return (f"an SREM subscription selector of {len(longest)} characters is needed ({shown}), "
                f"and the bridge makes them at most {budget} long (ii.policy.max_selector_length "
                f"{limits.max_selector_length}, and {SELECTOR_BUDGET} for neighbours): shorten the intersection ids")
    if len(selectors) > limits.max_subscriptions:
        intersections = sum(len(c.intersections) for c in config.controllers)
        return (f"{intersections} intersections need {len(selectors)} SREM subscriptions of at most "
                f"{budget} characters, and ii.policy.max_subscriptions_per_owner is "
                f"{limits.max_subscriptions}: raise either")
    return None
