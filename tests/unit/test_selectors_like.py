"""IP_066: LIKE pattern matching (quadTree filters), checked against a brute-force oracle."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jms_selectors.like import LikePatternError, compile_like


def oracle(pattern: str, escape: str | None, value: str) -> bool:
    """Dynamic programming over (pattern item, value position): obviously correct, O(n*m)."""
    items: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape:
            items.append(("lit", pattern[i + 1]))
            i += 2
            continue
        items.append(("run", "") if ch == "%" else ("one", "") if ch == "_" else ("lit", ch))
        i += 1
    reachable = {0}
    for kind, ch in items:
        following: set[int] = set()
        for pos in reachable:
            if kind == "run":
                following.update(range(pos, len(value) + 1))
            elif pos < len(value) and (kind == "one" or value[pos] == ch):
                following.add(pos + 1)
        reachable = following
    return len(value) in reachable


@pytest.mark.parametrize("pattern,kind,literal", [
    ("abc", "exact", "abc"), ("", "exact", ""), ("abc%", "prefix", "abc"), ("%abc", "suffix", "abc"),
    ("%abc%", "contains", "abc"), ("%%abc%%%", "contains", "abc"), ("%", "any", ""), ("%%%", "any", ""),
    ("a_c", "general", ""), ("a%c", "general", ""), ("%a%c%", "general", ""), ("_%", "general", ""),
    (",1202021%", "prefix", ",1202021"), ("%,1202021%", "contains", ",1202021"),
])
def test_pattern_kinds(pattern, kind, literal):
    compiled = compile_like(pattern)
    assert (compiled.kind, compiled.literal) == (kind, literal)


@pytest.mark.parametrize("pattern,escape,kind,literal", [
    ("a!%", "!", "exact", "a%"), ("!%%", "!", "prefix", "%"), ("%!_", "!", "suffix", "_"),
    ("%!!%", "!", "contains", "!"), ("%%", "%", "exact", "%"), ("x%%", "%", "exact", "x%"),
    ("x%%_", "%", "general", ""),
])
def test_escaped_pattern_kinds(pattern, escape, kind, literal):
    compiled = compile_like(pattern, escape)
    assert (compiled.kind, compiled.literal) == (kind, literal)


@pytest.mark.parametrize("pattern,escape", [("a!", "!"), ("!a", "!"), ("x", "ab"), ("x", ""), ("%", "%")])
def test_invalid_patterns(pattern, escape):
    with pytest.raises(LikePatternError):
        compile_like(pattern, escape)


@pytest.mark.parametrize("pattern,value,expected", [
    ("a%b%c", "abc", True), ("a%b%c", "aXbYc", True), ("a%b%c", "acb", False), ("a%a", "a", False),
    ("a%a", "aa", True), ("%aa%aa%", "aaa", False), ("%aa%aa%", "aaaa", True), ("_%_", "a", False),
    ("_%_", "ab", True), ("%a_b%", "xa\nbx", True), ("%a_b%", "ab", False), ("%ab_", "abab", False),
    ("%ab_", "abxabc", True), ("a%bc%bc", "abcbc", True), ("a%bc%bc", "abc", False), ("%_a%", "a", False),
    ("%.%", "a.b", True), ("%.%", "ab", False), ("%[a]%", "x[a]y", True), ("%[a]%", "a", False),
])
def test_general_matches(pattern, value, expected):
    assert compile_like(pattern).matches(value) is expected
    assert oracle(pattern, None, value) is expected


_PATTERN = st.text(alphabet="ab%_", max_size=8)
_VALUE = st.text(alphabet="ab\n", max_size=10)


@settings(max_examples=500, deadline=None)
@given(_PATTERN, _VALUE)
@example("%a%a%b", "aaaa")
@example("a%", "")
@example("%_%", "")
def test_matches_oracle(pattern, value):
    assert compile_like(pattern).matches(value) is oracle(pattern, None, value)


_ESCAPED_PATTERN = st.lists(st.sampled_from(["a", "b", "%", "_", "!%", "!_", "!!"]), max_size=6).map("".join)


@settings(max_examples=300, deadline=None)
@given(_ESCAPED_PATTERN, st.text(alphabet="ab%_!", max_size=8))
def test_escaped_matches_oracle(pattern, value):
    assert compile_like(pattern, "!").matches(value) is oracle(pattern, "!", value)


_A = "a" * 20000


@pytest.mark.timeout(30)
@pytest.mark.parametrize("pattern,value,expected", [
    ("%a" * 30 + "%b", _A, False),
    ("%a" * 30 + "%b", _A + "b", True),
    ("%a" * 30 + "b", _A, False),
    ("%a" * 30 + "%c%b", _A + "b", False),
    ("%a_" * 30 + "%c%b", _A + "b", False),
    ("%a_" * 30 + "%b", _A + "b", True),
    ("%" + "_" * 40 + "b", _A, False),
    ("%" + "a" * 100 + "b%", _A, False),
    ("%" + "a" * 100 + "b%", _A + "b", True),
    ("_%" * 200 + "b", _A, False),
    ("%_a" * 200 + "%b", _A + "b", True),
    ("%aaaaaaaaaaaaaaaaaaaaab%", "a" * 100000, False),
    ("%" + "a_" * 50 + "c%", "ab" * 10000, False),
])
def test_pathological_patterns_are_fast(pattern, value, expected):
    assert compile_like(pattern).matches(value) is expected
