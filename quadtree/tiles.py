"""Quadtree tiles of the Web-Mercator projection (C-Roads IP profile, appendix A).

A tile is a string of the digits ``0``-``3``; its length is the zoom level
(IP_037).  At zoom ``z`` the world is ``2**z`` columns (``ix``, west to east)
by ``2**z`` rows (``iy``, north to south); digit ``i`` of the tile is
``bit(ix) + 2 * bit(iy)``, most significant bit first (0 = NW, 1 = NE, 2 = SW,
3 = SE).  The empty string is the zoom-0 tile: the whole world.

Tiles are half-open in tile space: a point on a tile edge belongs to the tile
to its east / south, exactly as ``floor`` in the appendix A code does.  The one
exception is the far east and far south edge of the world (longitude 180,
latitude -85.05112878), which belong to the last column / row.
"""
from __future__ import annotations

import math
from numbers import Real

#: Latitude limit of the quadtree (appendix A: "latitudes over 85.05 degrees are
#: not addressed"); the exact Mercator limit is 85.0511287798..., this rounded
#: value is accepted and clamped into the first / last row.
MAX_LATITUDE = 85.05112878

#: Deepest zoom level supported (tile indices stay exact in a float).
MAX_ZOOM = 30

_DIGITS = frozenset("0123")


def check_zoom(zoom: object) -> int:
    """Return ``zoom`` if it is an ``int`` (not a ``bool``) in 0..MAX_ZOOM, else raise ValueError."""
    if isinstance(zoom, bool) or not isinstance(zoom, int):
        raise ValueError(f"zoom must be an integer, got {zoom!r}")
    if not 0 <= zoom <= MAX_ZOOM:
        raise ValueError(f"zoom must be between 0 and {MAX_ZOOM}, got {zoom}")
    return zoom


def _check_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {number!r}")
    return number


def check_latitude(lat: object) -> float:
    """Return ``lat`` as a float if it lies within +-MAX_LATITUDE degrees, else raise ValueError."""
    value = _check_real("latitude", lat)
    if not -MAX_LATITUDE <= value <= MAX_LATITUDE:
        raise ValueError(
            f"latitude {value!r} is outside the quadtree range "
            f"[-{MAX_LATITUDE}, {MAX_LATITUDE}] degrees"
        )
    return value


def check_longitude(lon: object) -> float:
    """Return ``lon`` as a float if it lies within [-180, 180] degrees, else raise ValueError."""
    value = _check_real("longitude", lon)
    if not -180.0 <= value <= 180.0:
        raise ValueError(f"longitude {value!r} is outside [-180, 180] degrees")
    return value


def check_tile(tile: object, *, max_zoom: int | None = MAX_ZOOM) -> str:
    """Return ``tile`` if it is a string of the digits 0-3 (at most ``max_zoom`` long), else raise ValueError."""
    if not isinstance(tile, str):
        raise ValueError(f"a quadtree tile must be a string, got {tile!r}")
    if max_zoom is not None and len(tile) > max_zoom:
        raise ValueError(f"quadtree tile {tile!r} is longer than zoom {max_zoom}")
    bad = sorted(set(tile) - _DIGITS)
    if bad:
        raise ValueError(
            f"quadtree tile {tile!r} contains {', '.join(map(repr, bad))}; only the digits 0-3 are allowed"
        )
    return tile


def mercator_xy(lat: float, lon: float) -> tuple[float, float]:
    """Appendix A projection: (x, y) in the unit square, x eastwards, y southwards."""
    sinlat = math.sin(lat * math.pi / 180.0)
    x = 0.5 + lon / 360.0
    y = 0.5 - math.log((1.0 + sinlat) / (1.0 - sinlat)) / (4.0 * math.pi)
    return x, y


def latitude_of_y(y: float) -> float:
    """Inverse of the appendix A ``y`` formula: latitude in degrees of unit-square ``y``."""
    return math.degrees(math.atan(math.sinh(math.pi * (1.0 - 2.0 * y))))


def longitude_of_x(x: float) -> float:
    """Inverse of the appendix A ``x`` formula: longitude in degrees of unit-square ``x``."""
    return x * 360.0 - 180.0


def _index(value: float, zoom: int) -> int:
    """``floor(2**zoom * value)`` clamped into 0 .. 2**zoom - 1."""
    n = 1 << zoom
    return min(max(math.floor(n * value), 0), n - 1)


def tile_xy(lat: float, lon: float, zoom: int) -> tuple[int, int]:
    """Column and row (ix, iy) of the tile holding (lat, lon) at ``zoom``; inputs are validated."""
    check_zoom(zoom)
    x, y = mercator_xy(check_latitude(lat), check_longitude(lon))
    return _index(x, zoom), _index(y, zoom)


def tile_from_xy(ix: int, iy: int, zoom: int) -> str:
    """Appendix A digit interleaving: Qs(i) = Xs(i) + 2*Ys(i), most significant bit first."""
    check_zoom(zoom)
    n = 1 << zoom
    if not (0 <= ix < n and 0 <= iy < n):
        raise ValueError(f"tile index ({ix}, {iy}) is outside 0..{n - 1} at zoom {zoom}")
    return "".join(
        str(((ix >> bit) & 1) | (((iy >> bit) & 1) << 1)) for bit in range(zoom - 1, -1, -1)
    )


def xy_from_tile(tile: str) -> tuple[int, int, int]:
    """(ix, iy, zoom) of a tile string; the inverse of :func:`tile_from_xy`."""
    check_tile(tile)
    ix = iy = 0
    for digit in tile:
        d = ord(digit) - 48
        ix = (ix << 1) | (d & 1)
        iy = (iy << 1) | (d >> 1)
    return ix, iy, len(tile)


def from_latlon(lat: float, lon: float, zoom: int = 18) -> str:
    """IP_037/IP_038: quadtree tile of a WGS84 position, exactly as in appendix A.

    ``lat`` must lie within +-85.05112878 degrees and ``lon`` within [-180, 180];
    ``zoom`` is 0..30 (IP_038 publishes at zoom 18, the default).  Longitude 180
    and latitude -85.05112878 fall into the last column / row.
    """
    ix, iy = tile_xy(lat, lon, zoom)
    return tile_from_xy(ix, iy, zoom)


def tile_bounds_xy(ix: int, iy: int, zoom: int) -> tuple[float, float, float, float]:
    """(south, west, north, east) in degrees of the tile at column ``ix``, row ``iy``."""
    n = 1 << zoom
    west = longitude_of_x(ix / n)
    east = longitude_of_x((ix + 1) / n)
    north = latitude_of_y(iy / n)
    south = latitude_of_y((iy + 1) / n)
    return south, west, north, east


def bounds(tile: str) -> tuple[float, float, float, float]:
    """(south, west, north, east) in degrees of a tile; ``""`` is the whole world.

    The world's north / south edges are the Mercator limit +-85.0511287798 degrees.
    """
    ix, iy, zoom = xy_from_tile(tile)
    return tile_bounds_xy(ix, iy, zoom)


def parent(tile: str) -> str:
    """The tile one zoom level up (the zoom-0 tile has no parent: ValueError)."""
    check_tile(tile)
    if not tile:
        raise ValueError("the zoom-0 tile has no parent")
    return tile[:-1]


def children(tile: str) -> list[str]:
    """The four tiles one zoom level down, in digit order (NW, NE, SW, SE)."""
    check_tile(tile, max_zoom=MAX_ZOOM - 1)
    return [tile + digit for digit in "0123"]
