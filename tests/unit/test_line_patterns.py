"""The regular expressions ingest runs over raw log lines (spark/line_patterns.py), with Python's ``re``
(the same syntax as Java's for these): each finds its token outside JSON strings and never inside one."""
from __future__ import annotations

import json
import re

from spark import line_patterns as P


def _tokens(text: str) -> list[tuple[str, str]]:
    return re.findall(P.KEY_TOKEN, text)


def test_key_token_gives_each_value_its_first_token_in_order() -> None:
    props = {"messageType": "DENM", "causeCode": 3, "longitude": 4.73, "big": 1e20, "on": True, "off": False,
             "none": None, "tiles": [1, 2], "odd": 'a","b":1,"c', "colon:": "x"}
    text = json.dumps(props, separators=(",", ":"))
    assert _tokens(text) == [("messageType", '"'), ("causeCode", "3"), ("longitude", "4.73"), ("big", "1e+20"),
                             ("on", "t"), ("off", "f"), ("none", "n"), ("tiles", "["), ("odd", '"'), ("colon:", '"')]
    # written with spaces (any JSON writer) the tokens are the same
    assert [t for _, t in re.findall(P.KEY_TOKEN, json.dumps(props))] == [t for _, t in _tokens(text)]


def test_key_token_matches_keys_of_an_object_inside_a_value() -> None:
    """An object of two keys inside a value adds its second key: the kinds then fall back to lookups by name
    (spark.parse._kinds compares the count with the map's)."""
    assert _tokens('{"a":{"x":1,"y":"s"},"b":2}') == [("a", "{"), ("y", '"'), ("b", "2")]
    assert _tokens('{"a":{"x":1},"b":2}') == [("a", "{"), ("b", "2")]


def _numbers(line: str) -> list[str]:
    return [n for n in re.findall(P.NUMBER_OUTSIDE_STRINGS, line) if n]


def test_exponent_numbers_are_found_outside_strings_only() -> None:
    line = ('{"bodySha256":"6e145e9990","note":"ratio:1e999,[2E+500]","x":1e400,"y":[1,-2.5E-3],'
            '"z":{"q":7e0004}}')
    assert re.search(P.NUMBER_GATE, line)
    assert _numbers(line) == ["1e400", "-2.5E-3", "7e0004"]
    # an escaped quote does not end a string: the number after it is still inside
    assert _numbers('{"s":"a\\":1e400","t":1}') == []
    # hex digits in a string never pass the gate (no ":", "[" or "," before them)
    assert not re.search(P.NUMBER_GATE, '{"bodySha256":"6e145e9990ab3e4"}')


def test_non_numbers_are_found_outside_strings_only() -> None:
    def found(line: str) -> list[str]:
        return [t for t in re.findall(P.NON_NUMBER_OUTSIDE_STRINGS, line) if t]

    assert found('{"a":NaN,"b":[1,-Infinity]}') == [":NaN,", ",-Infinity]"]
    assert found('{"a":"x:NaN,","b":"[Infinity]"}') == []


def test_lone_surrogates() -> None:
    lone = [r'"\ud800"', r'"\uDFFF x"', r'"a\udc00"', r'"\\\ud800"']
    paired = [r'"\ud83d\ude00"', r'"\\ud800"', r'"\u0041"', r'"\uD83D\uDE00"']
    assert all(re.search(P.LONE_SURROGATE, text) for text in lone)
    assert not any(re.search(P.LONE_SURROGATE, text) for text in paired)
