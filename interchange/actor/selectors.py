"""A selector checked before the node sees it: its parse, then which capabilities it overlaps.

:func:`check_selector` parses with the broker's own engine (:mod:`jms_selectors`, the Apache
brokers' dialect, IP_066/067): a selector it refuses gets the very message the node answers
NOT_VALID with (``invalid selector at position N: reason``, the reason naming the portable form
where there is one), plus a caret under the position. No network is needed.

:func:`overlap` decides which capabilities a selector can match with the II's own matching
(:class:`ii_api.selectors.matching.CapabilityMatcher`, which decides NO_OVERLAP for the node) and, for each
one it cannot match, which part of the selector rules it out: each operand of a top-level AND is
matched alone (the same matcher), and those that alone match none of the capability's messages
are named with the capability's values of the properties they test.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import jms_selectors
from ii_api.selectors.matching import CapabilityMatcher
from ii_api.wire.models import Capability
from jms_selectors.ast import And, Expr, identifiers, unparse

__all__ = ["CapabilityVerdict", "Overlap", "SelectorProblem", "check_selector", "overlap"]


@dataclass(frozen=True)
class SelectorProblem:
    """Why the node would refuse a selector (NOT_VALID), and where."""

    text: str
    position: int
    reason: str
    message: str  #: the node's errorMessage, word for word

    def pointer(self) -> str:
        """The selector's line holding the position, and a caret under it."""
        start = self.text.rfind("\n", 0, self.position) + 1
        end = self.text.find("\n", self.position)
        line = self.text[start:end if end >= 0 else len(self.text)]
        return f"{line}\n{' ' * (self.position - start)}^"

    def __str__(self) -> str:
        return self.message


def check_selector(text: str) -> SelectorProblem | None:
    """None if the node's parser accepts ``text``, else the problem it would report."""
    try:
        jms_selectors.compile(text)
    except jms_selectors.SelectorError as exc:
        return SelectorProblem(text, exc.position, exc.reason, str(exc))
    return None


@dataclass(frozen=True)
class CapabilityVerdict:
    """Whether the selector can match messages of one capability; if not, what rules it out."""

    capability: Capability
    matches: bool
    reasons: tuple[str, ...] = ()

    @property
    def publication_id(self) -> str:
        return str(self.capability.application.publicationId)

    def describe(self) -> str:
        app = self.capability.application
        head = f"{self.publication_id} ({app.messageType}, {app.publisherId})"
        return f"{head}: matches" if self.matches else f"{head}: no match: {'; '.join(self.reasons)}"


@dataclass(frozen=True)
class Overlap:
    """A selector against a set of capabilities."""

    selector: str
    verdicts: tuple[CapabilityVerdict, ...]

    @property
    def matching(self) -> list[CapabilityVerdict]:
        return [v for v in self.verdicts if v.matches]

    @property
    def any(self) -> bool:
        return any(v.matches for v in self.verdicts)

    def summary(self) -> str:
        if not self.verdicts:
            return "no capabilities to match against: the node would answer NO_OVERLAP"
        if self.any:
            ids = ", ".join(v.publication_id for v in self.matching)
            return f"matches {len(self.matching)} of {len(self.verdicts)} capabilities: {ids}"
        return f"matches none of {len(self.verdicts)} capabilities: the node would answer NO_OVERLAP"


def _conjuncts(node: Expr) -> Sequence[Expr]:
    return node.operands if isinstance(node, And) else (node,)


def _values(capability: Capability, names: Iterable[str]) -> str:
    """The capability's values of the properties ``names`` (as its JSON says them)."""
    app: dict[str, Any] = capability.application.to_json()
    meta: dict[str, Any] = capability.metadata.to_json()
    shown = []
    for name in sorted(names):
        value = app.get(name, meta.get(name))
        if name == "id" and "ids" in app:
            value = app["ids"]
        shown.append(f"{name} {value!r}" if value is not None else f"no {name}")
    return ", ".join(shown)


def _verdict(matcher: CapabilityMatcher, parts: Sequence[tuple[str, frozenset[str], CapabilityMatcher]],
             capability: Capability) -> CapabilityVerdict:
    def fits(m: CapabilityMatcher) -> bool:
        return m.matches(capability.application, capability.metadata, domains=capability.domains,
                         shape=capability.shape)
    if fits(matcher):
        return CapabilityVerdict(capability, True)
    reasons = tuple(f"{text} is false for all its messages (it has {_values(capability, names)})"
                    for text, names, part in parts if not fits(part))
    return CapabilityVerdict(capability, False, reasons or ("no message of it makes the whole selector true",))


def overlap(selector: str, capabilities: Iterable[Capability]) -> Overlap:
    """Which of ``capabilities`` the selector can match, by the II's matching (the selector must
    parse: :func:`check_selector` first). An empty selector matches every capability."""
    matcher = CapabilityMatcher(selector)
    if not selector.strip():
        return Overlap(selector, tuple(CapabilityVerdict(c, True) for c in capabilities))
    tree = jms_selectors.parse(selector)
    operands = _conjuncts(tree)
    parts = [(unparse(op), identifiers(op), CapabilityMatcher(unparse(op))) for op in operands] if len(operands) > 1 \
        else [(unparse(tree), identifiers(tree), matcher)]
    return Overlap(selector, tuple(_verdict(matcher, parts, c) for c in capabilities))
