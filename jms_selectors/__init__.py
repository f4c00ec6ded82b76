"""JMS message selectors for AMQP 1.0 source filters (C-Roads IP_066, IP_067, IP_024).

Consumers attach receiver links with an ``apache.org:selector-filter:string`` filter; the broker
evaluates that selector against each message's AMQP application properties::

    import jms_selectors
    selector = jms_selectors.compile("messageType = 'DENM' AND quadTree LIKE '%,1202021%'")
    selector.matches({"messageType": "DENM", "quadTree": ",12020213,"})   # True
    selector.evaluate({"quadTree": ",12020213,"})                         # None (unknown)
    selector.evaluate({"messageType": 5, "quadTree": ",12020213,"})       # False (unlike types)

API
    ``compile(text) -> Selector``; raises :class:`SelectorError` (a ValueError with
    ``position``, the 0-based character offset, and ``reason``) for any invalid selector.
    ``Selector.text``, ``Selector.ast`` (frozen dataclasses, :mod:`jms_selectors.ast`),
    ``Selector.matches(props) -> bool`` (TRUE only) and ``Selector.evaluate(props) -> bool | None``.
    :func:`jms_selectors.reference.evaluate` is a plain tree walker with identical results.
    Evaluation never raises, whatever the mapping holds.

Dialect: what the Apache brokers accept and select (JMS 2.0 §3.8.1)
    Federation partners run Apache Qpid Broker-J, ActiveMQ and Artemis; a selector accepted
    here but refused there would fail only later, at a neighbour. Checked against their
    sources (read, not copied): the JavaCC grammars qpid-broker-j
    ``broker-core/src/main/grammar/SelectorParser.jj``, activemq
    ``activemq-client/src/main/grammar/SelectorParser.jj`` and activemq-artemis
    ``artemis-selector/src/main/javacc/StrictParser.jj``, and their ``filter`` packages
    (``ComparisonExpression``, ``UnaryExpression``, ``LogicExpression``). Tests:
    ``tests/unit/test_selectors_portable.py``.

Grammar
    * Identifiers: ASCII ``[A-Za-z_$][A-Za-z0-9_$]*``, case-sensitive, not a reserved word.
      Reserved (case-insensitive): NOT AND OR BETWEEN LIKE ESCAPE IN IS TRUE FALSE NULL, and
      XPATH XQUERY (ActiveMQ, Artemis). Anything else is refused with a hint to quote it.
    * **Quoted identifiers** (Broker-J and Artemis ``QUOTED_ID``): ``"custom-nw-foo" = 1``, with
      ``""`` for a ``"`` inside. C-Roads custom properties are named ``custom-<ns>-<name>``
      (IP_131), which a bare identifier cannot express (``custom-nw-foo`` is a subtraction).
    * Literals: strings in single quotes (``''`` for a quote); exact numbers (``42``, ``42L``,
      hex ``0x2A``, octal ``052``); approximate numbers (``1.5``, ``.5``, ``1.``, ``1e3``,
      ``1.5E-3``); ``TRUE``, ``FALSE``, ``NULL``. ``1E999`` is infinity. Refused as the Apache
      grammars refuse them: ``F``/``D`` suffixes (``5f``), ``L`` on hex, octal or approximate
      numbers (``0x2AL``, ``0L``), ``8``/``9`` in octal.
    * Operators, loosest first: ``OR``; ``AND``; ``NOT``; the predicates ``= <> < <= > >=``,
      ``[NOT] LIKE 'pattern' [ESCAPE 'c']``, ``property [NOT] IN ('a', 'b', ...)``,
      ``[NOT] BETWEEN x AND y``, ``IS [NOT] NULL``; ``+ -``; ``* /``; unary ``+ -``; parentheses.
    * Comments ``-- to end of line`` (up to the next line break) and ``/* ... */`` are ignored,
      as in the Apache grammars and SQL-92. Their LINE_COMMENT needs the line break: a ``--``
      with no CR or LF after it is two minus signs, as the Java engines read it (``--1.0 = 1.0``
      is TRUE; ``a = 1 -- x`` at the end is ``a = 1 - -x``). :func:`embeddable` makes such a text
      safe to put before a line break when selectors are combined.
    * Refused at parse time with position and the portable form, as the Apache brokers refuse
      them (``checkLessThanOperand``, ``checkEqualOperand``, ``checkEqualOperandCompatability``,
      ``createInFilter``): ``< <= > >=``/``BETWEEN`` with a string, boolean or NULL literal or a
      condition; ``= NULL``/``<> NULL`` (use ``IS [NOT] NULL``); a boolean literal compared with
      a string or numeric literal; ``IN`` on anything but a property and any non-string literal
      in an ``IN`` list (``causeCode IN (1, 2)``: write ``causeCode = 1 OR causeCode = 2``).
    * An empty (blank) selector means "no selector" (JMS) and matches every message.
    * Limits: 64 KiB of UTF-8 text, nesting depth 100 (parentheses/NOT/signs, and height of the
      syntax tree); numeric literals up to 4000 characters. Beyond them: SelectorError.

Semantics (three-valued logic)
    * Values: numbers are Python ``int`` (exact) and ``float`` (approximate) including
      subclasses such as proton's ``int32``/``ulong``/``float32``, but **not** ``bool``;
      strings are ``str`` and subclasses (proton ``symbol``, ``char``); booleans are ``bool``.
      A missing property or ``None`` is null. Any other value (bytes, UUID, ...) is a value of
      its own type, unlike every literal.
    * **Values of unlike types compare FALSE, not unknown** (JMS 2.0 §3.8.1.2; the
      ``return Boolean.FALSE`` branches of the brokers' ``ComparisonExpression.compare``):
      ``causeCode = 'x'`` is FALSE for an integer ``causeCode`` and ``NOT (causeCode = 'x')``
      TRUE; ``<>`` is ``NOT =``. ``< <= > >=`` order numbers only: on two strings or booleans
      (possible only between two properties) they are FALSE (JMS restricts strings and booleans
      to ``=``/``<>``; the Java brokers would order them with ``compareTo``). Exact and
      approximate numbers compare numerically; NaN follows IEEE 754 (``=`` FALSE, ``<>`` TRUE).
    * A property used as a condition is its value if boolean, FALSE for any other value
      (their ``BooleanCastExpression``), unknown if null.
    * ``x LIKE p``: unknown if ``x`` is null, FALSE if it is not a string (``NOT LIKE`` TRUE);
      ``%`` any run, ``_`` one character; ``ESCAPE 'c'`` makes ``c%``, ``c_``, ``cc`` literal.
    * ``x IN ('a', 'b')``: TRUE/FALSE for a string ``x``, **unknown for anything else** (null or
      not a string), as all three brokers' ``InExpression`` do; ``NOT IN`` likewise.
    * ``x BETWEEN a AND b`` is ``x >= a AND x <= b``; **``x NOT BETWEEN a AND b`` is
      ``x < a OR x > b``** (``createNotBetween`` in all three), so it is FALSE for a string ``x``,
      while the prefix form ``NOT (x BETWEEN a AND b)`` is TRUE.
    * ``x IS NULL`` is TRUE when ``x`` is missing or ``None``; never unknown.
    * Arithmetic on anything but two numbers is unknown (null). Exact op exact stays exact
      (unbounded Python ints, no overflow); if either operand is approximate both are converted
      to double. **Division of two exact numbers truncates toward zero** (SQL-92); exact division
      by zero is unknown; approximate division follows IEEE 754. Nothing raises.
    * Where the Java brokers disagree with each other, the SQL-92 choice is kept: ``NOT``
      applies to the whole predicate that follows (``NOT a = 1`` is ``NOT (a = 1)``, as in
      Broker-J's grammar; ActiveMQ's and Artemis' ``<NOT> unaryExpr()`` read ``(NOT a) = 1``); a comparison
      with a null operand is unknown (Broker-J's ``=``
      gives FALSE when one side is null, ActiveMQ/Artemis FALSE when only the right side is).
      NOT unknown is unknown; FALSE AND unknown is FALSE; TRUE OR unknown is TRUE. A message
      is delivered only when the selector is TRUE.
    * Message header fields (JMSPriority, ...) are not special: identifiers name application
      properties, which is what C-Roads filters use.

Performance: each selector is compiled once to Python functions (see
:mod:`jms_selectors.compiler`); ``benchmarks/bench_selectors.py`` measures them.
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
