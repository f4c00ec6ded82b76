"""IP_066, hostile selectors at their largest (seconds each): trees deeper than the parser allows,
5,000-term chains, 5,000 quadTree tiles, 64 KiB of OR terms; bounded time and stack, evaluation never
raises (the other hostile inputs: tests/unit/test_selectors_hostile.py)."""
from __future__ import annotations

import math

import pytest

import jms_selectors
from jms_selectors import MAX_LENGTH, reference

PROPS = [
    {},
    {"a": 1, "b": 2, "c": True, "s": "abc", "quadTree": ",0313331102,"},
    {"a": "1", "b": None, "c": 0, "s": 1.5, "quadTree": ",2,"},
    {"a": math.nan, "b": -1, "c": False, "s": "", "quadTree": 5},
]


def agree(selector: jms_selectors.Selector) -> None:
    for props in PROPS:
        expected = reference.evaluate(selector.ast, props)
        assert selector.evaluate(props) is expected
        assert selector.matches(props) is (expected is True)


def test_trees_deeper_than_the_parser_allows_still_evaluate():
    """Analysis code may build trees directly; depth beyond the stack falls back, never raises."""
    from jms_selectors.ast import Arithmetic, Comparison, Identifier, Literal, Not

    tree = Comparison("=", Identifier("a"), Literal(1))
    for _ in range(3000):
        tree = Not(tree)
    selector = jms_selectors.Selector("(built)", tree)  # NOT chains are compiled without recursion
    assert selector.evaluate({"a": 1}) is True and selector.evaluate({"a": 2}) is False
    value = Identifier("a")
    for _ in range(5000):
        value = Arithmetic("+", value, Literal(1))
    selector = jms_selectors.Selector("(built)", Comparison(">", value, Literal(0)))
    assert selector.source == ""  # code generation gave up: the walker is used (and may give up too)
    assert selector.evaluate({"a": 1}) in (True, None)
    assert selector.matches({"a": 1}) in (True, False)


@pytest.mark.timeout(60)
def test_five_thousand_quadtree_tiles_compiled_from_a_tree():
    """Longer than 64 KiB as text, so built as a tree (analysis code may do the same)."""
    from jms_selectors.ast import And, Comparison, Identifier, Like, Literal, Or

    tiles = [f"{i:012b}".replace("1", "3") for i in range(5000)]
    tree = Or(tuple(Like(Identifier("quadTree"), f"%,{tile}%") for tile in tiles))
    selector = jms_selectors.Selector("(built)", tree)
    assert selector.matches({"quadTree": f",1,{tiles[4999]}2,"}) is True
    assert selector.matches({"quadTree": ",1,2,"}) is False
    assert selector.evaluate({}) is None
    agree(selector)
    pairs = (And((Comparison("=", Identifier("a"), Literal(i)), Comparison("=", Identifier("b"), Literal(i))))
             for i in range(5000))
    selector = jms_selectors.Selector("(built)", Or(tuple(pairs)))
    assert selector.matches({"a": 77, "b": 77}) is True and selector.evaluate({"a": 77}) is None
    agree(selector)


@pytest.mark.timeout(60)
def test_selector_filling_64_kib_with_or_terms():
    term = "a = 1 OR "
    text = term * ((MAX_LENGTH - 10) // len(term)) + "a = 2"
    selector = jms_selectors.compile(text)
    assert selector.matches({"a": 2}) is True and selector.evaluate({"a": 3}) is False


@pytest.mark.timeout(60)
def test_five_thousand_term_or_chain():
    text = " OR ".join(f"a={i}" for i in range(5000))
    assert len(text) < MAX_LENGTH
    selector = jms_selectors.compile(text)
    assert len(selector.ast.operands) == 5000
    assert selector.matches({"a": 4999}) is True and selector.matches({"a": 5000}) is False
    assert selector.evaluate({}) is None
    agree(selector)


@pytest.mark.timeout(60)
def test_five_thousand_term_and_chain():
    conjunction = jms_selectors.compile(" AND ".join(f"a<>{i}" for i in range(5000)))
    assert conjunction.matches({"a": -1}) is True and conjunction.matches({"a": 4999}) is False
    agree(conjunction)
