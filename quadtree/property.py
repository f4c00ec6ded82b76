"""The ``quadTree`` AMQP application property (IP profile Table 1, IP_038/IP_112).

The property is a comma separated list of tiles that starts and ends with a
comma, e.g. ``",202320120232120101,"`` or ``",1202,1203,"``.  The leading comma
lets a selector ``quadTree LIKE '%,<tile>%'`` match a tile and all its
descendants (IP_066).
"""
from __future__ import annotations

from collections.abc import Iterable

from quadtree.tiles import check_tile


def _check_property_tile(tile: object, position: int) -> str:
    """A property tile: a non-empty string of the digits 0-3 (any length)."""
    if isinstance(tile, str) and not tile:
        raise ValueError(f"tile {position} is empty; the quadTree property needs non-empty tiles")
    try:
        return check_tile(tile, max_zoom=None)
    except ValueError as exc:
        raise ValueError(f"tile {position}: {exc}") from None


def format_property(tiles: Iterable[str]) -> str:
    """``[t1, t2]`` -> ``",t1,t2,"``; tiles are kept in the given order.

    Every tile must be non-empty and consist of the digits 0-3; an empty list is
    refused (a message always has at least its IP_038 reference tile).
    """
    if isinstance(tiles, (str, bytes)):
        raise ValueError("format_property expects a list of tiles, not a single string")
    checked = [_check_property_tile(tile, index) for index, tile in enumerate(tiles)]
    if not checked:
        raise ValueError("the quadTree property needs at least one tile")
    return "," + ",".join(checked) + ","


def parse_property(value: object) -> list[str]:
    """``",t1,t2,"`` -> ``[t1, t2]``, refusing malformed values with a ValueError that says why.

    Refused: non-strings, a missing leading or trailing comma, the bare ``","``,
    empty tiles (``",,"``, ``",1,,2,"``) and characters other than 0-3.
    """
    if not isinstance(value, str):
        raise ValueError(f"the quadTree property must be a string, got {value!r}")
    if value == ",":
        raise ValueError("the quadTree property ',' holds no tile")
    if not value.startswith(","):
        raise ValueError(f"the quadTree property must start with ',': {value!r}")
    if not value.endswith(","):
        raise ValueError(f"the quadTree property must end with ',': {value!r}")
    tiles = value[1:-1].split(",")
    return [_check_property_tile(tile, index) for index, tile in enumerate(tiles)]
