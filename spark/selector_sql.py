"""A JMS selector (:mod:`jms_selectors`, the broker's dialect) as a Spark column over logged messages.

The selector is parsed by :func:`jms_selectors.parse` (so a selector the broker refuses is refused
here with the same error) and its syntax tree is turned into column expressions with the broker's
semantics (:mod:`jms_selectors.reference`, the definition): three-valued logic (a Spark null is
"unknown", as SQL's), values of unlike types compare FALSE, ``< <= > >=`` order numbers only,
``IN`` and ``LIKE`` are unknown or FALSE off strings, exact arithmetic stays exact (up to 38
digits here), exact division truncates toward zero, ``NOT BETWEEN`` is ``x < a OR x > b``.

A message's property values come from the log (each value as text and its JSON kind, put together
by :func:`spark.parse.all_properties` from the messages table): a JSON string is a string, an integer an exact number, a number
with a fraction or exponent an approximate one (the broker's AMQP float/double), ``true``/``false``
a boolean, ``null`` or a missing name null; an object or array is a value unlike every literal.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F

import jms_selectors
from spark import parse
from jms_selectors.ast import (
    And,
    Arithmetic,
    Between,
    Comparison,
    Expr,
    Identifier,
    In,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
    Unary,
)

EXACT = "decimal(38,0)"


def _null_kind() -> Column:
    return F.lit(None).cast("string")


@dataclass(frozen=True)
class Value:
    """A selector value as columns: its kind ("string", "exact", "approx", "boolean", "other"; null:
    null) and its value as text, exact number, double and boolean (each null when not that kind)."""

    kind: Column
    text: Column
    exact: Column
    approx: Column
    boolean: Column


def _of(kind: str | Column, text: Column | None = None, exact: Column | None = None, approx: Column | None = None,
        boolean: Column | None = None) -> Value:
    def none(t: str) -> Column:
        return F.lit(None).cast(t)
    return Value(F.lit(kind) if isinstance(kind, str) else kind, text if text is not None else none("string"),
                 exact if exact is not None else none(EXACT), approx if approx is not None else none("double"),
                 boolean if boolean is not None else none("boolean"))


_JSON_KINDS = {"string": "string", "integer": "exact", "float": "approx", "boolean": "boolean"}


def _property(name: str, values: Column, kinds: Column) -> Value:
    text, json_kind = values[name], kinds[name]
    kind = F.when(json_kind.isNull() | (json_kind == "null"), _null_kind())
    for json, ours in _JSON_KINDS.items():
        kind = kind.when(json_kind == json, F.lit(ours))
    kind = kind.otherwise(F.lit("other"))
    return _of(kind, F.when(kind == "string", text), F.when(kind == "exact", text.try_cast(EXACT)),
               F.when(kind.isin("exact", "approx"), text.try_cast("double")),
               F.when(kind == "boolean", text == "true"))


def _literal(value: object) -> Value:
    match value:
        case None:
            return _of(_null_kind())
        case bool():
            return _of("boolean", boolean=F.lit(value))
        case int():
            return _of("exact", exact=F.lit(value).cast(EXACT), approx=F.lit(float(value)).cast("double"))
        case float():
            return _of("approx", approx=F.lit(value).cast("double"))
        case str():
            return _of("string", text=F.lit(value))
    return _of("other")


def _number(v: Value) -> Column:
    return v.kind.isin("exact", "approx")


def _compare(op: str, a: Value, b: Value) -> Column:
    """``a op b`` (reference.compare): unknown with a null, numbers any way, strings and booleans =/<>, else unlike."""
    both_exact = (a.kind == "exact") & (b.kind == "exact")
    operations = {"=": lambda x, y: x == y, "<>": lambda x, y: x != y, "<": lambda x, y: x < y,
                  "<=": lambda x, y: x <= y, ">": lambda x, y: x > y, ">=": lambda x, y: x >= y}
    fn = operations[op]
    numeric = F.when(both_exact, fn(a.exact, b.exact)).otherwise(fn(a.approx, b.approx))
    if op in ("=", "<>"):
        same = F.when((a.kind == "string") & (b.kind == "string"), a.text == b.text) \
            .when((a.kind == "boolean") & (b.kind == "boolean"), a.boolean == b.boolean).otherwise(F.lit(False))
        other = same if op == "=" else ~same
    else:
        other = F.lit(False)
    return F.when(a.kind.isNull() | b.kind.isNull(), F.lit(None).cast("boolean")) \
        .when(_number(a) & _number(b), numeric).otherwise(other)


def _arithmetic(op: str, a: Value, b: Value) -> Value:
    both = _number(a) & _number(b)
    exact = (a.kind == "exact") & (b.kind == "exact")
    x, y = a.exact, b.exact
    # try_*: beyond 38 digits the value is unknown here (the broker's Python ints are unbounded)
    exact_result = {"+": F.try_add(x, y), "-": F.try_subtract(x, y), "*": F.try_multiply(x, y),
                    "/": F.when(y != 0, F.try_divide(x - x % y, y).try_cast(EXACT))}[op]
    approx_result = {"+": a.approx + b.approx, "-": a.approx - b.approx, "*": a.approx * b.approx,
                     "/": F.try_divide(a.approx, b.approx)}[op]
    if op == "/":  # IEEE 754: x / 0.0 is infinite (0 / 0.0 NaN), not unknown
        approx_result = F.when(b.approx == 0, F.when(a.approx == 0, F.lit(float("nan")))
                               .when(a.approx > 0, F.lit(float("inf"))).otherwise(F.lit(float("-inf")))) \
            .otherwise(approx_result)
    kind = F.when(both & exact & exact_result.isNotNull(), "exact").when(both & ~exact, "approx")
    return _of(kind, exact=F.when(both & exact, exact_result.try_cast(EXACT)),
               approx=F.when(both & exact, exact_result.cast("double")).when(both, approx_result))


def _truth(v: Value) -> Column:
    """A value as a condition: a boolean is itself, null unknown, anything else FALSE."""
    return F.when(v.kind.isNull(), F.lit(None).cast("boolean")).when(v.kind == "boolean", v.boolean) \
        .otherwise(F.lit(False))


def like_regex(pattern: str, escape: str | None) -> str:
    """A JMS LIKE pattern as an anchored Java regular expression (``%`` any run, ``_`` one code point)."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if escape is not None and char == escape and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        i += 1
    return "(?s)^" + "".join(out) + r"\z"


class Compiler:
    """The columns of one selector over a map of every property's value text and one of its JSON kind
    (:func:`spark.parse.all_properties`)."""

    def __init__(self, values: Column, kinds: Column) -> None:
        self.values, self.kinds = values, kinds

    def value(self, node: Expr) -> Value:
        match node:
            case Identifier(name=name):
                return _property(name, self.values, self.kinds)
            case Literal(value=value):
                return _literal(value)
            case Unary(op=op, operand=operand):
                v = self.value(operand)
                sign = -1 if op == "-" else 1
                return _of(F.when(_number(v), v.kind), exact=F.when(v.kind == "exact", v.exact * sign),
                           approx=F.when(_number(v), v.approx * sign))
            case Arithmetic(op=op, left=left, right=right):
                return _arithmetic(op, self.value(left), self.value(right))
        condition = self.condition(node)
        return _of(F.when(condition.isNotNull(), F.lit("boolean")), boolean=condition)

    def condition(self, node: Expr) -> Column:
        match node:
            case Comparison(op=op, left=left, right=right):
                return _compare(op, self.value(left), self.value(right))
            case Like(subject=subject, pattern=pattern, escape=escape, negated=negated):
                v = self.value(subject)
                matched = F.when(v.kind.isNull(), F.lit(None).cast("boolean")).when(
                    v.kind == "string", v.text.rlike(like_regex(pattern, escape))).otherwise(F.lit(False))
                return ~matched if negated else matched
            case In(subject=subject, values=values, negated=negated):
                v = self.value(subject)
                found = F.when(v.kind == "string", v.text.isin(*values))
                return ~found if negated else found
            case Between(subject=subject, low=low, high=high, negated=negated):
                x, a, b = self.value(subject), self.value(low), self.value(high)
                if negated:
                    return _compare("<", x, a) | _compare(">", x, b)
                return _compare(">=", x, a) & _compare("<=", x, b)
            case IsNull(subject=subject, negated=negated):
                missing = self.value(subject).kind.isNull()
                return ~missing if negated else missing
            case Not(operand=operand):
                return ~self.condition(operand)
            case And(operands=operands):
                return reduce(Column.__and__, [self.condition(o) for o in operands])
            case Or(operands=operands):
                return reduce(Column.__or__, [self.condition(o) for o in operands])
        return _truth(self.value(node))


def matches(text: str, values: Column | None = None, kinds: Column | None = None) -> Column:
    """TRUE for the messages the selector ``text`` selects (a blank selector selects every one).

    Raises :class:`jms_selectors.SelectorError` for a selector the broker refuses.
    """
    selector = jms_selectors.compile(text)
    if not selector.text.strip():
        return F.lit(True)
    compiler = Compiler(parse.all_properties() if values is None else values,
                        parse.all_properties(kinds=True) if kinds is None else kinds)
    return F.coalesce(compiler.condition(selector.ast), F.lit(False))
