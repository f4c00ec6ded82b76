"""IP_066/067: evaluation semantics of JMS selectors, compiled and reference evaluator alike."""
from __future__ import annotations

import math
import uuid
from collections.abc import Mapping

import pytest

import jms_selectors
from jms_selectors import reference

T, F, U = True, False, None
NAN, INF = math.nan, math.inf


def check(text: str, props: Mapping[str, object], expected: bool | None) -> None:
    selector = jms_selectors.compile(text)
    assert selector.evaluate(props) is expected, selector.source
    assert reference.evaluate(selector.ast, props) is expected
    result = selector.matches(props)
    assert type(result) is bool
    assert result is (expected is True)


def table(*rows: tuple) -> list:
    return [pytest.param(text, props, expected, id=f"{text} | {props!r}") for text, props, expected in rows]


# ----------------------------------------------------------------------------- comparisons
@pytest.mark.parametrize("text,props,expected", table(
    ("a = 1", {"a": 1}, T),
    ("a = 1", {"a": 2}, F),
    ("a = 1", {"a": 1.0}, T),
    ("a = 1", {}, U),
    ("a = 1", {"a": None}, U),
    ("a = 1", {"a": "1"}, F),  # unlike types compare FALSE
    ("a = 1", {"a": True}, F),  # unlike types compare FALSE
    ("a = 1", {"a": b"1"}, F),  # unlike types compare FALSE
    ("a = 1", {"a": NAN}, F),
    ("a <> 1", {"a": 1}, F),
    ("a <> 1", {"a": 2}, T),
    ("a <> 1", {"a": NAN}, T),
    ("a <> 1", {}, U),
    ("a <> 1", {"a": "x"}, T),  # unlike types compare FALSE
    ("a <> 1", {"a": False}, T),  # unlike types compare FALSE
    ("a = 1.5", {"a": 1.5}, T),
    ("a = 2.0", {"a": 2}, T),
    ("a = 9007199254740993", {"a": 9007199254740993}, T),
    ("a = 9007199254740993", {"a": 9007199254740992.0}, F),
    ("a = 'x'", {"a": "x"}, T),
    ("a = 'x'", {"a": "y"}, F),
    ("a = 'x'", {"a": "X"}, F),
    ("a = 'x'", {"a": 1}, F),  # unlike types compare FALSE
    ("a = 'x'", {"a": True}, F),  # unlike types compare FALSE
    ("a = 'x'", {"a": b"x"}, F),  # unlike types compare FALSE
    ("a = 'x'", {}, U),
    ("a <> 'x'", {"a": "x"}, F),
    ("a <> 'x'", {"a": "y"}, T),
    ("a <> 'x'", {"a": 1}, T),  # unlike types compare FALSE
    ("a <> 'x'", {}, U),
    ("a = ''", {"a": ""}, T),
    ("a = TRUE", {"a": True}, T),
    ("a = TRUE", {"a": False}, F),
    ("a = TRUE", {"a": 1}, F),  # unlike types compare FALSE
    ("a = TRUE", {"a": "TRUE"}, F),  # unlike types compare FALSE
    ("a = FALSE", {"a": False}, T),
    ("a <> FALSE", {"a": True}, T),
    ("a <> FALSE", {"a": False}, F),
    ("a <> TRUE", {"a": 0}, T),  # unlike types compare FALSE
    ("a < 5", {"a": 4}, T),
    ("a < 5", {"a": 5}, F),
    ("a < 5", {"a": 4.99}, T),
    ("a < 5", {"a": "4"}, F),  # unlike types compare FALSE
    ("a < 5", {"a": True}, F),  # unlike types compare FALSE
    ("a < 5", {}, U),
    ("a < 5", {"a": NAN}, F),
    ("a <= 5", {"a": 5}, T),
    ("a <= 5", {"a": 5.5}, F),
    ("a > 5", {"a": 6}, T),
    ("a > 5", {"a": 5}, F),
    ("a >= 5", {"a": 5.0}, T),
    ("a >= 5", {"a": 4}, F),
    ("a >= 5", {"a": NAN}, F),
    ("a > 1E308", {"a": INF}, T),
    ("a = 1E999", {"a": INF}, T),
    ("a < -1E999", {"a": -INF}, F),
    ("5 > a", {"a": 4}, T),
    ("5 > a", {"a": 6}, F),
    ("'x' = a", {"a": "x"}, T),
    ("'x' <> a", {"a": "x"}, F),
    ("TRUE = a", {"a": True}, T),
    ("a = b", {"a": 1, "b": 1.0}, T),
    ("a = b", {"a": 1, "b": 2}, F),
    ("a = b", {"a": "x", "b": "x"}, T),
    ("a = b", {"a": "x", "b": "y"}, F),
    ("a = b", {"a": True, "b": True}, T),
    ("a = b", {"a": True, "b": False}, F),
    ("a = b", {"a": "x", "b": 1}, F),  # unlike types compare FALSE
    ("a = b", {"a": True, "b": 1}, F),  # unlike types compare FALSE
    ("a = b", {"a": 1}, U),
    ("a = b", {"b": 1}, U),
    ("a = b", {}, U),
    ("a <> b", {"a": 1, "b": 2}, T),
    ("a <> b", {"a": "x", "b": "x"}, F),
    ("a <> b", {"a": "x", "b": 2}, T),  # unlike types compare FALSE
    ("a < b", {"a": 1, "b": 2}, T),
    ("a < b", {"a": 2, "b": 1.5}, F),
    ("a < b", {"a": "a", "b": "b"}, F),  # strings compare only with = and <> (JMS 2.0 §3.8.1.2): FALSE (was U)
    ("a >= b", {"a": 2, "b": 2}, T),
    ("a > b", {"a": NAN, "b": 1}, F),
    ("a = a", {"a": 1}, T),
    ("a = a", {"a": NAN}, F),
    ("a = a", {}, U),
    ("1 = 1", {}, T),
    ("1 = 2", {}, F),
    ("1 = 1.0", {}, T),
    ("'a' = 'a'", {}, T),
    ("'a' <> 'b'", {}, T),
    ("'a' = 1", {}, F),  # unlike types compare FALSE
    ("TRUE = TRUE", {}, T),
    ("TRUE <> FALSE", {}, T),
    ("(a = 1) = TRUE", {"a": 1}, T),
    ("(a = 1) = TRUE", {"a": 2}, F),
    ("(a = 1) = TRUE", {}, U),
    ("(a = 1) <> (b = 1)", {"a": 1, "b": 2}, T),
    ("(a = 1) = (b = 1)", {"a": 1, "b": 2}, F),
    ("(a = 1) = (b = 1)", {"a": 1}, U),
    ("(a = 1) = 1", {"a": 1}, F),  # unlike types compare FALSE
))
def test_comparison(text, props, expected):
    check(text, props, expected)


# ----------------------------------------------------------------------------- arithmetic
@pytest.mark.parametrize("text,props,expected", table(
    ("a + 1 = 3", {"a": 2}, T),
    ("a + 1 = 3", {"a": 2.0}, T),
    ("a + 1 = 3", {"a": 3}, F),
    ("a + 1 = 3", {"a": "2"}, U),
    ("a + 1 = 3", {"a": True}, U),
    ("a + 1 = 3", {}, U),
    ("a + NULL = 3", {"a": 2}, U),
    ("a - 1 = 1", {"a": 2}, T),
    ("a * 2 = 4", {"a": 2}, T),
    ("a * 2.5 = 5", {"a": 2}, T),
    ("a / 2 = 2", {"a": 5}, T),
    ("a / 2 = -2", {"a": -5}, T),
    ("a / 2 = -3", {"a": -5}, F),
    ("a / -2 = -2", {"a": 5}, T),
    ("a / -2 = 2", {"a": -5}, T),
    ("a / 2 = 2.5", {"a": 5.0}, T),
    ("a / 2.0 = 2.5", {"a": 5}, T),
    ("-7 / 2 = -3", {}, T),
    ("7 / -2 = -3", {}, T),
    ("-7 / -2 = 3", {}, T),
    ("7 / 2 = 3", {}, T),
    ("7.0 / 2 = 3.5", {}, T),
    ("a / 0 = 1", {"a": 5}, U),
    ("a / 0 IS NULL", {"a": 5}, T),
    ("a / 0 IS NULL", {"a": 0}, T),
    ("1 / 0 IS NULL", {}, T),
    ("a / 0.0 = 1E999", {"a": 5}, T),
    ("a / 0 = 1E999", {"a": 5.0}, T),
    ("a / 0.0 < 0", {"a": -5}, T),
    ("a / -0.0 < 0", {"a": 5}, T),
    ("a / 0.0 IS NULL", {"a": 0}, F),
    ("a / 0.0 = a / 0.0", {"a": 0}, F),
    ("a / 0.0 <> a / 0.0", {"a": 0.0}, T),
    ("a / b = 2", {"a": 4, "b": 2}, T),
    ("a / b IS NULL", {"a": 4, "b": 0}, T),
    ("-a = -3", {"a": 3}, T),
    ("-a = 3", {"a": "x"}, U),
    ("-a = 3", {"a": True}, U),
    ("+a = 3", {"a": 3}, T),
    ("+a = 3", {"a": "3"}, U),
    ("- -a = 3", {"a": 3}, T),
    ("a + b = 3", {"a": 1, "b": 2}, T),
    ("a + b = 3", {"a": 1}, U),
    ("a + b = 3", {"a": 1, "b": "2"}, U),
    ("a + 2 * 3 = 7", {"a": 1}, T),
    ("(a + 2) * 3 = 9", {"a": 1}, T),
    ("a - 2 - 3 = -4", {"a": 1}, T),
    ("a / 2 / 2 = 2", {"a": 8}, T),
    ("a / (2 / 2) = 8", {"a": 8}, T),
    ("2 * -a = -6", {"a": 3}, T),
    ("a - -1 = 2", {"a": 1}, T),
    ("-(1) = -1", {}, T),
    ("a + 1 > 0", {"a": 10**400}, T),
    ("a * 1.0 > 1E308", {"a": 10**400}, T),
    ("a * 1.0 < -1E308", {"a": -(10**400)}, T),
    ("a + 1.5 = 1E999", {"a": 10**400}, T),
    ("a * a = 10000000000000000000000000000000000000000", {"a": 10**20}, T),
    ("a * 0.0 = 0", {"a": INF}, F),
    ("a + 1 > 3", {"a": NAN}, F),
    ("a - 1 = 0", {"a": 1.0}, T),
))
def test_arithmetic(text, props, expected):
    check(text, props, expected)


# ----------------------------------------------------------------------------- LIKE
@pytest.mark.parametrize("text,props,expected", table(
    ("a LIKE 'abc'", {"a": "abc"}, T),
    ("a LIKE 'abc'", {"a": "abcd"}, F),
    ("a LIKE 'abc'", {"a": "ABC"}, F),
    ("a LIKE 'ab%'", {"a": "abc"}, T),
    ("a LIKE 'ab%'", {"a": "ab"}, T),
    ("a LIKE 'ab%'", {"a": "xab"}, F),
    ("a LIKE '%bc'", {"a": "abc"}, T),
    ("a LIKE '%bc'", {"a": "bcd"}, F),
    ("a LIKE '%b%'", {"a": "abc"}, T),
    ("a LIKE '%b%'", {"a": "b"}, T),
    ("a LIKE '%b%'", {"a": "ac"}, F),
    ("a LIKE '_b_'", {"a": "abc"}, T),
    ("a LIKE '_b_'", {"a": "abcd"}, F),
    ("a LIKE '_b_'", {"a": "bc"}, F),
    ("a LIKE '%'", {"a": ""}, T),
    ("a LIKE '%%'", {"a": "xyz"}, T),
    ("a LIKE '%'", {"a": 1}, F),  # unlike types compare FALSE
    ("a LIKE '%'", {}, U),
    ("a LIKE ''", {"a": ""}, T),
    ("a LIKE ''", {"a": "x"}, F),
    ("a LIKE 'a%c%e'", {"a": "abcde"}, T),
    ("a LIKE 'a%c%e'", {"a": "ace"}, T),
    ("a LIKE 'a%c%e'", {"a": "aec"}, F),
    ("a LIKE 'a%c%e'", {"a": "ac"}, F),
    ("a LIKE 'ab%bc'", {"a": "abc"}, F),
    ("a LIKE 'ab%bc'", {"a": "abbc"}, T),
    ("a LIKE 'a_c%'", {"a": "abcdef"}, T),
    ("a LIKE '%a_c'", {"a": "xxabc"}, T),
    ("a LIKE '%a_c%'", {"a": "xxabcxx"}, T),
    ("a LIKE '%a_c%'", {"a": "xxacxx"}, F),
    ("a LIKE '%_%_%'", {"a": "ab"}, T),
    ("a LIKE '%_%_%'", {"a": "a"}, F),
    ("a LIKE '___'", {"a": "abc"}, T),
    ("a LIKE '___'", {"a": "ab"}, F),
    ("a LIKE 'a%b'", {"a": "a\nb"}, T),
    ("a LIKE 'a_b'", {"a": "a\nb"}, T),
    ("a LIKE 'a.c'", {"a": "abc"}, F),
    ("a LIKE 'a.c'", {"a": "a.c"}, T),
    ("a LIKE '(x)*+?[]^$\\'", {"a": "(x)*+?[]^$\\"}, T),
    ("a LIKE '_'", {"a": "\u00e9"}, T),
    ("a LIKE '_'", {"a": "\U0001F600"}, T),
    ("a LIKE 'it''s%'", {"a": "it's here"}, T),
    ("a LIKE 'a!%%' ESCAPE '!'", {"a": "a%bc"}, T),
    ("a LIKE 'a!%%' ESCAPE '!'", {"a": "abc"}, F),
    ("a LIKE '!_' ESCAPE '!'", {"a": "_"}, T),
    ("a LIKE '!_' ESCAPE '!'", {"a": "x"}, F),
    ("a LIKE 'a!!b' ESCAPE '!'", {"a": "a!b"}, T),
    ("a LIKE '%\\%%' ESCAPE '\\'", {"a": "100% sure"}, T),
    ("a LIKE '%\\%%' ESCAPE '\\'", {"a": "100 sure"}, F),
    ("a LIKE 'x%%' ESCAPE '%'", {"a": "x%"}, T),
    ("a LIKE 'x%%' ESCAPE '%'", {"a": "xy"}, F),
    ("a LIKE '\\_%' escape '\\'", {"a": "_x"}, T),
    ("a LIKE '\\_%' ESCAPE '\\'", {"a": "ax"}, F),
    ("a LIKE 'x__' ESCAPE '_'", {"a": "x_"}, T),
    ("a NOT LIKE 'ab%'", {"a": "abc"}, F),
    ("a NOT LIKE 'ab%'", {"a": "x"}, T),
    ("a NOT LIKE 'ab%'", {"a": 1}, T),  # unlike types compare FALSE
    ("a NOT LIKE 'ab%'", {}, U),
    ("NOT a LIKE 'ab%'", {"a": "x"}, T),
    ("NOT a LIKE 'ab%'", {}, U),
    ("a NOT LIKE '%a_c%'", {"a": "abc"}, F),
    ("a NOT LIKE '%a_c%'", {"a": "ac"}, T),
    ("(a + 1) LIKE '1'", {"a": 0}, F),  # unlike types compare FALSE
    ("(a = 1) LIKE 'TRUE'", {"a": 1}, F),  # unlike types compare FALSE
    ("'abc' LIKE 'a%'", {}, T),
    ("'abc' NOT LIKE 'a%'", {}, F),
    ("NULL LIKE 'a%'", {}, U),
))
def test_like(text, props, expected):
    check(text, props, expected)


MANY = "q LIKE '%a%' OR q LIKE '%b%' OR q LIKE '%c%'"


@pytest.mark.parametrize("text,props,expected", table(
    (MANY, {"q": "xbx"}, T),
    (MANY, {"q": "xyz"}, F),
    (MANY, {"q": 5}, F),  # LIKE on a number is FALSE (was U)
    (MANY, {}, U),
    ("NOT (" + MANY + ")", {"q": "xbx"}, F),
    ("NOT (" + MANY + ")", {"q": "xyz"}, T),
    ("NOT (" + MANY + ")", {}, U),
    ("q NOT LIKE '%a%' AND q NOT LIKE '%b%' AND q NOT LIKE '%c%'", {"q": "xyz"}, T),
    ("q NOT LIKE '%a%' AND q NOT LIKE '%b%' AND q NOT LIKE '%c%'", {"q": "xcz"}, F),
    ("q NOT LIKE '%a%' AND q NOT LIKE '%b%' AND q NOT LIKE '%c%'", {"q": None}, U),
    ("NOT (q NOT LIKE '%a%' AND q NOT LIKE '%b%' AND q NOT LIKE '%c%')", {"q": "a"}, T),
    ("q LIKE '%a%' OR r = 1 OR q LIKE '%b%' OR q LIKE 'c%' OR q LIKE '%c%' OR r LIKE '%a%'", {"q": "xcx"}, T),
    ("q LIKE '%a%' OR r = 1 OR q LIKE '%b%' OR q LIKE 'c%' OR q LIKE '%c%' OR r LIKE '%a%'", {"q": "cx"}, T),
    # unlike types compare FALSE
    ("q LIKE '%a%' OR r = 1 OR q LIKE '%b%' OR q LIKE 'c%' OR q LIKE '%c%' OR r LIKE '%a%'", {"q": "x", "r": 2}, F),
    # unlike types compare FALSE
    ("q LIKE '%a%' OR r = 1 OR q LIKE '%b%' OR q LIKE 'c%' OR q LIKE '%c%' OR r LIKE '%a%'", {"q": "x", "r": "x"}, F),
    ("q LIKE '%a%' OR q LIKE '%b%' OR q LIKE '%c%' OR q NOT LIKE '%d%'", {"q": "d"}, F),
    ("q LIKE '%a%' OR q LIKE '%b%' OR q LIKE '%c%' OR q NOT LIKE '%d%'", {"q": "e"}, T),
    ("q LIKE '%.%' OR q LIKE '%*%' OR q LIKE '%(%' OR q LIKE '%|%'", {"q": "a(b"}, T),
    ("q LIKE '%.%' OR q LIKE '%*%' OR q LIKE '%(%' OR q LIKE '%|%'", {"q": "ab"}, F),
    ("q LIKE '%ab%' OR q LIKE '%abc%' OR q LIKE '%a%'", {"q": "xa"}, T),
    ("q LIKE '%!%%' ESCAPE '!' OR q LIKE '%!_%' ESCAPE '!' OR q LIKE '%\n%'", {"q": "a_b"}, T),
    ("q LIKE '%!%%' ESCAPE '!' OR q LIKE '%!_%' ESCAPE '!' OR q LIKE '%\n%'", {"q": "ab"}, F),
    ("q LIKE '%a%' AND q LIKE '%b%' AND q LIKE '%c%'", {"q": "cab"}, T),
    ("q LIKE '%a%' AND q LIKE '%b%' AND q LIKE '%c%'", {"q": "ca"}, F),
))
def test_like_chains_on_one_property(text, props, expected):
    check(text, props, expected)


# ----------------------------------------------------------------------------- IN
@pytest.mark.parametrize("text,props,expected", table(
    ("a IN ('x', 'y')", {"a": "x"}, T),
    ("a IN ('x', 'y')", {"a": "z"}, F),
    ("a IN ('x', 'y')", {"a": 1}, U),
    ("a IN ('x', 'y')", {"a": True}, U),
    ("a IN ('x', 'y')", {}, U),
    ("a IN ('x', 'y')", {"a": None}, U),
    ("a IN ('x', 'y')", {"a": ["x"]}, U),
    ("a NOT IN ('x', 'y')", {"a": "x"}, F),
    ("a NOT IN ('x', 'y')", {"a": "z"}, T),
    ("a NOT IN ('x', 'y')", {"a": 1}, U),
    ("a NOT IN ('x', 'y')", {}, U),
    ("NOT a IN ('x')", {"a": "y"}, T),
    ("a IN ('x')", {"a": "x"}, T),
    ("a IN ('x', 'x')", {"a": "x"}, T),
))
def test_in(text, props, expected):
    check(text, props, expected)


# ----------------------------------------------------------------------------- BETWEEN
@pytest.mark.parametrize("text,props,expected", table(
    ("a BETWEEN 1 AND 3", {"a": 1}, T),
    ("a BETWEEN 1 AND 3", {"a": 3}, T),
    ("a BETWEEN 1 AND 3", {"a": 2.5}, T),
    ("a BETWEEN 1 AND 3", {"a": 0}, F),
    ("a BETWEEN 1 AND 3", {"a": 4}, F),
    ("a BETWEEN 1 AND 3", {"a": "2"}, F),  # unlike types compare FALSE
    ("a BETWEEN 1 AND 3", {"a": True}, F),  # unlike types compare FALSE
    ("a BETWEEN 1 AND 3", {}, U),
    ("a BETWEEN 1 AND 3", {"a": NAN}, F),
    ("a BETWEEN 3 AND 1", {"a": 2}, F),
    ("a BETWEEN -1.5 AND 0x10", {"a": 16}, T),
    ("a NOT BETWEEN 1 AND 3", {"a": 2}, F),
    ("a NOT BETWEEN 1 AND 3", {"a": 0}, T),
    ("a NOT BETWEEN 1 AND 3", {}, U),
    ("NOT a BETWEEN 1 AND 3", {"a": 5}, T),
    ("a BETWEEN b AND 3", {"a": 2}, U),
    ("a BETWEEN b AND 3", {"a": 5}, F),
    ("a BETWEEN b AND c", {"a": 2, "b": 1, "c": 3}, T),
    ("a BETWEEN b AND c", {"a": 2, "b": 1, "c": "3"}, F),  # unlike types compare FALSE
    ("a + 1 BETWEEN 2 AND 3", {"a": 1}, T),
    ("a BETWEEN 1 + 1 AND 2 * 2", {"a": 4}, T),
    ("2 BETWEEN 1 AND 3", {}, T),
    ("a BETWEEN 1 AND 3 AND b", {"a": 2, "b": True}, T),
))
def test_between(text, props, expected):
    check(text, props, expected)


# ----------------------------------------------------------------------------- IS NULL
@pytest.mark.parametrize("text,props,expected", table(
    ("a IS NULL", {}, T),
    ("a IS NULL", {"a": None}, T),
    ("a IS NULL", {"a": 1}, F),
    ("a IS NULL", {"a": ""}, F),
    ("a IS NULL", {"a": False}, F),
    ("a IS NULL", {"a": b""}, F),
    ("a IS NOT NULL", {}, F),
    ("a IS NOT NULL", {"a": 0}, T),
    ("a IS NOT NULL", {"a": uuid.UUID(int=0)}, T),
    ("(a + 1) IS NULL", {"a": "x"}, T),
    ("(a + 1) IS NULL", {"a": 1}, F),
    ("(a + 1) IS NOT NULL", {"a": 1}, T),
    ("NULL IS NULL", {}, T),
    ("1 IS NULL", {}, F),
    ("(a = 1) IS NULL", {}, T),
    ("(a = 1) IS NULL", {"a": 2}, F),
    ("NOT a IS NULL", {}, F),
    ("\"custom-x\" IS NOT NULL", {"custom-x": "1"}, T),
))
def test_is_null(text, props, expected):
    check(text, props, expected)


# ----------------------------------------------------------------------------- conditions
@pytest.mark.parametrize("text,props,expected", table(
    ("a", {"a": True}, T),
    ("a", {"a": False}, F),
    ("a", {"a": 1}, F),  # a non-boolean property as a condition is FALSE (BooleanCastExpression) (was U)
    ("a", {"a": "true"}, F),  # unlike types compare FALSE
    ("a", {}, U),
    ("NOT a", {"a": True}, F),
    ("NOT a", {"a": False}, T),
    ("NOT a", {"a": 0}, T),  # unlike types compare FALSE
    ("NOT a", {}, U),
    ("TRUE", {}, T),
    ("FALSE", {}, F),
    ("NULL", {}, U),
    ("NOT NULL", {}, U),
    ("NOT TRUE", {}, F),
    ("NOT NOT TRUE", {}, T),
    ("NOT NOT a", {"a": True}, T),
    ("TRUE AND a", {"a": True}, T),
    ("FALSE AND a", {}, F),
    ("TRUE OR a", {}, T),
    ("NULL OR a", {"a": True}, T),
    ("NULL AND a", {"a": True}, U),
))
def test_boolean_conditions(text, props, expected):
    check(text, props, expected)


_VALUES = {"T": True, "F": False, "U": None}
_AND = {("T", "T"): T, ("T", "F"): F, ("T", "U"): U, ("F", "T"): F, ("F", "F"): F, ("F", "U"): F,
        ("U", "T"): U, ("U", "F"): F, ("U", "U"): U}
_OR = {("T", "T"): T, ("T", "F"): T, ("T", "U"): T, ("F", "T"): T, ("F", "F"): F, ("F", "U"): U,
       ("U", "T"): T, ("U", "F"): U, ("U", "U"): U}


def _props(**truths: str) -> dict[str, object]:
    # A property that is missing is unknown when used as a condition.
    return {name: _VALUES[t] for name, t in truths.items() if t != "U"}


@pytest.mark.parametrize("x,y", sorted(_AND))
def test_and_truth_table(x, y):
    check("x AND y", _props(x=x, y=y), _AND[(x, y)])
    check("(x = 1) AND (y = 1)", {"x": {"T": 1, "F": 2}.get(x), "y": {"T": 1, "F": 2}.get(y)}, _AND[(x, y)])


@pytest.mark.parametrize("x,y", sorted(_OR))
def test_or_truth_table(x, y):
    check("x OR y", _props(x=x, y=y), _OR[(x, y)])
    check("x LIKE 'T' OR y LIKE 'T'", {"x": {"T": "T", "F": "F"}.get(x), "y": {"T": "T", "F": "F"}.get(y)}, _OR[(x, y)])


@pytest.mark.parametrize("x", ["T", "F", "U"])
def test_not_truth_table(x):
    expected = {"T": F, "F": T, "U": U}[x]
    check("NOT x", _props(x=x), expected)
    check("NOT (x = 'yes')", {"x": {"T": "yes", "F": "no"}.get(x)}, expected)


@pytest.mark.parametrize("x,y,z", [(x, y, z) for x in "TFU" for y in "TFU" for z in "TFU"])
def test_three_operand_truth_tables(x, y, z):
    props = _props(x=x, y=y, z=z)
    check("x AND y AND z", props, _AND[(x, "T" if _AND[(y, z)] is T else "F" if _AND[(y, z)] is F else "U")])
    check("x OR y OR z", props, _OR[(x, "T" if _OR[(y, z)] is T else "F" if _OR[(y, z)] is F else "U")])
    check("NOT (x AND y) OR z", props, reference.evaluate(jms_selectors.parse("(NOT (x AND y)) OR z"), props))


# ----------------------------------------------------------------------------- precedence
@pytest.mark.parametrize("text,props,expected", table(
    ("NOT a AND b", {"a": True, "b": False}, F),  # (NOT a) AND b, not NOT (a AND b)
    ("NOT a AND b", {"a": False, "b": True}, T),
    ("NOT a OR b", {"a": True, "b": True}, T),
    ("a OR b AND c", {"a": True, "b": False, "c": False}, T),  # a OR (b AND c)
    ("a AND b OR c", {"a": False, "b": True, "c": True}, T),  # (a AND b) OR c
    ("(a OR b) AND c", {"a": True, "b": False, "c": False}, F),
    ("NOT a = 1", {"a": 2}, T),
    ("NOT a = 1", {"a": 1}, F),
    ("NOT a = 1", {}, U),
    ("NOT a > 1", {"a": 0}, T),
    ("NOT a > 1 AND b = 2", {"a": 0, "b": 2}, T),
    ("NOT a + 1 = 2", {"a": 2}, T),
    ("NOT a IN ('x') OR b", {"a": "x", "b": True}, T),
    ("NOT a IS NULL", {"a": 1}, T),
    ("a = 1 OR b = 2 AND c = 3", {"a": 1}, T),
    ("(a = 1 OR b = 2) AND c = 3", {"a": 1}, U),
))
def test_precedence(text, props, expected):
    check(text, props, expected)


# ----------------------------------------------------------------------------- value types
def test_proton_types_are_numbers_and_strings():
    import proton
    props = {
        "i": proton.int32(5), "u": proton.ulong(2**63), "f": proton.float32(1.5), "b": proton.ubyte(7),
        "s": proton.symbol("DENM"), "c": proton.char("x"), "t": proton.timestamp(1000),
    }
    check("i = 5 AND i > 4 AND i + 1 = 6", props, T)
    check("u = 9223372036854775808 AND u > 1", props, T)
    check("f = 1.5 AND f BETWEEN 1 AND 2", props, T)
    check("b = 7 OR b = 8", props, T)
    check("s = 'DENM' AND s LIKE 'DE%' AND s IN ('DENM')", props, T)
    check("c = 'x' AND c LIKE '_'", props, T)
    check("t / 10 = 100", props, T)
    check("s > t", props, F)  # a string ordered with a timestamp is FALSE (s > 'A' is now refused)


@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_not_numbers(value):
    props = {"a": value}
    for text in ("a = 1", "a = 0", "a > 0", "a < 2", "a BETWEEN 0 AND 1", "a NOT BETWEEN 0 AND 1"):
        check(text, props, F)  # unlike types compare FALSE
    check("a <> 1", props, T)  # NOT (a = 1) (was U)
    for text in ("a + 1 = 2", "-a = -1", "a IN ('0', '1')"):
        check(text, props, U)  # arithmetic on a boolean is null; IN on a non-string is unknown
    check("a * 1 IS NULL", props, T)
    check("a = TRUE", props, value)


def test_str_subclass_counts_as_string():
    class Tag(str):
        pass

    props = {"a": Tag("abc")}
    check("a = 'abc' AND a LIKE 'a%' AND a LIKE '%c' AND a LIKE '%b%' AND a LIKE '_b_' AND a IN ('abc')", props, T)
    check("a <> 'abc'", props, F)


def test_int_and_float_subclasses_are_numbers():
    class Int(int):
        pass

    class Float(float):
        pass

    props = {"i": Int(3), "f": Float(2.5)}
    check("i = 3 AND f = 2.5 AND i > f AND i + f = 5.5 AND i / 2 = 1 AND i <> 4 AND f BETWEEN 2 AND 3", props, T)


@pytest.mark.parametrize("value", [b"x", bytearray(b"x"), uuid.UUID(int=1), [1], {"x": 1}, (1,), object(), 1j])
def test_other_types_compare_false(value):
    """Values of types selectors do not know are unlike every literal: FALSE (were U)."""
    props = {"a": value}
    for text in ("a = 'x'", "a = 1", "a < 1", "a LIKE '%'", "a BETWEEN 0 AND 2", "a NOT BETWEEN 0 AND 2", "a"):
        check(text, props, F)
    for text in ("a <> 1", "a NOT LIKE 'x'", "NOT a", "NOT (a = 'x')"):
        check(text, props, T)
    for text in ("a IN ('x')", "a NOT IN ('x')", "a + 1 = 2", "a = b"):  # IN: strings only; b is null
        check(text, props, U)
    check("a IS NOT NULL", props, T)


# ----------------------------------------------------------------------------- C-Roads
QUADTREE = (
    ",120212302013111223,1202123020110,1202123020111,1202123021000,1202123021001,1202123021010,"
    "1202123020112,1202123020113,1202123021002,1202123021003,1202123021012,1202123020130,1202123020131,"
    "1202123021020,1202123021021,1202123021030,1202123020132,1202123020133,1202123021022,1202123021023,"
    "1202123021032,1202123020310,1202123020311,1202123021200,1202123021201,1202123021210,"
)
APPENDIX_F = {  # the logged message of appendix F (spec section 11.4)
    "latitude": 50.2268645, "longitude": 14.4041937, "messageType": "DENM", "protocolVersion": "DENM:1.3.1",
    "causeCode": 1, "subCauseCode": 4, "serviceType": ",HLN-TJA,", "quadTree": QUADTREE,
    "originatingCountry": "CZ", "publisherId": "CZ00003",
}
IP_066_QUADTREE = "quadTree LIKE '%,031333110%' OR quadTree LIKE '%,031333111%' OR quadTree LIKE '%,031333112%'"
IP_066_COUNTRY = "messageType = 'DENM' AND originatingCountry = 'FR'"


@pytest.mark.parametrize("text,props,expected", table(
    (IP_066_QUADTREE, {"quadTree": ",0313331102,"}, T),
    (IP_066_QUADTREE, {"quadTree": ",2,031333112,"}, T),
    (IP_066_QUADTREE, {"quadTree": ",0313331132,"}, F),
    (IP_066_QUADTREE, {"quadTree": "0313331102"}, F),
    (IP_066_QUADTREE, {}, U),
    (IP_066_COUNTRY, {"messageType": "DENM", "originatingCountry": "FR"}, T),
    (IP_066_COUNTRY, {"messageType": "DENM", "originatingCountry": "CZ"}, F),
    (IP_066_COUNTRY, {"messageType": "IVIM", "originatingCountry": "FR"}, F),
    (IP_066_COUNTRY, {"messageType": "DENM"}, U),
    (IP_066_COUNTRY, {"originatingCountry": "NL"}, F),
    ("\"custom-nw-foo\" = 1", {"custom-nw-foo": 1}, T),
    ("\"custom-nw-foo\" = 1", {"custom-nw-foo": 2}, F),
    ("\"custom-nw-foo\" = 1", {"custom": 1, "nw": 0, "foo": 0}, U),
    ("custom-nw-foo = 1", {"custom": 2, "nw": 1, "foo": 0}, T),  # bare: a subtraction
    ("\"custom-nw-say\"\"hi\"\"\" = 'x'", {'custom-nw-say"hi"': "x"}, T),
    ("\"custom-nw-list\" LIKE '%,a,%'", {"custom-nw-list": ",b,a,"}, T),
    ("messageType = 'DENM' AND quadTree LIKE '%,1202123021%'", APPENDIX_F, T),
    ("messageType = 'DENM' AND quadTree LIKE '%,1202021%'", APPENDIX_F, F),
    ("messageType = 'DENM' AND (causeCode = 1 OR causeCode = 2) AND subCauseCode >= 4", APPENDIX_F, T),
    ("serviceType LIKE '%,HLN-TJA,%' AND originatingCountry IN ('CZ', 'SK')", APPENDIX_F, T),
    ("publisherId = 'CZ00003' AND protocolVersion LIKE 'DENM:1.3.%'", APPENDIX_F, T),
    ("latitude BETWEEN 50 AND 51 AND longitude BETWEEN 14.4 AND 14.5", APPENDIX_F, T),
    ("shardId = 1", APPENDIX_F, U),
    ("shardId IS NULL OR shardId = 1", APPENDIX_F, T),
    ("causeCode = -1", {"causeCode": -1}, T),
    ("quadTree NOT LIKE '%,1202021%'", APPENDIX_F, T),
    ("quadTree NOT LIKE '%,1202123021210,%'", APPENDIX_F, F),
    ("NOT quadTree LIKE '%,120212302013111223,%'", APPENDIX_F, F),
    ("quadTree LIKE '%,1202123021210,'", APPENDIX_F, T),
    ("quadTree LIKE ',120212302013111223,%'", APPENDIX_F, T),
    ("quadTree LIKE '%,1202123021210,%' OR quadTree LIKE '%,0%'", APPENDIX_F, T),
    ("quadTree LIKE '%,3%' OR quadTree LIKE '%,0%'", APPENDIX_F, F),
    ("NOT (quadTree LIKE '%,3%' OR quadTree LIKE '%,0%')", APPENDIX_F, T),
    ("quadTree LIKE '%.%'", {"quadTree": "a" * 300 + ".b"}, T),
    ("quadTree LIKE '%.%'", {"quadTree": "a" * 300}, F),
    ("quadTree LIKE '%,1202021%'", {"quadTree": 5}, F),  # unlike types compare FALSE
    ("messageType = 'DENM' AND NOT (causeCode = -1)", APPENDIX_F, T),
))
def test_c_roads_examples(text, props, expected):
    check(text, props, expected)


def test_public_api_shape():
    selector = jms_selectors.compile(IP_066_COUNTRY)
    assert selector.text == IP_066_COUNTRY
    assert isinstance(selector.ast, jms_selectors.ast.And)
    assert selector.evaluate({"messageType": "DENM"}) is None
    assert selector.matches({"messageType": "DENM", "originatingCountry": "FR"}) is True
    assert selector == jms_selectors.compile("messageType='DENM' and originatingCountry='FR'")
    assert hash(selector) == hash(jms_selectors.compile("(messageType = 'DENM') AND (originatingCountry = 'FR')"))
    assert "IP_066" not in selector.source and "DENM" not in selector.source  # literals are never in the source
    assert issubclass(jms_selectors.SelectorError, ValueError)
    assert repr(selector) == f"Selector({IP_066_COUNTRY!r})"


def test_selector_pickles():
    import pickle

    selector = pickle.loads(pickle.dumps(jms_selectors.compile(IP_066_QUADTREE)))
    assert selector.matches({"quadTree": ",031333111,"}) is True
    error = pickle.loads(pickle.dumps(jms_selectors.SelectorError(3, "bad", "abc")))
    assert (error.position, error.reason, str(error)) == (3, "bad", "invalid selector at position 3: bad")


def test_any_mapping_works():
    class Props(Mapping):
        def __init__(self, data):
            self.data = data

        def __getitem__(self, key):
            return self.data[key]

        def __iter__(self):
            return iter(self.data)

        def __len__(self):
            return len(self.data)

    check(IP_066_COUNTRY + " AND x IS NULL", Props({"messageType": "DENM", "originatingCountry": "FR"}), T)
