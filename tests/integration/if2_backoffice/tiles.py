"""Quadtree paths as an IF2 publisher computes them (IF2 6.4 and 7.3.4).

IF2 6.4: "The zoom level to use is 18 ... Find the mini-map at zoom level 18 that contains this
point. Publish on the quadtree path of the mini-map found", the path's digits 0-3 separated by
".". 7.3.4: the reference code follows gdal2tiles' GlobalMercator (lat/lon -> Spherical Mercator
metres -> pixels -> TMS tile -> the quadtree of the Google/maptiler tile, whose rows count from
the top). Written here from that description, sharing nothing with the interchange's own quadtree.
"""
from __future__ import annotations

import math

__all__ = ["ZOOM", "quadtree_path", "routing_key"]

ZOOM = 18  #: IF2 6.4
TILE_PIXELS = 256
EARTH_RADIUS_M = 6378137.0
ORIGIN_SHIFT = math.pi * EARTH_RADIUS_M  # half the Mercator world's width, in metres
INITIAL_RESOLUTION = 2 * math.pi * EARTH_RADIUS_M / TILE_PIXELS  # metres per pixel at zoom 0


def _tms_tile(lat: float, lon: float, zoom: int) -> tuple[int, int]:
    mx = lon * ORIGIN_SHIFT / 180.0
    my = math.log(math.tan((90.0 + lat) * math.pi / 360.0)) / (math.pi / 180.0) * ORIGIN_SHIFT / 180.0
    resolution = INITIAL_RESOLUTION / 2 ** zoom
    px, py = (mx + ORIGIN_SHIFT) / resolution, (my + ORIGIN_SHIFT) / resolution
    return int(math.ceil(px / TILE_PIXELS) - 1), int(math.ceil(py / TILE_PIXELS) - 1)


def quadtree_path(lat: float, lon: float, zoom: int = ZOOM) -> str:
    """The digits of the tile of ``zoom`` holding (lat, lon), without separators."""
    tx, ty = _tms_tile(lat, lon, zoom)
    ty = (2 ** zoom - 1) - ty  # TMS rows count from the bottom, the quadtree's from the top
    digits = []
    for level in range(zoom, 0, -1):
        mask = 1 << (level - 1)
        digits.append(str((1 if tx & mask else 0) + (2 if ty & mask else 0)))
    return "".join(digits)


def routing_key(message_type: str, version: str, provider: str, subtype: str, lat: float, lon: float) -> str:
    """IF2 6.4: ``<message type>.<message version>.<provider>.<subtype id>.{quadtree path}``, the
    version's periods written as "_", no "." inside a word."""
    words = [message_type, version.replace(".", "_"), provider, subtype]
    if any("." in word or not word for word in words):
        raise ValueError(f"routing key words must be non-empty and without '.': {words}")
    return ".".join([*words, *quadtree_path(lat, lon)])
