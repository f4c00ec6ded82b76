"""The foreign interchange's selectors: a deliberately small subset of the JMS selector syntax (IP_066).

Enough for what a neighbour sends it here: terms ``property = 'text'`` and ``property LIKE
'pattern'`` (``%`` any run, ``_`` one character) joined by ``AND``. Anything else is not a valid
selector to it (Table 14 ``NOT_VALID``). A message matches when every term holds for its string
application properties. A selector overlaps a capability unless an ``=`` term on one of the
capability's identifying properties names another value, or a ``quadTree LIKE '%,<tile>%'``
term names a tile that neither lies in nor contains any of the capability's tiles.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_TOKEN = re.compile(r"\s*(?:(?P<word>[A-Za-z_$][A-Za-z0-9_$]*)|(?P<text>'(?:[^']|'')*')|(?P<eq>=))")
_IDENTIFYING = ("messageType", "publisherId", "publicationId", "originatingCountry", "protocolVersion")
_TILE_PATTERN = re.compile(r"%,([0-3]+)%")


class InvalidSelector(ValueError):
    """Not a selector this interchange understands."""


@dataclass(frozen=True)
class Term:
    name: str
    like: bool
    value: str

    def holds(self, properties: Mapping[str, Any]) -> bool:
        actual = properties.get(self.name)
        if not isinstance(actual, str):
            return False
        if not self.like:
            return actual == self.value
        pattern = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in self.value)
        return re.fullmatch(pattern, actual, re.DOTALL) is not None


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    while position < len(text.rstrip()):
        found = _TOKEN.match(text, position)
        if found is None or found.end() == position:
            raise InvalidSelector(f"cannot read the selector at position {position}")
        kind = found.lastgroup or ""
        tokens.append((kind, found.group(kind)))
        position = found.end()
    return tokens


def parse(text: str) -> tuple[Term, ...]:
    """The ANDed terms of ``text``; InvalidSelector when it is not of that form."""
    tokens, terms = _tokens(text), []
    while True:
        if len(tokens) < 3:
            raise InvalidSelector("expected: property = 'text' or property LIKE 'pattern'")
        (kind, name), (op_kind, op), (value_kind, value) = tokens[:3]
        like = op_kind == "word" and op.upper() == "LIKE"
        if kind != "word" or name.upper() in ("AND", "LIKE") or not (like or op_kind == "eq") or value_kind != "text":
            raise InvalidSelector("expected: property = 'text' or property LIKE 'pattern'")
        terms.append(Term(name, like, value[1:-1].replace("''", "'")))
        tokens = tokens[3:]
        if not tokens:
            return tuple(terms)
        if tokens[0][0] != "word" or tokens[0][1].upper() != "AND":
            raise InvalidSelector("terms are joined by AND")
        tokens = tokens[1:]


def matches(terms: Sequence[Term], properties: Mapping[str, Any]) -> bool:
    return all(term.holds(properties) for term in terms)


def overlaps(terms: Sequence[Term], application: Mapping[str, Any]) -> bool:
    """Whether messages of the capability ``application`` (Table 11) could match ``terms``."""
    for term in terms:
        if not term.like and term.name in _IDENTIFYING and application.get(term.name) != term.value:
            return False
        tile = _TILE_PATTERN.fullmatch(term.value) if term.like and term.name == "quadTree" else None
        if tile and not any(t.startswith(tile[1]) or tile[1].startswith(t) for t in application.get("quadTree", [])):
            return False
    return True
