"""JMS message selectors for AMQP 1.0 source filters (C-Roads IP_066, IP_067, IP_024).

Consumers attach receiver links with an ``apache.org:selector-filter:string`` filter; the broker
evaluates that selector against each message's AMQP application properties::

    import jms_selectors
    selector = jms_selectors.compile("messageType = 'DENM' AND quadTree LIKE '%,1202021%'")
    selector.matches({"messageType": "DENM", "quadTree": ",12020213,"})   # True
    selector.evaluate({"quadTree": ",12020213,"})                         # None (unknown)

API
    ``compile(text) -> Selector``; raises :class:`SelectorError` (a ValueError with
    ``position``, the 0-based character offset, and ``reason``) for any invalid selector.
    ``Selector.text``, ``Selector.ast`` (frozen dataclasses, :mod:`jms_selectors.ast`),
    ``Selector.matches(props) -> bool`` (TRUE only) and ``Selector.evaluate(props) -> bool | None``.
    :func:`jms_selectors.reference.evaluate` is a plain tree walker with identical results.
    Evaluation never raises, whatever the mapping holds.

Grammar (JMS 1.1 §3.8 as implemented by Apache Qpid / ActiveMQ)
    * Identifiers: Java identifier rules (letters, digits, ``_``, ``$``; not starting with a
      digit), case-sensitive; not a keyword. Keywords are case-insensitive: NOT AND OR BETWEEN
      LIKE ESCAPE IN IS TRUE FALSE NULL.
    * **Quoted identifiers (Qpid Broker-J extension)**: ``"custom-nw-foo" = 1``, with ``""``
      for a ``"`` inside. C-Roads custom properties are named ``custom-<ns>-<name>`` (IP_131),
      which a bare identifier cannot express (``custom-nw-foo`` is a subtraction).
    * Literals: strings in single quotes (``''`` for a quote); exact numbers (``42``, hex
      ``0x2A``, octal ``052``, optional ``L``/``l`` suffix); approximate numbers (``1.5``, ``.5``,
      ``1.``, ``1e3``, ``1.5E-3``, optional ``F``/``f``/``D``/``d`` suffix, also on plain
      digits as in Java: ``5f``); ``TRUE``, ``FALSE``, ``NULL``. ``1E999`` is infinity.
    * Operators, loosest first: ``OR``; ``AND``; ``NOT``; the predicates ``= <> < <= > >=``,
      ``[NOT] LIKE 'pattern' [ESCAPE 'c']``, ``[NOT] IN ('a', 'b', ...)``,
      ``[NOT] BETWEEN x AND y``, ``IS [NOT] NULL``; ``+ -``; ``* /``; unary ``+ -``; parentheses.
    * Comments ``-- to end of line`` and ``/* ... */`` are ignored, as in the Apache grammars
      and SQL-92 (so ``a --1`` is just ``a``; write ``a - -1``).
    * An empty (blank) selector means "no selector" (JMS) and matches every message.
    * Limits: 64 KiB of UTF-8 text, nesting depth 100 (parentheses/NOT/signs, and height of the
      syntax tree); numeric literals up to 4000 characters. Beyond them: SelectorError.

Semantics (three-valued logic; where the Apache brokers disagree, SQL-92 / the JMS text, as
Qpid Broker-J now does)
    * ``NOT`` applies to the whole predicate that follows: ``NOT a = 1`` is ``NOT (a = 1)``;
      ``NOT a AND b`` is ``(NOT a) AND b``. NOT unknown is unknown; FALSE AND unknown is FALSE;
      TRUE OR unknown is TRUE. A message is delivered only when the selector is TRUE.
    * Values: numbers are Python ``int`` (exact) and ``float`` (approximate) including
      subclasses such as proton's ``int32``/``ulong``/``float32``, but **not** ``bool``;
      strings are ``str`` and subclasses (proton ``symbol``, ``char``); booleans are ``bool``.
      A missing property or ``None`` is null; other types (bytes, UUID, timestamps that are
      not ints, ...) only ever give unknown (``IS NULL`` is FALSE for them).
    * A property used as a condition is TRUE/FALSE only if it is a boolean.
    * Comparisons with a null operand on either side are unknown. ``=``/``<>`` compare
      strings with strings, booleans with booleans and numbers with numbers (exact and
      approximate numerically); ``< <= > >=`` are numeric only. Any other pairing (e.g. a string
      with a number) is unknown, never an error. NaN follows IEEE 754 (``=`` FALSE, ``<>`` TRUE).
    * Arithmetic on anything but two numbers is unknown. Exact op exact stays exact (unbounded
      Python ints, no overflow); if either operand is approximate both are converted to double
      (an out-of-range int becomes ±infinity). **Division of two exact numbers truncates toward
      zero** (SQL-92; ``-7 / 2`` is ``-3``) and exact division by zero is unknown; division
      involving an approximate number follows IEEE 754 (``1.0 / 0`` is infinity, ``0.0 / 0``
      NaN). Nothing raises.
    * ``x LIKE p``: unknown unless ``x`` is a string; ``%`` any run, ``_`` one character;
      ``ESCAPE 'c'`` makes ``c%``, ``c_``, ``cc`` literal, any other use of ``c`` is an error.
    * ``x IN (v1, v2)`` means ``x = v1 OR x = v2``. **Besides string literals the list may hold
      numeric literals, as ActiveMQ allows** (``causeCode IN (-1, 1, 2)``); a value of another
      type (or a list mixing strings and numbers that cannot all compare) gives unknown rather
      than FALSE. Unknown when ``x`` is null.
    * ``x BETWEEN a AND b`` means ``x >= a AND x <= b`` (numeric).
    * ``x IS NULL`` is TRUE when ``x`` is missing, ``None`` or an unknown value; never unknown.
    * Message header fields (JMSPriority, ...) are not special: identifiers name application
      properties, which is what C-Roads filters use.

Performance: each selector is compiled once to Python functions (see
:mod:`jms_selectors.compiler`); ``benchmarks/bench_selectors.py`` measures them.
"""
from __future__ import annotations

from jms_selectors import ast
from jms_selectors.compiler import Selector
from jms_selectors.errors import SelectorError
from jms_selectors.parser import MAX_DEPTH, MAX_LENGTH, parse

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "Selector", "SelectorError", "ast", "compile", "parse"]


def compile(text: str) -> Selector:  # noqa: A001 - the name external callers use
    """IP_066: compile a selector filter; SelectorError (with position and reason) if invalid."""
    return Selector(text, parse(text))
