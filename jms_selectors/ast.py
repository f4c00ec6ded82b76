"""The parsed form of a selector: small frozen dataclasses (IP_066/067 selector filters).

Value expressions (:class:`Identifier`, :class:`Literal`, :class:`Unary`, :class:`Arithmetic`),
predicates (:class:`Comparison`, :class:`Like`, :class:`In`, :class:`Between`, :class:`IsNull`)
and connectives (:class:`Not`, n-ary :class:`And`/:class:`Or`), in a canonical form meant to be
analysed (capability overlap, routing indexes) as well as compiled; :func:`unparse` gives text
that parses to an equal tree. The canonical forms: docs/selectors.md ("The tree").
"""
from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Union

from jms_selectors.lexer import RESERVED, is_identifier_part, is_identifier_start
from jms_selectors.like import LikePattern, compile_like

#: Python types a :class:`Literal` may hold: ``str``, ``int`` (exact numeric), ``float``
#: (approximate numeric), ``bool`` (TRUE/FALSE) or ``None`` (NULL).
LiteralValue = Union[str, int, float, bool, None]
SignOp = typing.Literal["+", "-"]
ArithmeticOp = typing.Literal["+", "-", "*", "/"]
ComparisonOp = typing.Literal["=", "<>", "<", "<=", ">", ">="]


@dataclass(frozen=True)
class Identifier:
    """A message property, looked up by exact (case-sensitive) name."""

    name: str


@dataclass(frozen=True, eq=False)
class Literal:
    """A constant. Equality distinguishes ``TRUE``/``1``/``1.0`` (unlike plain ``==``)."""

    value: LiteralValue

    def _key(self) -> tuple[type, LiteralValue]:
        return (type(self.value), self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Literal) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True)
class Unary:
    """Arithmetic sign ``+x`` / ``-x``."""

    op: SignOp
    operand: Expr


@dataclass(frozen=True)
class Arithmetic:
    """Binary arithmetic ``left op right``; ``/`` of two exact numbers truncates toward zero."""

    op: ArithmeticOp
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Comparison:
    """``left op right``; ``<``..``>=`` are numeric only, ``=``/``<>`` also strings and booleans."""

    op: ComparisonOp
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Like:
    """``subject [NOT] LIKE pattern [ESCAPE escape]``; ``%`` any run, ``_`` one character."""

    subject: Expr
    pattern: str
    escape: str | None = None
    negated: bool = False

    @property
    def matcher(self) -> LikePattern:
        """The compiled :class:`jms_selectors.like.LikePattern` (computed once per node)."""
        cached = self.__dict__.get("_matcher")
        if cached is None:
            cached = compile_like(self.pattern, self.escape)
            object.__setattr__(self, "_matcher", cached)
        return cached

    def __reduce__(self) -> tuple[type[Like], tuple[object, ...]]:  # the cached matcher holds closures: pickle the fields only
        return (Like, (self.subject, self.pattern, self.escape, self.negated))


@dataclass(frozen=True)
class In:
    """``subject [NOT] IN (v1, v2, ...)``; the parser gives string literals only, in source order.

    Unknown unless the subject is a string (numbers built into a tree directly never match)."""

    subject: Expr
    values: tuple[str | int | float, ...]
    negated: bool = False


@dataclass(frozen=True)
class Between:
    """``subject [NOT] BETWEEN low AND high``: ``low <= subject <= high``; negated ``subject < low OR subject > high``."""

    subject: Expr
    low: Expr
    high: Expr
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    """``subject IS [NOT] NULL``; never unknown. Missing properties and unknown values are null."""

    subject: Expr
    negated: bool = False


@dataclass(frozen=True)
class Not:
    """``NOT operand`` (three-valued: NOT unknown is unknown)."""

    operand: Expr


@dataclass(frozen=True)
class And:
    """``o1 AND o2 AND ...`` (n-ary, at least two operands)."""

    operands: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    """``o1 OR o2 OR ...`` (n-ary, at least two operands)."""

    operands: tuple[Expr, ...]


Expr = Union[Identifier, Literal, Unary, Arithmetic, Comparison, Like, In, Between, IsNull, Not, And, Or]
Predicate = (Comparison, Like, In, Between, IsNull)


def children(node: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``node``, in source order."""
    if isinstance(node, (And, Or)):
        return node.operands
    if isinstance(node, (Arithmetic, Comparison)):
        return (node.left, node.right)
    if isinstance(node, Between):
        return (node.subject, node.low, node.high)
    if isinstance(node, (Like, In, IsNull)):
        return (node.subject,)
    if isinstance(node, (Not, Unary)):
        return (node.operand,)
    return ()


def identifiers(node: Expr) -> frozenset[str]:
    """Names of all properties the expression reads (iterative; safe for any depth)."""
    names: set[str] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, Identifier):
            names.add(current.name)
        else:
            stack.extend(children(current))
    return frozenset(names)


# ---------------------------------------------------------------------------------- unparse
_ATOM, _UNARY, _MUL, _ADD, _PRED, _NOT, _AND, _OR = 8, 7, 6, 5, 4, 3, 2, 1


def _quote(text: str, quote: str) -> str:
    return quote + text.replace(quote, quote + quote) + quote


def _bare_identifier(name: str) -> bool:
    return (
        bool(name)
        and name.isascii()
        and is_identifier_start(name[0])
        and all(is_identifier_part(c) for c in name[1:])
        and name.upper() not in RESERVED
    )


def _literal_text(value: LiteralValue) -> str:
    if value is None:
        return "NULL"
    if value is True:
        return "TRUE"
    if value is False:
        return "FALSE"
    if isinstance(value, str):
        return _quote(value, "'")
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueError("a NaN literal cannot be written in selector syntax")
        if math.isinf(value):
            return "1E999" if value > 0 else "-1E999"
        return repr(float(value))
    raise TypeError(f"not a selector literal: {value!r}")


def _level(node: Expr) -> int:
    if isinstance(node, Literal):
        v = node.value
        negative = isinstance(v, (int, float)) and not isinstance(v, bool) and (v < 0 or math.copysign(1, v) < 0)
        return _UNARY if negative else _ATOM
    if isinstance(node, Identifier):
        return _ATOM
    if isinstance(node, Unary):
        return _UNARY
    if isinstance(node, Arithmetic):
        return _MUL if node.op in "*/" else _ADD
    if isinstance(node, Predicate):
        return _PRED
    if isinstance(node, Not):
        return _NOT
    return _AND if isinstance(node, And) else _OR


def unparse(node: Expr) -> str:
    """Selector text for ``node`` (parenthesised only where precedence needs it).

    Parsing the result gives an equal tree for any tree the parser produces. Raises
    ValueError for a NaN literal, which has no syntax.
    """

    def sub(child: Expr, minimum: int) -> str:
        text = unparse(child)
        return f"({text})" if _level(child) < minimum else text

    if isinstance(node, Literal):
        return _literal_text(node.value)
    if isinstance(node, Identifier):
        return node.name if _bare_identifier(node.name) else _quote(node.name, '"')
    if isinstance(node, Unary):
        operand = sub(node.operand, _UNARY)
        return node.op + (" " if operand[0] in "+-" else "") + operand
    if isinstance(node, Arithmetic):
        own = _level(node)
        return f"{sub(node.left, own)} {node.op} {sub(node.right, own + 1)}"
    if isinstance(node, Comparison):
        return f"{sub(node.left, _ADD)} {node.op} {sub(node.right, _ADD)}"
    if isinstance(node, Like):
        text = f"{sub(node.subject, _ADD)} {'NOT ' if node.negated else ''}LIKE {_quote(node.pattern, chr(39))}"
        return text + (f" ESCAPE {_quote(node.escape, chr(39))}" if node.escape is not None else "")
    if isinstance(node, In):
        items = ", ".join(_literal_text(v) for v in node.values)
        return f"{sub(node.subject, _ADD)} {'NOT ' if node.negated else ''}IN ({items})"
    if isinstance(node, Between):
        return (
            f"{sub(node.subject, _ADD)} {'NOT ' if node.negated else ''}BETWEEN "
            f"{sub(node.low, _ADD)} AND {sub(node.high, _ADD)}"
        )
    if isinstance(node, IsNull):
        return f"{sub(node.subject, _ADD)} IS {'NOT ' if node.negated else ''}NULL"
    if isinstance(node, Not):
        return f"NOT {sub(node.operand, _NOT)}"
    if isinstance(node, And):
        return " AND ".join(sub(op, _NOT) for op in node.operands)
    if isinstance(node, Or):
        return " OR ".join(sub(op, _AND) for op in node.operands)
    raise TypeError(f"not a selector node: {node!r}")
