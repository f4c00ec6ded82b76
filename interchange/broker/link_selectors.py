"""Selectors consumers give on link attach, bounded and compiled once (IP_066/067).

An ``apache.org:selector-filter:string`` filter is compiled on the node's shared event loop, so it
is bounded first: at most :data:`MAX_LENGTH` characters (4x the II's default
``max_selector_length``) and :data:`MAX_NODES` parsed nodes (``causeCode = 3`` is three); beyond
either the router refuses the attach with ``amqp:invalid-field`` and nothing is compiled. Compiled
selectors are kept in a small bounded LRU cache keyed by text. docs/broker.md ("Routing").
"""
from __future__ import annotations

from collections import OrderedDict

import jms_selectors
from jms_selectors.ast import Expr, children

#: Longest link selector accepted, in characters.
MAX_LENGTH = 8192
#: Largest parsed link selector accepted, in expression nodes.
MAX_NODES = 1024
#: Compiled selectors kept for re-use.
CACHE_SIZE = 64


class SelectorTooLarge(ValueError):
    """A link selector beyond :data:`MAX_LENGTH` or :data:`MAX_NODES` (refused, not compiled)."""


def expression_size(tree: Expr, limit: int) -> int:
    """Nodes in ``tree``, counting stops just above ``limit`` (iterative; any depth)."""
    count, stack = 0, [tree]
    while stack and count <= limit:
        node = stack.pop()
        count += 1
        stack.extend(children(node))
    return count


class LinkSelectors:
    """Bounded, cached compilation of link selectors for one broker process."""

    def __init__(self, max_length: int = MAX_LENGTH, max_nodes: int = MAX_NODES, cache_size: int = CACHE_SIZE) -> None:
        self.max_length = max_length
        self.max_nodes = max_nodes
        self.cache_size = cache_size
        self._cache: OrderedDict[str, jms_selectors.Selector] = OrderedDict()

    def compile(self, text: str) -> jms_selectors.Selector:
        """The compiled selector; SelectorError if invalid, SelectorTooLarge beyond the bounds."""
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        if len(text) > self.max_length:
            raise SelectorTooLarge(f"selector of {len(text)} characters; this broker accepts at most "
                                   f"{self.max_length} on a link")
        tree = jms_selectors.parse(text)
        if expression_size(tree, self.max_nodes) > self.max_nodes:
            raise SelectorTooLarge(f"selector with more than {self.max_nodes} expression nodes; "
                                   "subscribe through the Improved Interface or split it over several links")
        selector = jms_selectors.Selector(text, tree)
        self._cache[text] = selector
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return selector
