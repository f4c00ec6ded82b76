"""The subscription policy: when a subscription request is ILLEGAL (Table 14 "request too large").

Table 14 leaves ILLEGAL to the receiving interchange. This node's policy, for every subscription
asked by a neighbour (IP_078) or a local actor: a selector longer than ``max_selector_length``
(2,000); one that does not narrow every alternative by ``messageType``, ``quadTree``,
``publisherId``, ``publicationId`` or ``originatingCountry`` (positive predicates only; AND needs
one such operand, OR all, NOT never counts); more than ``max_subscriptions_per_owner`` (1,000) per
requester. Sans-I/O: :meth:`SubscriptionPolicy.check` returns the reason or None. The formal
rules with examples: docs/improved-interface.md ("Policy (ILLEGAL)").
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from jms_selectors.ast import And, Comparison, Expr, Identifier, In, Like, Literal, Not, Or

__all__ = ["CONSTRAINING_PROPERTIES", "SubscriptionPolicy", "is_constrained"]

CONSTRAINING_PROPERTIES: frozenset[str] = frozenset(
    {"messageType", "quadTree", "publisherId", "publicationId", "originatingCountry"})


def _names_constraining(subject: Expr, properties: frozenset[str]) -> bool:
    return isinstance(subject, Identifier) and subject.name in properties


def _predicate_constrains(node: Expr, properties: frozenset[str]) -> bool:
    if isinstance(node, Comparison):
        if node.op != "=":
            return False
        left, right = node.left, node.right
        return ((_names_constraining(left, properties) and isinstance(right, Literal) and right.value is not None)
                or (_names_constraining(right, properties) and isinstance(left, Literal) and left.value is not None))
    if isinstance(node, In):
        return not node.negated and _names_constraining(node.subject, properties) and bool(node.values)
    if isinstance(node, Like):
        return (not node.negated and _names_constraining(node.subject, properties)
                and node.matcher.kind != "any")
    return False


def is_constrained(node: Expr, properties: frozenset[str] = CONSTRAINING_PROPERTIES) -> bool:
    """Whether every alternative of ``node`` narrows one of ``properties`` (see the module doc)."""
    # Recursive: the selector parser bounds the tree height (100), far below the stack limit.
    if isinstance(node, And):
        return any(is_constrained(operand, properties) for operand in node.operands)
    if isinstance(node, Or):
        return all(is_constrained(operand, properties) for operand in node.operands)
    if isinstance(node, Not):
        return False
    return _predicate_constrains(node, properties)


class SubscriptionPolicy(BaseModel):
    """What this interchange refuses as ILLEGAL (configurable under ``[ii.policy]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_selector_length: int = Field(default=2000, ge=16, le=65536)
    require_constraint: bool = True
    max_subscriptions_per_owner: int = Field(default=1000, ge=1)

    def check(self, selector_text: str, ast: Expr, *, existing: int = 0) -> str | None:
        """The reason the subscription is ILLEGAL, or None. ``existing``: the owner's subscriptions."""
        if len(selector_text) > self.max_selector_length:
            return (f"selector too long: {len(selector_text)} characters, this interchange accepts at most "
                    f"{self.max_selector_length}")
        if self.require_constraint and not is_constrained(ast):
            return ("selector too broad: every alternative must select by messageType, quadTree, publisherId, "
                    "publicationId or originatingCountry (=, IN or LIKE)")
        if existing >= self.max_subscriptions_per_owner:
            return f"too many subscriptions: at most {self.max_subscriptions_per_owner} per subscriber"
        return None
