"""IP_066/067: the compiled selectors agree with the reference tree walker (hypothesis)."""
from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jms_selectors
from jms_selectors import SelectorError, parse, reference
from jms_selectors.lexer import tokenize
from jms_selectors.ast import (
    And, Arithmetic, Between, Comparison, Identifier, In, IsNull, Like, Literal, Not, Or, Unary, unparse,
)

NAMES = ["a", "b", "c", "custom-x"]
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

identifier = st.sampled_from(NAMES).map(Identifier)
string = st.sampled_from(["", "a", "b", "ab", "ba", "a%", "_", "it's", "A"])
exact = st.one_of(st.integers(-3, 3), st.sampled_from([2**63, -(2**70), 10**30]))
approximate = st.one_of(st.sampled_from([0.5, -0.0, 1.5, -2.5, 1e308, math.inf, -math.inf, 3.0]))
number = st.one_of(exact, approximate)

numeric_leaf = st.one_of(identifier, number.map(Literal), st.just(Literal(None)))
numeric = st.recursive(
    numeric_leaf,
    lambda inner: st.one_of(
        st.builds(Unary, st.sampled_from(["-", "+"]),
                  inner.filter(lambda n: not (isinstance(n, Literal) and n.value is not None))),
        st.builds(Arithmetic, st.sampled_from(["+", "-", "*", "/"]), inner, inner),
    ),
    max_leaves=4,
)
scalar = st.one_of(numeric, string.map(Literal), st.booleans().map(Literal))

pattern_items = st.lists(st.sampled_from(["a", "b", "%", "_", "'"]), max_size=5).map("".join)
escaped_items = st.lists(st.sampled_from(["a", "b", "%", "_", "!%", "!_", "!!"]), max_size=5).map("".join)


def _flatten(cls, operands):
    flat = []
    for operand in operands:
        flat.extend(operand.operands if isinstance(operand, cls) else (operand,))
    return cls(tuple(flat))


def _conditions(inner):
    value = st.one_of(scalar, inner)  # a condition as an operand gets parenthesised by unparse
    return st.one_of(
        st.builds(Comparison, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), value, value),
        st.builds(Like, value, pattern_items, st.none(), st.booleans()),
        st.builds(Like, value, escaped_items, st.just("!"), st.booleans()),
        st.builds(In, value, st.lists(st.one_of(string, number), min_size=1, max_size=4).map(tuple), st.booleans()),
        st.builds(Between, value, numeric, numeric, st.booleans()),
        st.builds(IsNull, value, st.booleans()),
        st.builds(Not, inner),
        st.lists(inner, min_size=2, max_size=4).map(lambda ops: _flatten(And, ops)),
        st.lists(inner, min_size=2, max_size=4).map(lambda ops: _flatten(Or, ops)),
    )


condition_leaf = st.one_of(identifier, st.sampled_from([Literal(True), Literal(False), Literal(None)]))
condition = st.recursive(condition_leaf, _conditions, max_leaves=10)

property_value = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([2**63, 10**30, -(10**400)]),
    st.sampled_from([0.5, -0.0, 1.5, 3.0, math.nan, math.inf, -math.inf, 1e308]),
    string, st.text(alphabet="ab%_'!", max_size=4), st.sampled_from([b"a", [1], ("a",), 1j]),
)
properties = st.dictionaries(st.sampled_from(NAMES), property_value, max_size=4)


# Trees the strategy builds that the parser refuses, as the Apache brokers do (test_selectors_portable.py).
PORTABILITY_REFUSALS = (
    "orders numbers only", "with NULL is never true", "NULL' is never true", "compares only with a boolean",
    "IN applies to a property only", "IN list holds string literals only",
)


@SETTINGS
@given(condition)
def test_unparse_parse_round_trip(tree):
    text = unparse(tree)
    try:
        parsed = parse(text)
    except SelectorError as error:
        assert any(reason in error.reason for reason in PORTABILITY_REFUSALS), (text, error)
        return
    assert parsed == tree, text


def _compiled(tree):
    """The selector as the parser builds it when it accepts the text, else the tree compiled directly."""
    try:
        return jms_selectors.compile(unparse(tree))
    except SelectorError:
        return jms_selectors.Selector("", tree)


@SETTINGS
@given(condition, st.lists(properties, min_size=1, max_size=6))
def test_compiled_agrees_with_reference(tree, samples):
    selector = _compiled(tree)
    for props in samples:
        expected = reference.evaluate(selector.ast, props)
        assert selector.evaluate(props) is expected, (selector.text, props, selector.source)
        assert selector.matches(props) is (expected is True)


@SETTINGS
@given(condition, st.lists(properties, min_size=1, max_size=4))
def test_not_is_the_three_valued_complement(tree, samples):
    positive = jms_selectors.Selector("", tree)
    negative = jms_selectors.Selector("", Not(tree))
    for props in samples:
        value = positive.evaluate(props)
        assert negative.evaluate(props) is (None if value is None else not value)


@SETTINGS
@given(
    st.lists(st.tuples(st.text(alphabet="ab,.", min_size=1, max_size=3), st.booleans()), min_size=3, max_size=8),
    st.booleans(), st.booleans(), st.one_of(st.text(alphabet="ab,.", max_size=8), st.none(), st.just(3)),
)
def test_merged_contains_chains_agree(needles, disjunction, wrap, value):
    """Chains of x LIKE '%lit%' are merged into one regex search; check it against the walker."""
    likes = tuple(Like(Identifier("q"), f"%{text}%", None, negated) for text, negated in needles)
    tree = Or(likes) if disjunction else And(likes)
    selector = jms_selectors.Selector("", Not(tree) if wrap else tree)
    props = {} if value is None else {"q": value}
    assert selector.evaluate(props) is reference.evaluate(selector.ast, props)


@SETTINGS
@given(
    st.text(alphabet=",ab.", min_size=1, max_size=6), st.booleans(),
    st.one_of(st.text(alphabet=",ab.", min_size=100, max_size=400), st.text(alphabet=",ab.", max_size=20)),
)
def test_contains_on_long_values_agrees(literal, negated, value):
    """Long values take the regex path for separator-led literals; both paths must agree."""
    for pattern in (f"%{literal}%", f"%{literal}%{literal[::-1]}%", f"{literal}%"):
        selector = jms_selectors.Selector("", Like(Identifier("q"), pattern, None, negated))
        assert selector.evaluate({"q": value}) is reference.evaluate(selector.ast, {"q": value})
        negation = jms_selectors.Selector("", Not(selector.ast))
        assert negation.evaluate({"q": value}) is reference.evaluate(negation.ast, {"q": value})


TOKENS = [
    "a", "b", " ", "(", ")", "=", "<>", "<", ">=", "+", "-", "*", "/", ",", "'x'", "''", "'", '"c-d"', '"',
    "1", "0x1F", "07", "1.5", ".5", "1e3", "L", "AND", "OR", "NOT", "LIKE", "ESCAPE", "'!'", "IN", "BETWEEN",
    "IS", "NULL", "TRUE", "FALSE", "--", "/*", "*/", "\n", "%", "!", "$", "\u00e9",
]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=14).map("".join), properties)
def test_arbitrary_text_compiles_or_raises_selector_error(text, props):
    try:
        selector = jms_selectors.compile(text)
    except SelectorError as error:
        assert 0 <= error.position <= len(text)
        assert error.reason
        return
    expected = reference.evaluate(selector.ast, props)
    assert selector.evaluate(props) is expected
    assert parse(unparse(selector.ast)) == selector.ast



@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(TOKENS + ["-", "--", "\r"]), max_size=14).map("".join))
def test_embeddable_text_keeps_its_meaning_before_a_line_break(text):
    """Code that combines selectors closes each off with a line break; ``embeddable`` makes sure
    that line break cannot turn minus signs into a comment."""
    try:
        tree = parse(text)
    except SelectorError:
        return
    assert parse(jms_selectors.embeddable(text) + "\n") == tree
    if len(tokenize(text)) > 1:  # not empty: combined with another
        assert parse(f"({jms_selectors.embeddable(text)}\n) AND TRUE") == parse(f"({unparse(tree)}) AND TRUE")

@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), properties)
def test_random_unicode_never_crashes(text, props):
    try:
        selector = jms_selectors.compile(text)
    except SelectorError:
        return
    assert selector.evaluate(props) is reference.evaluate(selector.ast, props)
