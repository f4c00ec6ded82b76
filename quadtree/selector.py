"""Selector filters on the ``quadTree`` property (IP_066 example, IP_039).

``quadTree LIKE '%,<tile>%'`` matches a message whose property holds ``<tile>``
or any of its descendants, so a tile makes its descendants redundant and four
sibling tiles can be replaced by their parent.
"""
from __future__ import annotations

from collections.abc import Iterable

from quadtree.tiles import check_tile


def merge_tiles(tiles: Iterable[str]) -> list[str]:
    """Smallest equivalent tile set, sorted.

    Duplicates and tiles whose ancestor is present are dropped; four siblings are
    replaced by their parent, repeatedly up the tree.  ``""`` (the zoom-0 tile,
    the whole world) is allowed and absorbs everything.  An empty input or an
    invalid tile raises ValueError.
    """
    if isinstance(tiles, (str, bytes)):
        raise ValueError("merge_tiles expects a list of tiles, not a single string")
    unique = {check_tile(tile, max_zoom=None) for tile in tiles}
    if not unique:
        raise ValueError("at least one tile is needed")
    kept = {t for t in unique if not any(t[:k] in unique for k in range(len(t)))}
    for length in range(max(map(len, kept)), 0, -1):
        level = [t for t in kept if len(t) == length]
        by_parent: dict[str, int] = {}
        for tile in level:
            by_parent[tile[:-1]] = by_parent.get(tile[:-1], 0) + 1
        for parent, count in by_parent.items():
            if count == 4:
                kept.difference_update(parent + digit for digit in "0123")
                kept.add(parent)
    return sorted(kept)


def selector_for_tiles(tiles: Iterable[str]) -> str:
    """IP_066: ``quadTree LIKE '%,t1%' OR quadTree LIKE '%,t2%'`` for the merged tiles.

    The tiles go through :func:`merge_tiles` first; the zoom-0 tile ``""`` gives
    ``quadTree LIKE '%,%'``, which matches every message.
    """
    return " OR ".join(f"quadTree LIKE '%,{tile}%'" for tile in merge_tiles(tiles))
