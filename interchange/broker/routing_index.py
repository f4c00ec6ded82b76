"""Index of sources by what their node selectors require, so routing does not evaluate every
selector for every message (cost per message grows far slower than the number of sources).

A source whose selector requires ``messageType = 'X'`` (a top-level conjunct) is filed under X;
the others are candidates for every message. The router still evaluates each candidate's full
selector: the index only rules sources out, never in.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from interchange.broker.source import Source


class RoutingIndex:
    """Candidate sources for a message's application properties."""

    def __init__(self) -> None:
        self._by_type: dict[str, dict[int, Source]] = {}
        self._always: dict[int, Source] = {}
        self._keys: dict[int, str | None] = {}

    def add(self, source: Source, ast: Any | None) -> None:
        key = required_message_type(ast)
        self._keys[id(source)] = key
        if key is None:
            self._always[id(source)] = source
        else:
            self._by_type.setdefault(key, {})[id(source)] = source

    def remove(self, source: Source) -> None:
        key = self._keys.pop(id(source), None)
        if key is None:
            self._always.pop(id(source), None)
        else:
            bucket = self._by_type.get(key, {})
            bucket.pop(id(source), None)
            if not bucket:
                self._by_type.pop(key, None)

    def candidates(self, properties: dict) -> Iterator[Source]:
        yield from self._always.values()
        message_type = properties.get("messageType")
        if isinstance(message_type, str):
            bucket = self._by_type.get(message_type)
            if bucket:
                yield from bucket.values()

    def __len__(self) -> int:
        return len(self._keys)


def required_message_type(ast: Any | None) -> str | None:
    """The value X when the selector can only be true if ``messageType = 'X'``, else None."""
    if ast is None:
        return None
    from jms_selectors import ast as nodes

    conjuncts: Iterable[Any] = ast.operands if isinstance(ast, nodes.And) else (ast,)
    for node in conjuncts:
        if (
            isinstance(node, nodes.Comparison)
            and node.op == "="
            and isinstance(node.left, nodes.Identifier)
            and node.left.name == "messageType"
            and isinstance(node.right, nodes.Literal)
            and isinstance(node.right.value, str)
        ):
            return node.right.value
    return None
