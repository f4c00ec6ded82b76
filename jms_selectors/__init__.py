"""JMS message selectors for AMQP 1.0 source filters (C-Roads IP_066, IP_067, IP_024).

``compile(text) -> Selector`` or :class:`SelectorError` (``position``, ``reason``);
``Selector.matches(props) -> bool`` (TRUE only), ``Selector.evaluate(props) -> bool | None``
(three-valued); evaluation never raises. The dialect is what Qpid Broker-J, ActiveMQ and
Artemis all accept, with their results: values of unlike types compare FALSE, ``IN`` on a
non-string is unknown, ``NOT BETWEEN`` is ``x < a OR x > b``; where they disagree, SQL-92.
Limits: 64 KiB of text, depth 100. Grammar, semantics and the sources checked: docs/selectors.md.
"""
from __future__ import annotations

from jms_selectors import ast
from jms_selectors.compiler import Selector
from jms_selectors.errors import SelectorError
from jms_selectors.lexer import embeddable
from jms_selectors.parser import MAX_DEPTH, MAX_LENGTH, parse

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "Selector", "SelectorError", "ast", "compile", "embeddable", "parse"]


def compile(text: str) -> Selector:  # noqa: A001 - the name external callers use
    """IP_066: compile a selector filter; SelectorError (with position and reason) if invalid."""
    return Selector(text, parse(text))
