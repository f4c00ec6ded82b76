"""Reference tree-walking evaluator: the definition of selector semantics (IP_066/067).

Deliberately plain and independent of :mod:`jms_selectors.compiler`: it is the differential
testing oracle and the benchmark baseline. Three-valued: ``True``, ``False`` or ``None``
(unknown). Value expressions evaluate to a Python value, with ``None`` for null/unknown.

Values of unlike types compare FALSE, not unknown (JMS 2.0 §3.8.1.2 and the Apache brokers:
the final ``return Boolean.FALSE`` branches of ``ComparisonExpression.compare`` in
qpid-broker-j, activemq and activemq-artemis), so ``<>`` between them is TRUE; only a null
operand makes a comparison unknown.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import TypeGuard

from jms_selectors.ast import (
    And, Arithmetic, Between, Comparison, Expr, Identifier, In, IsNull, Like, Literal, Not, Or, Unary,
)

_ORDER = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def evaluate(node: Expr, properties: Mapping[str, object]) -> bool | None:
    """Truth of ``node`` for a message's application properties: True, False or None (unknown).

    Never raises: a mapping that fails when read makes the result unknown.
    """
    try:
        return _truth(_value(node, properties))
    except Exception:  # noqa: BLE001 (a property mapping's own failure makes the result unknown)
        return None


def is_number(value: object) -> TypeGuard[int | float]:
    """Exact (int) or approximate (float) numeric value, subclasses included; bool is not a number."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def value(node: Expr, properties: Mapping[str, object]) -> object:
    """Value of any expression: a number, string or boolean, or None for null/unknown.

    Conditions give True/False/None; may raise if reading the mapping raises.
    """
    return _value(node, properties)


def _truth(value: object) -> bool | None:
    """A value used as a condition: booleans are themselves, null unknown, anything else FALSE.

    (The Apache brokers' ``BooleanCastExpression``: a non-boolean property is FALSE.)
    """
    if value is None or isinstance(value, bool):
        return value
    return False


def _not(value: bool | None) -> bool | None:
    return None if value is None else not value


def _and(values: list[bool | None]) -> bool | None:
    if False in values:
        return False
    return None if None in values else True


def _or(values: list[bool | None]) -> bool | None:
    if True in values:
        return True
    return None if None in values else False


def compare(op: str, left: object, right: object) -> bool | None:
    """``left op right``: unknown if either is null; numbers with any operator, strings and
    booleans with = and <> only; any other pairing is unlike, FALSE (so ``<>`` is TRUE)."""
    if left is None or right is None:
        return None
    if is_number(left) and is_number(right):
        if op == "=":
            return left == right
        if op == "<>":
            return left != right
        return _ORDER[op](left, right)
    same_kind = (isinstance(left, str) and isinstance(right, str)) or (
        isinstance(left, bool) and isinstance(right, bool)
    )
    if op in ("=", "<>"):
        return (same_kind and left == right) == (op == "=")
    return False


def _float(value: int | float) -> float:
    """An exact number as the nearest double, infinite when out of range (Java's conversion)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def arithmetic(op: str, left: object, right: object) -> int | float | None:
    """``left op right`` on numbers; unknown (None) for anything else or exact division by zero."""
    if not (is_number(left) and is_number(right)):
        return None
    if isinstance(left, int) and isinstance(right, int):
        if op == "+":
            return int(left) + int(right)
        if op == "-":
            return int(left) - int(right)
        if op == "*":
            return int(left) * int(right)
        if right == 0:
            return None
        quotient = abs(left) // abs(right)  # SQL-92: truncate toward zero
        return quotient if (left < 0) == (right < 0) else -quotient
    x, y = _float(left), _float(right)
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if y == 0.0:  # IEEE 754: x/±0 is ±inf, 0/0 and nan/0 are nan
        if x == 0.0 or math.isnan(x):
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def _value(node: Expr, props: Mapping[str, object]) -> object:
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Identifier):
        return props.get(node.name)
    if isinstance(node, Unary):
        operand = _value(node.operand, props)
        if not is_number(operand):
            return None
        return -operand if node.op == "-" else operand
    if isinstance(node, Arithmetic):
        return arithmetic(node.op, _value(node.left, props), _value(node.right, props))
    if isinstance(node, Comparison):
        return compare(node.op, _value(node.left, props), _value(node.right, props))
    if isinstance(node, Like):
        subject = _value(node.subject, props)
        if subject is None:
            return None
        if not isinstance(subject, str):  # unlike type: LIKE is FALSE, NOT LIKE TRUE
            return node.negated
        return node.matcher.matches(subject) != node.negated
    if isinstance(node, In):  # strings only; any other subject is unknown, as in the Apache brokers
        subject = _value(node.subject, props)
        if not isinstance(subject, str):
            return None
        return (subject in node.values) != node.negated
    if isinstance(node, Between):
        subject = _value(node.subject, props)
        low, high = _value(node.low, props), _value(node.high, props)
        if node.negated:  # x NOT BETWEEN a AND b is x < a OR x > b (createNotBetween in all three)
            return _or([compare("<", subject, low), compare(">", subject, high)])
        return _and([compare(">=", subject, low), compare("<=", subject, high)])
    if isinstance(node, IsNull):
        return (_value(node.subject, props) is None) != node.negated
    if isinstance(node, Not):
        return _not(_truth(_value(node.operand, props)))
    if isinstance(node, (And, Or)):  # stops at the first FALSE (AND) / TRUE (OR) operand
        decisive = isinstance(node, Or)
        result: bool | None = not decisive
        for operand in node.operands:
            truth = _truth(_value(operand, props))
            if truth is decisive:
                return decisive
            if truth is None:
                result = None
        return result
    raise TypeError(f"not a selector node: {node!r}")
