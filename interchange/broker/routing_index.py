"""Index of sources by what their node selectors require, so routing does not evaluate every
selector for every message: cost per message grows with the sources a message can reach, not
with the number of sources.

One key per selector from its top-level conjuncts: a quadTree area (IP_066's ``LIKE`` form), else
a ``messageType = 'X'``, else every message. :meth:`RoutingIndex.add` compiles the *residual*
selector (the other conjuncts); candidates + residual == the full selector. Details: docs/broker.md
("Routing").
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jms_selectors import Selector
from jms_selectors import ast as nodes

from interchange.broker.source import Source


class RoutingIndex:
    """Candidate sources for a message's application properties."""

    def __init__(self) -> None:
        self._always: dict[int, Source] = {}
        self._by_type: dict[str, dict[int, Source]] = {}
        self._by_tile: dict[str, dict[int, Source]] = {}
        self._tile_lengths: list[int] = []
        self._keys: dict[int, tuple[str, tuple[str, ...]]] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, source: Source, ast: Any | None) -> None:
        """File ``source`` under its key and set ``source.residual`` (None: nothing left to check)."""
        key, rest = split_key(ast)
        source.residual = _compile_residual(rest, source.node_selector)
        self._keys[id(source)] = key
        kind, values = key
        if kind == "tile":
            for tile in values:
                self._by_tile.setdefault(tile, {})[id(source)] = source
            self._tile_lengths = sorted({len(t) for t in self._by_tile})
        elif kind == "type":
            self._by_type.setdefault(values[0], {})[id(source)] = source
        else:
            self._always[id(source)] = source

    def remove(self, source: Source) -> None:
        key = self._keys.pop(id(source), None)
        if key is None:
            return
        kind, values = key
        if kind == "tile":
            for tile in values:
                bucket = self._by_tile.get(tile)
                if bucket is not None:
                    bucket.pop(id(source), None)
                    if not bucket:
                        del self._by_tile[tile]
            self._tile_lengths = sorted({len(t) for t in self._by_tile})
        elif kind == "type":
            bucket = self._by_type.get(values[0], {})
            bucket.pop(id(source), None)
            if not bucket:
                self._by_type.pop(values[0], None)
        else:
            self._always.pop(id(source), None)

    def candidates(self, properties: dict) -> Iterator[Source]:
        """Sources whose selector may be TRUE for these properties (each at most once)."""
        yield from self._always.values()
        if self._by_type:
            message_type = properties.get("messageType")
            if isinstance(message_type, str):
                bucket = self._by_type.get(message_type)
                if bucket:
                    yield from bucket.values()
        if self._by_tile:
            quad_tree = properties.get("quadTree")
            if isinstance(quad_tree, str):
                yield from self._tile_candidates(quad_tree)

    def _tile_candidates(self, quad_tree: str) -> Iterator[Source]:
        by_tile, lengths = self._by_tile, self._tile_lengths
        seen_prefixes: set[str] = set()
        found: dict[int, Source] = {}
        for tile in quad_tree.split(","):
            for length in lengths:
                if length > len(tile):
                    break
                prefix = tile[:length]
                if prefix in seen_prefixes:
                    continue
                seen_prefixes.add(prefix)
                bucket = by_tile.get(prefix)
                if bucket:
                    found.update(bucket)
        return iter(found.values())


def index_key(ast: Any | None) -> tuple[str, tuple[str, ...]]:
    """("tile", tiles) | ("type", (messageType,)) | ("always", ()) for a selector's AST."""
    return split_key(ast)[0]


_ALL = object()  #: residual marker: the whole selector is left to evaluate


def split_key(ast: Any | None) -> tuple[tuple[str, tuple[str, ...]], Any]:
    """The index key and the conjuncts it does not cover (a tuple; or _ALL for "always")."""
    if ast is None:
        return ("always", ()), ()
    conjuncts = ast.operands if isinstance(ast, nodes.And) else (ast,)
    for i, node in enumerate(conjuncts):
        tiles = _quadtree_tiles(node)
        if tiles is not None:
            return ("tile", tiles), conjuncts[:i] + conjuncts[i + 1:]
    for i, node in enumerate(conjuncts):
        message_type = _required_message_type(node)
        if message_type is not None:
            return ("type", (message_type,)), conjuncts[:i] + conjuncts[i + 1:]
    return ("always", ()), _ALL


def _compile_residual(rest: Any, full: Any) -> Any:
    if rest is _ALL:
        return full
    if not rest:
        return None
    tree = rest[0] if len(rest) == 1 else nodes.And(tuple(rest))
    return Selector(nodes.unparse(tree), tree).matches


def _quadtree_tiles(node: Any) -> tuple[str, ...] | None:
    """Tiles t of ``quadTree LIKE '%,t%'`` (one, or an OR of several), else None."""
    terms = node.operands if isinstance(node, nodes.Or) else (node,)
    tiles = []
    for term in terms:
        if not (isinstance(term, nodes.Like) and not term.negated and term.escape is None
                and isinstance(term.subject, nodes.Identifier) and term.subject.name == "quadTree"):
            return None
        pattern = term.pattern
        if not (pattern.startswith("%,") and pattern.endswith("%")):
            return None
        tile = pattern[2:-1]
        if not tile or any(c not in "0123" for c in tile):
            return None
        tiles.append(tile)
    return tuple(sorted(set(tiles)))


def _required_message_type(node: Any) -> str | None:
    if isinstance(node, nodes.Comparison) and node.op == "=":
        for ident, lit in ((node.left, node.right), (node.right, node.left)):
            if (isinstance(ident, nodes.Identifier) and ident.name == "messageType"
                    and isinstance(lit, nodes.Literal) and isinstance(lit.value, str)
                    and not isinstance(lit.value, bool)):
                return lit.value
    if isinstance(node, nodes.In) and not node.negated and isinstance(node.subject, nodes.Identifier) \
            and node.subject.name == "messageType" and len(node.values) == 1 and isinstance(node.values[0], str):
        return node.values[0]
    return None
