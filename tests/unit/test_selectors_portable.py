"""The selector dialect agrees with Apache Qpid Broker-J, ActiveMQ and Artemis (IP_066).

What was checked in their sources (read only): the JavaCC grammars qpid-broker-j
``broker-core/src/main/grammar/SelectorParser.jj``, activemq
``activemq-client/src/main/grammar/SelectorParser.jj``, activemq-artemis
``artemis-selector/src/main/javacc/StrictParser.jj`` (tokens DECIMAL/HEX/OCTAL/FLOATING_POINT,
ID, LINE_COMMENT, reserved words; ``IN`` takes ``stringLitteral()`` only), and their
``ComparisonExpression`` (``checkLessThanOperand``, ``checkEqualOperand``,
``checkEqualOperandCompatability``, ``createInFilter``, ``createNotBetween``, ``compare``
returning ``Boolean.FALSE`` for unlike types), ``UnaryExpression`` (``InExpression`` unknown for
non-strings, ``BooleanCastExpression`` FALSE for non-booleans) and ``LikeExpression`` (FALSE for
non-strings).
"""
from __future__ import annotations

import pytest

import jms_selectors
from jms_selectors import SelectorError, reference

T, F, U = True, False, None


# ------------------------------------------------------------------- refused at parse time
@pytest.mark.parametrize("text,position,hint", [
    # ordering with string/boolean/NULL literals or conditions (checkLessThanOperand)
    ("causeCode < 'x'", 12, "strings and booleans compare only with = and <>"),
    ("'a' <= b", 0, "orders numbers only, found a string literal"),
    ("a > TRUE", 4, "found a boolean literal"),
    ("a BETWEEN 'a' AND 'z'", 10, "BETWEEN orders numbers only"),
    ("a NOT BETWEEN 1 AND FALSE", 20, "BETWEEN orders numbers only"),
    ("(a = 1) < 2", 0, "found a condition"),
    ("a >= NULL", 5, "test with IS NULL"),
    # = NULL / <> NULL (checkEqualOperand)
    ("causeCode = NULL", 12, "write 'IS NULL'"),
    ("NULL <> causeCode", 0, "write 'IS NOT NULL'"),
    # a boolean literal compared with another type (checkEqualOperandCompatability)
    ("TRUE = 1", 0, "a boolean literal compares only with a boolean"),
    ("'x' <> FALSE", 7, "a boolean literal compares only with a boolean"),
    # IN: string literals only, on a property only (grammar, createInFilter)
    ("causeCode IN (1, 2)", 14, "write (causeCode = 1 OR causeCode = 2"),
    ("causeCode NOT IN ('1', -2)", 23, "write (causeCode <> 1 AND causeCode <> 2"),
    ("a IN (1.5)", 6, "string literals only"),
    ("'x' IN ('x')", 0, "IN applies to a property only"),
    ("(a + 1) IN ('2')", 0, "IN applies to a property only"),
    # reserved words used as identifiers
    ("in = 1", 0, "reserved word 'in'; to name a property so, quote it: \"in\""),
    ("a = 1 OR between > 2", 9, "quote it: \"between\""),
    ("xpath = 'x'", 0, "'xpath' is a reserved word; to name a property so, quote it: \"xpath\""),
    ("a = 1 AND XQuery = 2", 10, "reserved word"),
    # non-ASCII bare identifiers (their ID token is ASCII)
    ("\u00e9t\u00e9 = 1", 0, "not ASCII; quote it: \"\u00e9t\u00e9\""),
    # numeric literal forms their tokens do not have
    ("a = 5f", 4, "no F/D suffixes (portable form: 5.0)"),
    ("a = 1.5D", 4, "no F/D suffixes (portable form: 1.5)"),
    ("a = 1e3d", 4, "portable form: 1e3"),
    ("a = 0x2AL", 4, "no L suffix on hex (portable form: 0x2A)"),
    ("a = 052L", 4, "no L suffix on octal (portable form: 052)"),
    ("a = 0L", 4, "portable form: 0"),
    ("a = 1.5L", 4, "L suffix on an approximate number (portable form: 1.5)"),
])
def test_refused_like_the_apache_brokers(text, position, hint):
    with pytest.raises(SelectorError) as info:
        jms_selectors.compile(text)
    assert info.value.position == position, str(info.value)
    assert hint in info.value.reason, info.value.reason


@pytest.mark.parametrize("text", [
    "a = 42L", "a = 0x2A", "a = 052", "a = 0", "a = 1.5e3", "a = 1.5E-3", "a = .5", "a = 5.", "a = 08.5",
    "a = 1 -- comment\n", '"in" = 1', '"\u00e9t\u00e9" = 1', '"custom-nw-foo" = 1', "a = TRUE", "TRUE = a",
    "(a = 1) = TRUE", "a IN ('x', 'y')", "a BETWEEN -1 AND 0x10", "a IS NULL", "a = b", "a < b + 1",
])
def test_portable_forms_stay_accepted(text):
    jms_selectors.compile(text)


# ------------------------------------------------ '--' without a line break: two minus signs
# The three grammars' LINE_COMMENT is "--" (~["\n","\r"])* ("\n"|"\r"|"\r\n"): it needs a line
# break. JavaCC's token manager takes the longest match that completes, so where no line break
# follows, the one-character "-" token wins and the dashes are minus signs.
@pytest.mark.parametrize("text,props,expected", [
    ("--1.0 = 1.0", {}, T),  # TRUE in ActiveMQ, Artemis and Broker-J
    ("---1 = -1", {}, T),
    ("1 --1 = 2", {}, T),  # 1 - (-1)
    ("a = 1 -- x", {"a": 3, "x": 2}, T),  # a = 1 - (-x): a trailing "comment" is arithmetic
    ("a = 1 -- x", {"a": 1, "x": 2}, F),
    ("a = 1 -- x", {"a": 1}, U),
    ("a = 1 -- x\n", {"a": 1, "x": 2}, T),  # with its line break it is a comment
    ("a = 1 -- x\r", {"a": 1, "x": 2}, T),
    ("-- lead\n--1 = 1", {}, T),  # the first is a comment; no line break follows the second
    ("a = '--' -- c\n", {"a": "--"}, T),  # inside a string '--' is text
    ("a = '--'", {"a": "--"}, T),
    ('"--x" = 1 --1', {"--x": 2}, T),  # likewise in a quoted identifier; then 1 - (-1)
    ("a = 1 /* -- */ --1", {"a": 2}, T),  # inside a block comment too; then 1 - (-1)
])
def test_double_dash_without_line_break_as_the_java_engines_read_it(text, props, expected):
    assert jms_selectors.compile(text).evaluate(props) is expected
    assert reference.evaluate(jms_selectors.parse(text), props) is expected


@pytest.mark.parametrize("text,position,reason", [
    ("a = 1 --", 8, "unexpected end of input"),  # minus, minus, then nothing to negate
    ("--", 2, "unexpected end of input"),
    ("a = 1 -- 'x\n'", 12, "unterminated string"),  # the comment ends at the break inside the quotes
])
def test_double_dash_errors_as_the_java_engines_read_it(text, position, reason):
    with pytest.raises(SelectorError) as info:
        jms_selectors.compile(text)
    assert info.value.position == position, str(info.value)
    assert reason in info.value.reason, info.value.reason


# ------------------------------------------------------------------------- selection
def check(text, props, expected):
    selector = jms_selectors.compile(text)
    assert selector.evaluate(props) is expected, selector.source
    assert reference.evaluate(selector.ast, props) is expected


@pytest.mark.parametrize("text,props,expected", [
    # the example: an integer causeCode compared with a string
    ("causeCode = 'x'", {"causeCode": 3}, F),
    ("NOT (causeCode = 'x')", {"causeCode": 3}, T),
    ("causeCode <> 'x'", {"causeCode": 3}, T),
    ("messageType = 'DENM' AND NOT (causeCode = '3')", {"messageType": "DENM", "causeCode": 3}, T),
    ("causeCode = 'x'", {}, U),  # null stays unknown (SQL-92)
    ("publisherId = 7", {"publisherId": "NO00001"}, F),
    ("a = TRUE", {"a": "TRUE"}, F),
    ("a > 1", {"a": "2"}, F),
    ("a < b", {"a": "x", "b": "y"}, F),  # strings do not order (JMS 2.0 §3.8.1.2)
    # property as a condition: FALSE unless boolean (BooleanCastExpression)
    ("a", {"a": 1}, F),
    ("NOT a", {"a": "yes"}, T),
    # LIKE on a non-string: FALSE; NOT LIKE TRUE
    ("quadTree LIKE '%,12%'", {"quadTree": 12}, F),
    ("quadTree NOT LIKE '%,12%'", {"quadTree": 12}, T),
    # IN on a non-string: unknown, as in all three InExpressions
    ("a IN ('1')", {"a": 1}, U),
    ("a NOT IN ('1')", {"a": 1}, U),
    # NOT BETWEEN is x < a OR x > b (createNotBetween): FALSE for a string; the prefix NOT is TRUE
    ("a BETWEEN 1 AND 3", {"a": "2"}, F),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, F),
    ("NOT (a BETWEEN 1 AND 3)", {"a": "2"}, T),
    ("a NOT BETWEEN 1 AND 3", {"a": 4}, T),
    ("a NOT BETWEEN 1 AND 3", {"a": 2}, F),
    ("a NOT BETWEEN 1 AND 3", {}, U),
])
def test_unlike_types_select_like_the_apache_brokers(text, props, expected):
    check(text, props, expected)
