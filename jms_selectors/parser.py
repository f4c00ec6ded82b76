"""Selector text to :mod:`jms_selectors.ast` (IP_066 selector filters, JMS 1.1 §3.8 grammar).

Precedence climbing, SQL-92 style (``NOT`` applies to the whole predicate that follows); binary
operators loop, so long ``OR`` chains cost no stack. Recursion and tree height are capped at
:data:`MAX_DEPTH`, text at :data:`MAX_LENGTH` bytes of UTF-8: hostile input gets a SelectorError,
never a RecursionError. What the Apache brokers refuse at parse time (``< NULL``, ``= NULL``,
``IN (1, 2)``, ...) is refused here with a hint at the portable form. Precedence table and the
list of refusals: docs/selectors.md ("The parser", "Refused at parse time").
"""
from __future__ import annotations

from typing import NamedTuple, NoReturn

from jms_selectors.ast import (
    And, Arithmetic, Between, Comparison, Expr, Identifier, In, IsNull, Like, Literal, Not, Or, Unary, unparse,
)
from jms_selectors.errors import SelectorError
from jms_selectors.lexer import Token, describe, tokenize
from jms_selectors.like import LikePatternError, compile_like

#: Longest selector accepted, in bytes of UTF-8 (64 KiB).
MAX_LENGTH = 65536
#: Deepest nesting accepted: parentheses/NOT/sign recursion and height of the syntax tree.
MAX_DEPTH = 100

_OR, _AND, _NOT, _PRED, _ADD, _MUL, _UNARY = 1, 2, 3, 4, 5, 6, 7
_COMPARISONS = frozenset({"=", "<>", "<", "<=", ">", ">="})
_PREDICATE_START = _COMPARISONS | {"LIKE", "IN", "BETWEEN", "IS", "NOT"}
_KIND_NAMES = {
    "str": "a string literal",
    "num": "a numeric expression",
    "bool": "a condition",
    "null": "NULL",
    "any": "an identifier",
}


class _Parsed(NamedTuple):
    node: Expr
    pos: int  # where the expression starts in the text
    height: int  # height of the tree below node (a leaf is 1)


def parse(text: str) -> Expr:
    """Parse a selector into its syntax tree; SelectorError if it is invalid.

    An empty (or blank/comment-only) selector means "no selector" in JMS and gives
    ``Literal(True)``.
    """
    if not isinstance(text, str):
        raise TypeError(f"a selector must be a str, not {type(text).__name__}")
    _check_length(text)
    tokens = tokenize(text)
    if tokens[0].kind == "EOF":
        return Literal(True)
    parser = _Parser(text, tokens)
    result = parser.expression(0)
    token = parser.peek()
    if token.kind != "EOF":
        if token.kind == ")":
            parser.fail(token, "unbalanced ')' without a matching '('")
        parser.fail(token, f"unexpected {describe(text, token)} after a complete expression; "
                           "expected AND, OR or the end of the selector")
    parser.require_condition(result, "the selector")
    return result.node


def _check_length(text: str) -> None:
    if len(text) <= MAX_LENGTH // 4:
        return
    head = text[: MAX_LENGTH + 1]
    if len(head.encode("utf-8", "surrogatepass")) <= MAX_LENGTH:
        return
    size = 0
    for index, char in enumerate(head):
        size += 1 if char < "\x80" else 2 if char < "\u0800" else 4 if char > "\uffff" else 3
        if size > MAX_LENGTH:
            raise SelectorError(index, f"selector longer than {MAX_LENGTH} bytes (64 KiB) of UTF-8", text)


def _kind(node: Expr) -> str:
    if isinstance(node, Literal):
        value = node.value
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "bool"
        return "str" if isinstance(value, str) else "num"
    if isinstance(node, Identifier):
        return "any"
    if isinstance(node, (Unary, Arithmetic)):
        return "num"
    return "bool"


class _Parser:
    """One parse: the token list, a cursor and the current recursion depth."""

    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.index = 0
        self.depth = 0

    # ------------------------------------------------------------------ helpers
    def peek(self) -> Token:
        return self.tokens[self.index]

    def next(self) -> Token:
        token = self.tokens[self.index]
        if token.kind != "EOF":
            self.index += 1
        return token

    def fail(self, token: Token | int, reason: str) -> NoReturn:
        position = token if isinstance(token, int) else token.pos
        raise SelectorError(position, reason, self.text)

    def enter(self, token: Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(token, f"selector nested too deeply (more than {MAX_DEPTH} levels of parentheses, NOT or signs)")

    def make(self, node: Expr, pos: int, at: Token, *parts: _Parsed) -> _Parsed:
        """A parsed node starting at ``pos``, built at operator ``at`` (where depth errors point)."""
        height = 1 + max((p.height for p in parts), default=0)
        if height > MAX_DEPTH:
            self.fail(at, f"expression nested too deeply (syntax tree deeper than {MAX_DEPTH} levels)")
        return _Parsed(node, pos, height)

    def require_condition(self, part: _Parsed, context: str) -> None:
        kind = _kind(part.node)
        if kind in ("str", "num"):
            self.fail(part.pos, f"{context} needs a condition, found {_KIND_NAMES[kind]}")

    def require_number(self, part: _Parsed, context: str) -> None:
        kind = _kind(part.node)
        if kind in ("str", "bool"):
            what = "a boolean literal" if kind == "bool" and isinstance(part.node, Literal) else _KIND_NAMES[kind]
            self.fail(part.pos, f"{context} needs numeric operands, found {what}")

    def check_comparison(self, op: str, left: _Parsed, right: _Parsed) -> None:
        """What the Apache brokers refuse in ``left op right`` at parse time."""
        if op not in ("=", "<>"):
            self.check_ordered(left, repr(op))
            self.check_ordered(right, repr(op))
            return
        for part in (left, right):
            if _kind(part.node) == "null":
                test = "IS NULL" if op == "=" else "IS NOT NULL"
                self.fail(part.pos, f"'{op} NULL' is never true; write '{test}'")
        literals = [part for part in (left, right) if isinstance(part.node, Literal)]
        kinds = {_kind(part.node) for part in literals}
        if len(literals) == 2 and "bool" in kinds and len(kinds) == 2:
            boolean = next(part for part in literals if _kind(part.node) == "bool")
            self.fail(boolean.pos, "a boolean literal compares only with a boolean (TRUE, FALSE or a property)")

    def check_ordered(self, part: _Parsed, operator: str) -> None:
        """An operand of ``< <= > >=``/BETWEEN: numbers only (JMS 2.0 §3.8.1.2)."""
        kind = _kind(part.node)
        if kind == "null":
            self.fail(part.pos, f"{operator} with NULL is never true; test with IS NULL")
        if kind in ("str", "bool"):
            what = "a boolean literal" if isinstance(part.node, Literal) and kind == "bool" else _KIND_NAMES[kind]
            self.fail(part.pos, f"{operator} orders numbers only, found {what}; strings and booleans compare only with = and <>")

    # ------------------------------------------------------------------ grammar
    def expression(self, min_bp: int) -> _Parsed:
        """An expression whose operators all bind at least as tightly as ``min_bp``."""
        left = self.prefix(min_bp)
        chained = False
        while True:
            token = self.peek()
            kind = token.kind
            if kind == "OR" and min_bp <= _OR:
                left = self.nary(Or, left, _OR)
            elif kind == "AND" and min_bp <= _AND:
                left = self.nary(And, left, _AND)
            elif kind in _PREDICATE_START and min_bp <= _PRED:
                if chained:
                    self.fail(token, f"{describe(self.text, token)} cannot follow another comparison; "
                                     "use parentheses, e.g. (a = b) = TRUE")
                left = self.predicate(left)
                chained = True
            elif (kind == "+" or kind == "-") and min_bp <= _ADD or (kind == "*" or kind == "/") and min_bp <= _MUL:
                self.next()
                own = _ADD if kind in "+-" else _MUL
                right = self.expression(own + 1)
                self.require_number(left, f"arithmetic operator {kind!r}")
                self.require_number(right, f"arithmetic operator {kind!r}")
                left = self.make(Arithmetic(kind, left.node, right.node), left.pos, token, left, right)  # type: ignore[arg-type]
            else:
                return left

    def prefix(self, min_bp: int) -> _Parsed:
        token = self.next()
        kind = token.kind
        if kind == "ID":
            return _Parsed(Identifier(token.value), token.pos, 1)  # type: ignore[arg-type]
        if kind in ("STR", "INT", "FLOAT"):
            return _Parsed(Literal(token.value), token.pos, 1)  # type: ignore[arg-type]
        if kind in ("TRUE", "FALSE", "NULL"):
            return _Parsed(Literal({"TRUE": True, "FALSE": False, "NULL": None}[kind]), token.pos, 1)
        if kind == "(":
            self.enter(token)
            inner = self.expression(0)
            close = self.next()
            if close.kind != ")":
                self.fail(close, f"expected ')' to close the '(' at position {token.pos}, found {describe(self.text, close)}")
            self.depth -= 1
            return _Parsed(inner.node, token.pos, inner.height)
        if kind == "NOT":
            if min_bp > _NOT:
                self.fail(token, "NOT cannot start an operand here; put the condition in parentheses")
            self.enter(token)
            operand = self.expression(_NOT)
            self.depth -= 1
            self.require_condition(operand, "NOT")
            return self.make(Not(operand.node), token.pos, token, operand)
        if kind == "+" or kind == "-":
            self.enter(token)
            operand = self.expression(_UNARY)
            self.depth -= 1
            self.require_number(operand, f"unary {kind!r}")
            value = operand.node.value if isinstance(operand.node, Literal) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return _Parsed(Literal(-value if kind == "-" else value), token.pos, 1)
            return self.make(Unary(kind, operand.node), token.pos, token, operand)  # type: ignore[arg-type]
        if kind == "EOF":
            self.fail(token, "unexpected end of input; expected an operand")
        if kind in ("AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS"):
            word = self.text[token.pos : token.end]
            self.fail(token, f"expected an operand, found the reserved word {word!r}; "
                             f"to name a property so, quote it: \"{word}\"")
        self.fail(token, f"expected an operand, found {describe(self.text, token)}")

    def nary(self, cls: type[And] | type[Or], first: _Parsed, bp: int) -> _Parsed:
        keyword = "AND" if cls is And else "OR"
        self.require_condition(first, keyword)
        parts = [first]
        at = self.peek()
        while self.peek().kind == keyword:
            self.next()
            operand = self.expression(bp + 1)
            self.require_condition(operand, keyword)
            parts.append(operand)
        operands: list[Expr] = []
        height = 0
        for part in parts:
            if isinstance(part.node, cls):  # a parenthesised AND inside AND: same meaning, flatten
                operands.extend(part.node.operands)
                height = max(height, part.height - 1)
            else:
                operands.append(part.node)
                height = max(height, part.height)
        return self.make(cls(tuple(operands)), first.pos, at, _Parsed(first.node, first.pos, height))

    def predicate(self, left: _Parsed) -> _Parsed:
        token = self.next()
        kind = token.kind
        if kind in _COMPARISONS:
            right = self.expression(_ADD)
            self.check_comparison(kind, left, right)
            return self.make(Comparison(kind, left.node, right.node), left.pos, token, left, right)  # type: ignore[arg-type]
        if kind == "IS":
            negated = self.peek().kind == "NOT"
            if negated:
                self.next()
            null = self.next()
            if null.kind != "NULL":
                self.fail(null, f"expected NULL after IS{' NOT' if negated else ''}, found {describe(self.text, null)}")
            return self.make(IsNull(left.node, negated), left.pos, token, left)
        negated = kind == "NOT"
        if negated:
            token = self.next()
            kind = token.kind
            if kind not in ("LIKE", "IN", "BETWEEN"):
                self.fail(token, f"expected LIKE, IN or BETWEEN after NOT, found {describe(self.text, token)}")
        if kind == "LIKE":
            return self.like(left, negated, token)
        if kind == "IN":
            return self.in_list(left, negated, token)
        low = self.expression(_ADD)
        keyword = self.next()
        if keyword.kind != "AND":
            self.fail(keyword, f"expected AND between the bounds of BETWEEN, found {describe(self.text, keyword)}")
        high = self.expression(_ADD)
        for part in (left, low, high):
            self.check_ordered(part, "BETWEEN")
        return self.make(Between(left.node, low.node, high.node, negated), left.pos, token, left, low, high)

    def like(self, left: _Parsed, negated: bool, at: Token) -> _Parsed:
        pattern = self.next()
        if pattern.kind != "STR":
            self.fail(pattern, f"expected a string literal pattern after LIKE, found {describe(self.text, pattern)}")
        escape: str | None = None
        if self.peek().kind == "ESCAPE":
            self.next()
            literal = self.next()
            if literal.kind != "STR":
                self.fail(literal, f"expected a one-character string literal after ESCAPE, found {describe(self.text, literal)}")
            escape = literal.value  # type: ignore[assignment]
            if len(escape) != 1:  # type: ignore[arg-type]
                self.fail(literal, f"ESCAPE must be a single character, found {len(escape)} characters")  # type: ignore[arg-type]
        try:
            matcher = compile_like(pattern.value, escape)  # type: ignore[arg-type]
        except LikePatternError as exc:
            self.fail(pattern, exc.reason)
        node = Like(left.node, pattern.value, escape, negated)  # type: ignore[arg-type]
        object.__setattr__(node, "_matcher", matcher)  # prime Like.matcher
        return self.make(node, left.pos, at, left)

    def in_list(self, left: _Parsed, negated: bool, at: Token) -> _Parsed:
        if not isinstance(left.node, Identifier):
            self.fail(left.pos, f"IN applies to a property only, found {_KIND_NAMES[_kind(left.node)]}")
        opening = self.next()
        if opening.kind != "(":
            self.fail(opening, f"expected '(' after IN, found {describe(self.text, opening)}")
        if self.peek().kind == ")":
            self.fail(self.peek(), "the IN list must not be empty")
        values: list[str | int | float] = []
        while True:
            item = self.next()
            if item.kind in ("+", "-", "INT", "FLOAT"):
                name = unparse(left.node)
                portable = f"{name} <> 1 AND {name} <> 2" if negated else f"{name} = 1 OR {name} = 2"
                self.fail(item, f"an IN list holds string literals only; for numbers write ({portable} ...)")
            if item.kind != "STR":
                self.fail(item, f"expected a string literal in the IN list, found {describe(self.text, item)}")
            values.append(item.value)  # type: ignore[arg-type]
            separator = self.next()
            if separator.kind == ")":
                break
            if separator.kind != ",":
                self.fail(separator, f"expected ',' or ')' in the IN list, found {describe(self.text, separator)}")
        return self.make(In(left.node, tuple(values), negated), left.pos, at, left)
