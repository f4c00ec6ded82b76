"""quadtree.merge_tiles / selector_for_tiles: IP_066 quadTree LIKE selectors."""
from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quadtree import cover_circle, format_property, merge_tiles, selector_for_tiles


@pytest.mark.parametrize(
    ("tiles", "merged"),
    [
        (["031333110"], ["031333110"]),
        (["031333112", "031333110", "031333111"], ["031333110", "031333111", "031333112"]),
        (["12", "12"], ["12"]),
        (["12", "123", "1230", "120"], ["12"]),  # descendants of a present tile are dropped
        (["120", "121", "122", "123"], ["12"]),  # four siblings -> parent
        (["1200", "1201", "1202", "1203", "121", "122", "123"], ["12"]),  # repeatedly upwards
        (
            [a + b for a in "0123" for b in "0123"],
            [""],
        ),  # all of zoom 2 -> the world
        (["0", "1", "2", "3"], [""]),
        (["", "0123"], [""]),
        (["120", "121", "122", "13"], ["120", "121", "122", "13"]),
        (["1230", "1231", "1232", "1233", "120", "121", "122"], ["12"]),
        (["1230", "1231", "1232", "120", "121", "122"], ["120", "121", "122", "1230", "1231", "1232"]),
        (["2", "10", "11", "12", "13"], ["1", "2"]),
    ],
)
def test_merge_tiles(tiles: list[str], merged: list[str]) -> None:
    assert merge_tiles(tiles) == merged
    assert merge_tiles(reversed(tiles)) == merged


def test_selector_matches_the_ip066_example() -> None:
    assert selector_for_tiles(["031333110", "031333111", "031333112"]) == (
        "quadTree LIKE '%,031333110%' OR quadTree LIKE '%,031333111%' OR "
        "quadTree LIKE '%,031333112%'"
    )


def test_selector_merges_first() -> None:
    assert selector_for_tiles(["1202", "120", "1203"]) == "quadTree LIKE '%,120%'"
    assert selector_for_tiles(["120", "121", "122", "123"]) == "quadTree LIKE '%,12%'"


def test_selector_for_the_world_matches_everything() -> None:
    assert selector_for_tiles([""]) == "quadTree LIKE '%,%'"
    assert selector_for_tiles(["0", "1", "2", "3"]) == "quadTree LIKE '%,%'"


@pytest.mark.parametrize(
    ("tiles", "match"),
    [
        ([], "at least one tile"),
        (["014"], "'4'"),
        (["01", "x"], "'x'"),
        ([None], "must be a string"),
        ("0123", "not a single string"),
    ],
)
def test_bad_input(tiles: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        merge_tiles(tiles)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=match):
        selector_for_tiles(tiles)  # type: ignore[arg-type]


def like_matches(selector: str, prop: str) -> bool:
    """Evaluate the OR of ``quadTree LIKE '%,t%'`` terms on a property value."""
    return any(f",{t}" in prop for t in re.findall(r"LIKE '%,([0-3]*)%'", selector))


def split(tiles: list[str], depth: int) -> list[str]:
    """Replace every tile by its descendants ``depth`` levels down."""
    for _ in range(depth):
        tiles = [t + d for t in tiles for d in "0123"]
    return tiles


tile_sets = st.lists(
    st.tuples(st.text(alphabet="0123", max_size=4), st.integers(0, 2)), min_size=1, max_size=8
).map(lambda pairs: [t for tile, depth in pairs for t in split([tile], depth)])


@given(tile_sets, st.lists(st.text(alphabet="0123", min_size=6, max_size=10), min_size=1, max_size=5))
def test_merged_selector_is_equivalent(tiles: list[str], message_tiles: list[str]) -> None:
    merged = merge_tiles(tiles)
    assert merged == sorted(set(merged))
    # No tile of the result is an ancestor of another, and no four siblings remain.
    for tile in merged:
        assert not any(other != tile and tile.startswith(other) for other in merged)
    parents = [t[:-1] for t in merged if t]
    assert all(parents.count(p) < 4 for p in parents)
    # For messages whose tiles are at least as deep as the selector's (zoom 18
    # reference tiles), matching is unchanged by the merge.
    prop = format_property(message_tiles)
    unmerged = " OR ".join(f"quadTree LIKE '%,{t}%'" for t in tiles)
    assert like_matches(selector_for_tiles(tiles), prop) == like_matches(unmerged, prop)


def test_merged_parent_also_matches_a_message_with_the_parent_tile() -> None:
    """A message tagged with the coarser area tile 12 overlaps all four children."""
    siblings = ["120", "121", "122", "123"]
    unmerged = " OR ".join(f"quadTree LIKE '%,{t}%'" for t in siblings)
    assert like_matches(selector_for_tiles(siblings), ",12,")
    assert not like_matches(unmerged, ",12,")


def test_selector_of_a_destination_area_matches_messages_inside() -> None:
    area = cover_circle(51.485992, 4.735311, 5_000, 13)
    selector = selector_for_tiles(area)
    assert like_matches(selector, ",120202130121133020,")
    assert not like_matches(selector, ",102231321102200323,")
