"""quadtree.format_property / parse_property: the ",t1,t2," quadTree application property."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quadtree import format_property, parse_property

tiles_strategy = st.lists(st.text(alphabet="0123", min_size=1, max_size=30), min_size=1, max_size=20)


@pytest.mark.parametrize(
    ("tiles", "text"),
    [
        (["202320120232120101"], ",202320120232120101,"),
        (
            ["202320120232120101", "202320120232120102", "202320120232120103"],
            ",202320120232120101,202320120232120102,202320120232120103,",
        ),
        (["0"], ",0,"),
        (["3", "0", "3"], ",3,0,3,"),  # order and repetitions are kept as given
        (("120202130121133020", "1202021301211"), ",120202130121133020,1202021301211,"),
    ],
)
def test_format_and_parse(tiles: list[str], text: str) -> None:
    assert format_property(tiles) == text
    assert parse_property(text) == list(tiles)


def test_format_accepts_any_iterable() -> None:
    assert format_property(t for t in ["01", "23"]) == ",01,23,"


@pytest.mark.parametrize(
    ("tiles", "match"),
    [
        ([], "at least one tile"),
        ([""], "tile 0 is empty"),
        (["01", ""], "tile 1 is empty"),
        (["014"], "'4'"),
        (["01", "0 1"], "tile 1"),
        (["0,1"], "','"),
        ([12], "must be a string"),
        ([None], "must be a string"),
        ("0123", "not a single string"),
    ],
)
def test_format_rejects(tiles: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        format_property(tiles)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "must start with ','"),
        (",", "holds no tile"),
        (",,", "tile 0 is empty"),
        (",,,", "tile 0 is empty"),
        (",01,,23,", "tile 1 is empty"),
        (",01,23,,", "tile 2 is empty"),
        ("01,", "must start with ','"),
        (",01", "must end with ','"),
        ("01", "must start with ','"),
        (",014,", "'4'"),
        (",01,2a,", "tile 1"),
        (", 01,", "' '"),
        (",01 ,", "' '"),
        (",01;23,", "';'"),
        (",-1,", "'-'"),
        (None, "must be a string"),
        (b",01,", "must be a string"),
    ],
)
def test_parse_rejects_malformed(text: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_property(text)  # type: ignore[arg-type]


@given(tiles_strategy)
def test_round_trip(tiles: list[str]) -> None:
    text = format_property(tiles)
    assert text.startswith(",") and text.endswith(",")
    assert parse_property(text) == tiles


@given(st.text(alphabet="0123,x ", max_size=20))
def test_parse_either_round_trips_or_raises(text: str) -> None:
    try:
        tiles = parse_property(text)
    except ValueError:
        return
    assert format_property(tiles) == text
