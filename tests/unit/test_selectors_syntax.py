"""IP_066: the JMS 1.1 §3.8 selector grammar (Qpid/ActiveMQ flavour) and its syntax tree."""
from __future__ import annotations

import math

import pytest

import jms_selectors
from jms_selectors import parse
from jms_selectors.ast import (
    And, Arithmetic, Between, Comparison, Identifier, In, IsNull, Like, Literal, Not, Or, Unary, children,
    identifiers, unparse,
)

a, b, c = Identifier("a"), Identifier("b"), Identifier("c")


def literal_of(text: str):
    """The literal on the right of ``a = <text>``, with its Python type."""
    node = parse(f"a = {text}")
    assert isinstance(node, Comparison) and isinstance(node.right, Literal)
    return node.right.value


# ----------------------------------------------------------------------------- literals
@pytest.mark.parametrize("text,value", [
    ("42", 42), ("0", 0), ("7L", 7), ("7l", 7),
    ("0x2A", 42), ("0X2a", 42), ("0xff", 255), ("0xFFFFFFFFFFFFFFFF", 2**64 - 1),
    ("052", 42), ("00", 0), ("0777", 511),
    ("9223372036854775807", 9223372036854775807), ("9223372036854775808", 9223372036854775808),
    ("-9223372036854775808", -9223372036854775808), ("-1", -1), ("+1", 1), ("- 1", -1), ("--1\n1", 1),
])
def test_exact_numeric_literals(text, value):
    result = literal_of(text)
    assert type(result) is int and result == value


@pytest.mark.parametrize("text,value", [
    ("1.5", 1.5), (".5", 0.5), ("1.", 1.0), ("0.0", 0.0), ("1e3", 1000.0), ("1E3", 1000.0),
    ("1.5E-3", 0.0015), ("1.5e+3", 1500.0), (".5e1", 5.0), ("5.E2", 500.0), ("08.5", 8.5),
    ("-1.5", -1.5), ("1E999", math.inf), ("-1E999", -math.inf), ("1e-999", 0.0),
])
def test_approximate_numeric_literals(text, value):
    result = literal_of(text)
    assert type(result) is float and result == value


@pytest.mark.parametrize("text,value", [
    ("'abc'", "abc"), ("''", ""), ("'it''s'", "it's"), ("''''", "'"), ("'a\"b'", 'a"b'),
    ("'with space and -- dashes /* */'", "with space and -- dashes /* */"), ("'line\nbreak'", "line\nbreak"),
    ("'\u00e9\U0001F600'", "\u00e9\U0001F600"), ("'%_'", "%_"),
])
def test_string_literals(text, value):
    assert literal_of(text) == value


@pytest.mark.parametrize("text,value", [
    ("TRUE", True), ("true", True), ("True", True), ("FALSE", False), ("false", False),
])
def test_boolean_literals(text, value):
    assert literal_of(text) is value


@pytest.mark.parametrize("text", ["NULL", "null", "NuLl"])
def test_null_literal(text):  # '= NULL' is refused, so read it where NULL may stand
    assert parse(f"{text} IS NULL") == IsNull(Literal(None))


def test_literal_equality_distinguishes_types():
    assert Literal(True) != Literal(1)
    assert Literal(1) != Literal(1.0)
    assert Literal(1) == Literal(1)
    assert len({Literal(True), Literal(1), Literal(1.0), Literal("1")}) == 4


# ----------------------------------------------------------------------------- identifiers
@pytest.mark.parametrize("name", [
    "a", "A", "messageType", "$a", "_a", "a1", "a$b", "a_b_", "$", "_",
    "quadTree", "JMSType", "Andrew", "inx", "nothing", "isx", "orx", "LIKEs", "notnull",
])
def test_bare_identifiers(name):
    assert parse(f"{name} = 1") == Comparison("=", Identifier(name), Literal(1))


@pytest.mark.parametrize("text,name", [
    ('"custom-nw-foo"', "custom-nw-foo"), ('"a b"', "a b"), ('"say ""hi"""', 'say "hi"'), ('"AND"', "AND"),
    ('"1abc"', "1abc"), ('"quadTree"', "quadTree"), ('""', ""), ("\"it's\"", "it's"),
])
def test_quoted_identifiers(text, name):
    assert parse(f"{text} = 1") == Comparison("=", Identifier(name), Literal(1))


def test_identifiers_are_case_sensitive():
    selector = jms_selectors.compile("messageType = 'DENM'")
    assert selector.evaluate({"MessageType": "DENM"}) is None
    assert selector.evaluate({"messageType": "DENM"}) is True


def test_bare_custom_property_name_is_a_subtraction():
    assert parse("custom-nw-foo = 1") == Comparison(
        "=", Arithmetic("-", Arithmetic("-", Identifier("custom"), Identifier("nw")), Identifier("foo")), Literal(1)
    )


@pytest.mark.parametrize("text", [
    "a and b", "a AnD b", "a AND b", "a And b",
])
def test_keywords_are_case_insensitive(text):
    assert parse(text) == And((a, b))


@pytest.mark.parametrize("text,expected", [
    ("not a", Not(a)), ("a or b", Or((a, b))), ("a like 'x'", Like(a, "x")),
    ("a like 'x!%' escape '!'", Like(a, "x!%", "!")), ("a not like 'x'", Like(a, "x", None, True)),
    ("a in ('x')", In(a, ("x",))), ("a not in ('x')", In(a, ("x",), True)),
    ("a between 1 and 2", Between(a, Literal(1), Literal(2))),
    ("a not between 1 and 2", Between(a, Literal(1), Literal(2), True)),
    ("a is null", IsNull(a)), ("a is not null", IsNull(a, True)), ("a Is NoT nUlL", IsNull(a, True)),
])
def test_lowercase_keywords(text, expected):
    assert parse(text) == expected


# ----------------------------------------------------------------------------- whitespace, comments
@pytest.mark.parametrize("text", [
    "a = 1", " a=1 ", "\ta\n=\r1\f", "a = 1 -- trailing comment\n", "a = 1 --\r", "/* lead */ a = 1",
    "a /* inside */ = /**/ 1", "a = 1 /* multi\nline * / ** */", "-- first line\na = 1", "a = 1 -- c\r\n",
    "a/**/=/**/1", "a = 1 /* -- */",
])
def test_whitespace_and_comments(text):
    assert parse(text) == Comparison("=", a, Literal(1))


def test_comment_inside_boolean_expression():
    assert parse("a = 1 -- comment\n AND b = 2") == And((Comparison("=", a, Literal(1)), Comparison("=", b, Literal(2))))



@pytest.mark.parametrize("text,written", [
    ("a = 1 -- x", "a = 1 - - x"), ("--1.0 = 1.0", "- -1.0 = 1.0"), ("---1 = -1", "- - -1 = -1"),
    ("a = 1 -- x\n", "a = 1 -- x\n"),  # a comment stays one
    ("a = '--'", "a = '--'"), ('"--" = 1', '"--" = 1'), ("a = 1 /* -- */", "a = 1 /* -- */"),
    ("a = 'unterminated --", "a = 'unterminated --"),  # refused either way: unchanged
])
def test_embeddable_writes_adjacent_minus_signs_apart(text, written):
    assert jms_selectors.embeddable(text) == written

@pytest.mark.parametrize("text", ["", "   ", "\n\t", "-- nothing\n", "/* nothing */"])
def test_empty_selector_matches_everything(text):
    selector = jms_selectors.compile(text)
    assert selector.ast == Literal(True)
    assert selector.matches({}) is True
    assert selector.evaluate({"a": 1}) is True


# ----------------------------------------------------------------------------- tree shapes
@pytest.mark.parametrize("text,expected", [
    ("a AND b AND c", And((a, b, c))),
    ("a AND (b AND c)", And((a, b, c))),
    ("(a AND b) AND c", And((a, b, c))),
    ("a OR b OR c", Or((a, b, c))),
    ("a OR (b OR c)", Or((a, b, c))),
    ("(a OR b) AND c", And((Or((a, b)), c))),
    ("a OR b AND c", Or((a, And((b, c))))),
    ("a AND b OR c", Or((And((a, b)), c))),
    ("a AND b OR c AND a OR b", Or((And((a, b)), And((c, a)), b))),
    ("NOT a AND b", And((Not(a), b))),
    ("NOT (a AND b)", Not(And((a, b)))),
    ("NOT NOT a", Not(Not(a))),
    ("NOT a = 1", Not(Comparison("=", a, Literal(1)))),
    ("NOT a > 1", Not(Comparison(">", a, Literal(1)))),
    ("NOT a IN ('x')", Not(In(a, ("x",)))),
    ("NOT a LIKE 'x'", Not(Like(a, "x"))),
    ("NOT a IS NULL", Not(IsNull(a))),
    ("NOT a BETWEEN 1 AND 2", Not(Between(a, Literal(1), Literal(2)))),
    ("NOT a + 1 = 2", Not(Comparison("=", Arithmetic("+", a, Literal(1)), Literal(2)))),
    ("a = 1 AND b", And((Comparison("=", a, Literal(1)), b))),
    ("causeCode = -1", Comparison("=", Identifier("causeCode"), Literal(-1))),
    ("a = -1.5", Comparison("=", a, Literal(-1.5))),
    ("a = -(2)", Comparison("=", a, Literal(-2))),
    ("-a = 1", Comparison("=", Unary("-", a), Literal(1))),
    ("+a = 1", Comparison("=", Unary("+", a), Literal(1))),
    ("-NULL IS NULL", IsNull(Unary("-", Literal(None)))),
    ("a + b * c = 1", Comparison("=", Arithmetic("+", a, Arithmetic("*", b, c)), Literal(1))),
    ("a * b + c = 1", Comparison("=", Arithmetic("+", Arithmetic("*", a, b), c), Literal(1))),
    ("a - b - c = 1", Comparison("=", Arithmetic("-", Arithmetic("-", a, b), c), Literal(1))),
    ("a / b / c = 1", Comparison("=", Arithmetic("/", Arithmetic("/", a, b), c), Literal(1))),
    ("a - (b - c) = 1", Comparison("=", Arithmetic("-", a, Arithmetic("-", b, c)), Literal(1))),
    ("-a * b = 1", Comparison("=", Arithmetic("*", Unary("-", a), b), Literal(1))),
    ("1 < a", Comparison("<", Literal(1), a)),
    ("a <> b", Comparison("<>", a, b)),
    ("a <= b", Comparison("<=", a, b)),
    ("a >= b", Comparison(">=", a, b)),
    ("(a = 1) = TRUE", Comparison("=", Comparison("=", a, Literal(1)), Literal(True))),
    ("a IN ('x', 'y', '')", In(a, ("x", "y", ""))),
    ("a BETWEEN 1 + 1 AND b * 2", Between(a, Arithmetic("+", Literal(1), Literal(1)), Arithmetic("*", b, Literal(2)))),
    ("a BETWEEN 1 AND 2 AND b", And((Between(a, Literal(1), Literal(2)), b))),
    ("a BETWEEN 1 AND 2 OR b", Or((Between(a, Literal(1), Literal(2)), b))),
    ("a LIKE 'x' ESCAPE '\\'", Like(a, "x", "\\")),
    ("a + 1 LIKE 'x'", Like(Arithmetic("+", a, Literal(1)), "x")),
    ("a + 1 IS NULL", IsNull(Arithmetic("+", a, Literal(1)))),
    ("((a))", a),
    ("TRUE", Literal(True)),
    ("NULL", Literal(None)),
])
def test_tree_shapes(text, expected):
    assert parse(text) == expected


def test_tree_helpers():
    tree = parse("a = 1 AND (b LIKE 'x' OR c BETWEEN 1 AND a + 2) AND NOT -\"d-e\" IS NULL")
    assert identifiers(tree) == {"a", "b", "c", "d-e"}
    assert children(tree)[0] == Comparison("=", a, Literal(1))
    assert children(Literal(1)) == ()


def test_like_node_carries_matcher():
    node = parse("a LIKE '%,12%'")
    assert isinstance(node, Like) and node.matcher.kind == "contains" and node.matcher.matches("x,123")
    assert Like(a, "ab%").matcher.kind == "prefix"


# ----------------------------------------------------------------------------- unparse
@pytest.mark.parametrize("text", [
    "a = 1", "a <> 'it''s'", "\"custom-nw-foo\" = 1", '"AND" = TRUE', "a AND b OR c", "(a OR b) AND c",
    "NOT (a AND b)", "NOT a AND b", "NOT NOT a", "a = -1", "a - -1 = 2", "-a * (b + c) / 2 >= 1.5",
    "a - (b - c) = 1", "a / (b * c) = 1", "(a = 1) = TRUE", "a IN ('x', 'y')", "a NOT IN ('x')",
    "a LIKE 'x!%' ESCAPE '!'", "a NOT LIKE '%_'", "a BETWEEN -1 AND b + 1", "a NOT BETWEEN 1 AND 2",
    "a IS NULL OR b IS NOT NULL", "a = 1E999", "a = -1E999", "a = 1.0E-300", "NULL", "TRUE", "FALSE",
    "-NULL IS NULL", "- -a = 1", "-(a + b) = 1", "a = 0x7FFFFFFFFFFFFFFF", "\"\u00e9\" = 1", "\"1\" = 1",
    "(a + 1) LIKE 'x'", "(a = 1) IS NULL", "(a LIKE 'x') = (b IN ('y'))",
])
def test_unparse_round_trip(text):
    tree = parse(text)
    again = unparse(tree)
    assert parse(again) == tree
    assert unparse(parse(again)) == again


def test_unparse_rejects_nan():
    with pytest.raises(ValueError):
        unparse(Comparison("=", a, Literal(math.nan)))
