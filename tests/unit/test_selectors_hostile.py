"""IP_066: hostile selectors and messages; bounded time and stack, evaluation never raises."""
from __future__ import annotations

import math
import sys
from collections.abc import Mapping

import pytest

import jms_selectors
from jms_selectors import MAX_DEPTH, MAX_LENGTH, SelectorError, reference

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


def error_of(text: str) -> SelectorError:
    with pytest.raises(SelectorError) as info:
        jms_selectors.compile(text)
    return info.value


# ----------------------------------------------------------------------------- length
def _string_selector(total: int, fill: str = "x") -> str:
    head, tail = "s = '", "'"
    return head + fill * (total - len(head) - len(tail)) + tail


def test_selector_of_exactly_64_kib_compiles():
    text = _string_selector(MAX_LENGTH)
    assert len(text.encode()) == MAX_LENGTH
    assert jms_selectors.compile(text).matches({"s": "x" * (MAX_LENGTH - 6)}) is True


def test_selector_over_64_kib_is_refused():
    error = error_of(_string_selector(MAX_LENGTH + 1))
    assert error.position == MAX_LENGTH
    assert "longer than 65536 bytes" in error.reason


def test_length_counts_utf8_bytes():
    text = "s = '" + "\u00e9" * 40000 + "'"  # 80,006 bytes in 40,006 characters
    error = error_of(text)
    assert error.position == 5 + (MAX_LENGTH - 5) // 2
    assert len(text[: error.position + 1].encode()) > MAX_LENGTH >= len(text[: error.position].encode())


@pytest.mark.timeout(60)
def test_huge_selector_is_refused_quickly():
    assert error_of("a = 1 OR " * 2_000_000 + "a = 2").position == MAX_LENGTH


# ----------------------------------------------------------------------------- nesting
def test_parentheses_up_to_the_limit():
    selector = jms_selectors.compile("(" * MAX_DEPTH + "a = 1" + ")" * MAX_DEPTH)
    assert selector.matches({"a": 1}) is True


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text,position", [
    ("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1), MAX_DEPTH),
    ("(" * 65_000, MAX_DEPTH),
    ("(" * 30_000 + "a" + ")" * 30_000, MAX_DEPTH),
    ("NOT " * 16_000 + "a", 4 * MAX_DEPTH),
    ("- " * 30_000 + "1 = a", 2 * MAX_DEPTH),
    ("a = " + "+(" * 10_000 + "1" + ")" * 10_000, 4 + MAX_DEPTH),
])
def test_excessive_nesting_is_refused(text, position):
    error = error_of(text)
    assert error.position == position
    assert "nested too deeply" in error.reason


@pytest.mark.timeout(60)
def test_long_arithmetic_chain_is_refused_not_recursed():
    error = error_of("a" + " + 1" * 5000 + " > 0")
    assert "nested too deeply" in error.reason
    assert error.position == 2 + 4 * (MAX_DEPTH - 1)


def _alternating(levels: int) -> str:
    text = "x = 0"
    for level in range(levels):
        joiner = "AND" if level % 2 else "OR"
        text = f"(a{level % 3} = {level % 2} {joiner} {text})"
    return text


@pytest.mark.timeout(120)
def test_deeply_nested_valid_selectors_compile_and_agree():
    selectors = [
        _alternating(MAX_DEPTH - 3),
        "NOT " * (MAX_DEPTH - 1) + "c",
        "a" + " + 1" * (MAX_DEPTH - 2) + " > 0",
        "-" + "(-" * 45 + "a" + ")" * 45 + " = 1",
        "(" * 48 + "a = 1" + ") = TRUE" * 48,
        "(" * 95 + "a = 1" + ") <> FALSE" * 95,  # conditions as values: linear, not exponential
        "(" * 95 + "a" + " IS NULL)" * 95,
        "a IN (" + ", ".join(f"'{i}'" for i in range(1000)) + ") AND " + _alternating(80),
    ]
    for text in selectors:
        agree(jms_selectors.compile(text))


def test_deep_selectors_need_little_stack():
    """Compile and evaluate with only a few hundred frames of stack left."""
    limit = sys.getrecursionlimit()
    texts = [_alternating(MAX_DEPTH - 3), "(" * MAX_DEPTH + "a = 1" + ")" * MAX_DEPTH, "NOT " * (MAX_DEPTH - 1) + "c",
             "a" + " * 1" * (MAX_DEPTH - 2) + " > 0"]

    def at_depth(depth: int) -> list:
        if depth > 0:
            return at_depth(depth - 1)
        compiled = [jms_selectors.compile(text) for text in texts]
        return [(s.evaluate(p), reference.evaluate(s.ast, p)) for s in compiled for p in PROPS]

    frames = len(__import__("inspect").stack())
    for evaluated, expected in at_depth(limit - frames - 450):
        assert evaluated is expected


# ----------------------------------------------------------------------------- breadth


@pytest.mark.timeout(60)
def test_huge_in_lists_become_sets():
    strings = jms_selectors.compile("s IN (" + ",".join(f"'{i}'" for i in range(8000)) + ")")
    assert len(strings.ast.values) == 8000
    assert len(strings.source) < 2000  # the values live in one frozenset constant, not in the source
    assert strings.matches({"s": "7999"}) is True and strings.evaluate({"s": "w"}) is False
    numbers = jms_selectors.compile("n NOT IN (" + ",".join(f"'{i}'" for i in range(7000)) + ")")
    assert numbers.evaluate({"n": "7000"}) is True and numbers.evaluate({"n": "5"}) is False
    agree(strings)
    agree(numbers)


@pytest.mark.timeout(60)
def test_pathological_like_in_a_selector():
    selector = jms_selectors.compile("s LIKE '" + "%a" * 1000 + "%b' OR s LIKE '" + "%a_" * 300 + "%c'")
    assert selector.matches({"s": "a" * 50000}) is False
    assert selector.matches({"s": "a" * 50000 + "b"}) is True


# ----------------------------------------------------------------------------- messages
SELECTORS = [
    "a = 1", "a <> 'x'", "a = TRUE", "a < 5", "a >= 1.5", "a = b", "a < b", "a + 1 = 2", "a / b > 0",
    "-a = 1", "a LIKE 'x%'", "a LIKE '%x'", "a LIKE '%x%'", "a LIKE 'x'", "a LIKE '%a_b%'", "a NOT LIKE 'x%'",
    "a IN ('x', 'y')", "a IN ('1', '2')", "a NOT IN ('x')", "a NOT IN ('1')", "a BETWEEN 1 AND 3",
    "a BETWEEN b AND 3", "a IS NULL", "a IS NOT NULL", "a", "NOT a", "(a = 1) = b", "(a + 1) IS NULL",
    "a = 1 OR b = 2 AND NOT c LIKE '%x%'", "a * a * a > 0",
]


class Hostile:
    """An object whose every comparison, hash and string method raises."""

    def _boom(self, *args):
        raise RuntimeError("hostile")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __bool__ = _boom
    __add__ = __radd__ = __mul__ = __rmul__ = __neg__ = __contains__ = __len__ = _boom


class HostileStr(str):
    def _boom(self, *args):
        raise RuntimeError("hostile")

    __eq__ = __ne__ = __hash__ = __contains__ = startswith = endswith = _boom


class HostileInt(int):
    def _boom(self, *args):
        raise RuntimeError("hostile")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __add__ = __neg__ = __mul__ = _boom


class HostileMapping(Mapping):
    def __getitem__(self, key):
        raise RuntimeError("hostile")

    def __iter__(self):
        raise RuntimeError("hostile")

    def __len__(self):
        raise RuntimeError("hostile")

    def get(self, key, default=None):
        raise RuntimeError("hostile")


HOSTILE_VALUES = [
    Hostile(), HostileStr("x"), HostileInt(1), [1], {"x": 1}, {1, 2}, b"x", bytearray(b"x"), object(), 1j,
    math.nan, math.inf, -math.inf, -0.0, 10**400, -(10**400), 2**63, "", "x" * 100_000, "\x00", "\udcff",
]


@pytest.mark.parametrize("text", SELECTORS)
def test_evaluation_never_raises(text):
    selector = jms_selectors.compile(text)
    for value in HOSTILE_VALUES:
        for props in ({"a": value}, {"a": value, "b": value, "c": value}, {"a": 1, "b": value}):
            assert selector.evaluate(props) in (True, False, None)
            assert selector.matches(props) in (True, False)
            assert reference.evaluate(selector.ast, props) in (True, False, None)
    for props in (HostileMapping(), None, 42, "a", [("a", 1)]):
        assert selector.matches(props) is False
        assert selector.evaluate(props) is None
        assert reference.evaluate(selector.ast, props) is None


def test_ordinary_odd_values_agree_with_reference():
    benign = [v for v in HOSTILE_VALUES if not isinstance(v, (Hostile, HostileStr, HostileInt))]
    for text in SELECTORS:
        selector = jms_selectors.compile(text)
        for value in benign:
            for props in ({"a": value}, {"a": value, "b": 2, "c": value}, {"a": 2, "b": value}):
                expected = reference.evaluate(selector.ast, props)
                assert selector.evaluate(props) is expected, (text, props)


def test_no_injection_through_names_or_literals():
    nasty = "__import__('os').system('false') \"\"\" ''' \\ {0} %s"
    name, literal = nasty.replace('"', '""'), nasty.replace("'", "''")
    selector = jms_selectors.compile(f"\"{name}\" = '{literal}' OR \"x\"\"); raise SystemExit #\" LIKE '%\\n%'")
    assert "__import__" not in selector.source and "SystemExit" not in selector.source
    assert selector.matches({nasty: nasty}) is True
    assert selector.matches({'x"); raise SystemExit #': "a\\nb"}) is True
    assert selector.matches({}) is False
