"""Tile sets covering areas: destination / relevance areas (IP_112, IP_113).

Both functions return every tile at the requested zoom whose closed rectangle intersects the area
(touching counts) and no other tile, sorted. :func:`cover_circle` is exact on a sphere of radius
:data:`EARTH_RADIUS_M` (up to 0.56 % off WGS84 ellipsoid distances: add 0.6 % to the radius for a
guaranteed cover); :func:`cover_polygon` is exact in Web-Mercator tile space (edges straight in the
Mercator plane). More than :data:`MAX_TILES` tiles: ValueError. The IP_112/IP_113 tile-count notes
hold only south of about 66.4 / 65.8 N. Details and counts by latitude: docs/quadtree.md.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from numbers import Real

from quadtree.tiles import (
    MAX_LATITUDE,
    check_latitude,
    check_longitude,
    check_zoom,
    from_latlon,
    mercator_xy,
    tile_bounds_xy,
    tile_from_xy,
)

#: Mean Earth radius (IUGG R1) in metres, the sphere used by :func:`cover_circle`.
EARTH_RADIUS_M = 6_371_008.8

#: Largest number of tiles a cover may return.
MAX_TILES = 1_000_000


# --------------------------------------------------------------------------- circle


def central_angle(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle angle in radians between two points given in radians.

    Uses the atan2 (Vincenty) form, which is accurate at every distance.
    """
    dlon = lon2 - lon1
    sin1, cos1 = math.sin(lat1), math.cos(lat1)
    sin2, cos2 = math.sin(lat2), math.cos(lat2)
    cos_dlon = math.cos(dlon)
    a = cos2 * math.sin(dlon)
    b = cos1 * sin2 - sin1 * cos2 * cos_dlon
    return math.atan2(math.hypot(a, b), sin1 * sin2 + cos1 * cos2 * cos_dlon)


def _wrapped_delta(a: float, b: float) -> float:
    """Absolute longitude difference in degrees, wrapped into [0, 180]."""
    d = abs(a - b) % 360.0
    return min(d, 360.0 - d)


def distance_to_rectangle_m(
    lat: float, lon: float, south: float, west: float, north: float, east: float
) -> float:
    """Smallest great-circle distance in metres from (lat, lon) to a lat/lon rectangle.

    0 inside.  If the point's meridian crosses the rectangle, the nearest point is on
    that meridian at the clamped latitude.  Otherwise it lies on the edge meridian
    with the smaller longitude difference; on that meridian the distance is smallest
    at the foot of the perpendicular (latitude ``atan2(sin lat, cos lat cos dlon)``)
    when the foot is on the edge segment, else at one of the segment's ends.
    """
    if (lon - west) % 360.0 <= east - west:
        nearest = min(max(lat, south), north)
        return math.radians(abs(lat - nearest)) * EARTH_RADIUS_M
    dlon = math.radians(min(_wrapped_delta(lon, west), _wrapped_delta(lon, east)))
    phi = math.radians(lat)
    s, n = math.radians(south), math.radians(north)
    candidates = [s, n]
    foot = math.atan2(math.sin(phi), math.cos(phi) * math.cos(dlon))
    if s <= foot <= n:
        candidates.append(foot)
    return min(central_angle(phi, 0.0, c, dlon) for c in candidates) * EARTH_RADIUS_M


def _check_radius(radius_m: object) -> float:
    if isinstance(radius_m, bool) or not isinstance(radius_m, Real):
        raise ValueError(f"radius must be a number of metres, got {radius_m!r}")
    radius = float(radius_m)
    if not math.isfinite(radius) or radius < 0:
        raise ValueError(f"radius must be finite and >= 0 metres, got {radius!r}")
    return radius


def _row_range(lat: float, angle: float, zoom: int) -> range:
    """Rows of the circle's latitude extent, widened by one row each side."""
    n = 1 << zoom
    north = min(lat + math.degrees(angle), MAX_LATITUDE)
    south = max(lat - math.degrees(angle), -MAX_LATITUDE)
    top = math.floor(mercator_xy(north, 0.0)[1] * n) - 1
    bottom = math.floor(mercator_xy(south, 0.0)[1] * n) + 1
    return range(max(top, 0), min(bottom, n - 1) + 1)


def _last_reaching(reaches: Callable[[int], bool], hi: int) -> int:
    """Largest k in 0..hi with ``reaches(k)``, given reaches(0) and monotonicity."""
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if reaches(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _row_span(
    lat: float, lon: float, radius: float, iy: int, centre_ix: int, zoom: int
) -> tuple[int, int] | None:
    """Columns of row ``iy`` reached by the circle, as (first, count) with wrap-around.

    The circle's cross-section at any latitude is a longitude interval centred on
    the centre's meridian, so the reached columns are contiguous around
    ``centre_ix``, and the row is empty unless ``centre_ix`` itself is reached.
    Splitting the ring of columns at the antipodal meridian leaves an eastward and
    a westward run along which the distance only grows, so binary search finds
    each run's reach.
    """
    n = 1 << zoom

    def reaches(ix: int) -> bool:
        return distance_to_rectangle_m(lat, lon, *tile_bounds_xy(ix % n, iy, zoom)) <= radius

    if not reaches(centre_ix):
        return None
    antipode = lon - 180.0 if lon >= 0 else lon + 180.0
    east_run = (_column(antipode, n) - centre_ix) % n  # offsets 0..east_run, antipode included
    east = _last_reaching(lambda k: reaches(centre_ix + k), east_run)
    west = _last_reaching(lambda k: reaches(centre_ix - k), n - 1 - east_run)
    return (centre_ix - west) % n, west + 1 + east


def _column(lon: float, n: int) -> int:
    return min(math.floor((0.5 + lon / 360.0) * n), n - 1)


def cover_circle(lat: float, lon: float, radius_m: float, zoom: int) -> list[str]:
    """IP_112/IP_113: tiles at ``zoom`` intersecting a circle (destination area).

    The circle is every point within ``radius_m`` metres (great-circle distance on
    the sphere of :data:`EARTH_RADIUS_M`) of (lat, lon).  The centre must be a valid
    quadtree position (see :func:`quadtree.from_latlon`); the circle itself may
    extend past the antimeridian and the +-85.05 degree edges.  A radius of 0 gives
    the single tile holding the centre.  Result sorted; more than :data:`MAX_TILES`
    tiles -> ValueError (detected after O(log) work per row, rows taken from the
    centre outwards).
    """
    check_zoom(zoom)
    lat = check_latitude(lat)
    lon = check_longitude(lon)
    radius = _check_radius(radius_m)
    if radius == 0:
        return [from_latlon(lat, lon, zoom)]
    n = 1 << zoom
    rows = _row_range(lat, radius / EARTH_RADIUS_M, zoom)
    if len(rows) > MAX_TILES + 2:
        raise ValueError(_too_many(zoom))
    centre_ix = _column(lon, n)
    centre_iy = min(max(math.floor(mercator_xy(lat, lon)[1] * n), 0), n - 1)
    spans: list[tuple[int, int, int]] = []
    total = 0
    for iy in sorted(rows, key=lambda row: abs(row - centre_iy)):
        span = _row_span(lat, lon, radius, iy, centre_ix, zoom)
        if span is None:
            continue
        total += span[1]
        if total > MAX_TILES:
            raise ValueError(_too_many(zoom))
        spans.append((iy, *span))
    return sorted(
        tile_from_xy((first + k) % n, iy, zoom) for iy, first, count in spans for k in range(count)
    )


def _too_many(zoom: int) -> str:
    return f"the area needs more than {MAX_TILES} tiles at zoom {zoom}; use a lower zoom"


# --------------------------------------------------------------------------- polygon


def _polygon_vertices(points: Sequence[tuple[float, float]], zoom: int) -> list[tuple[float, float]]:
    """Validated (lat, lon) points -> tile-space (X, Y) vertices, closing point dropped."""
    if isinstance(points, (str, bytes)):
        raise ValueError("polygon points must be a sequence of (lat, lon) pairs")
    try:
        pairs = [tuple(p) for p in points]
    except TypeError as exc:
        raise ValueError("polygon points must be a sequence of (lat, lon) pairs") from exc
    for index, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(f"polygon point {index} is not a (lat, lon) pair: {pair!r}")
    coords = [(check_latitude(lat), check_longitude(lon)) for lat, lon in pairs]
    if len(coords) > 1 and coords[0] == coords[-1]:
        coords.pop()
    if len(set(coords)) < 3:
        raise ValueError("a polygon needs at least 3 distinct points")
    scale = float(1 << zoom)
    vertices = []
    for lat, lon in coords:
        x, y = mercator_xy(lat, lon)
        # +-85.05112878 projects a hair outside the world; clamp onto its edge.
        vertices.append((x * scale, min(max(y, 0.0), 1.0) * scale))
    return vertices


def _edge_spans_in_strip(
    edges: Sequence[tuple[float, float, float, float]], top: float, bottom: float
) -> Iterator[tuple[float, float]]:
    """X extent of each edge's part inside the strip ``top <= Y <= bottom``."""
    for x1, y1, x2, y2 in edges:
        if max(y1, y2) < top or min(y1, y2) > bottom:
            continue
        if y1 == y2:
            yield min(x1, x2), max(x1, x2)
            continue
        ta = (top - y1) / (y2 - y1)
        tb = (bottom - y1) / (y2 - y1)
        t0 = max(0.0, min(ta, tb))
        t1 = min(1.0, max(ta, tb))
        xa = x1 + t0 * (x2 - x1)
        xb = x1 + t1 * (x2 - x1)
        yield min(xa, xb), max(xa, xb)


def _inside_spans_above(
    edges: Sequence[tuple[float, float, float, float]], y: float
) -> Iterator[tuple[float, float]]:
    """Even-odd interior intervals of the horizontal line infinitesimally above ``y``.

    "Above" is toward smaller Y (northwards); the intervals are their limits at ``y``.
    """
    crossings = sorted(
        x1 + (y - y1) / (y2 - y1) * (x2 - x1)
        for x1, y1, x2, y2 in edges
        if (y1 >= y) != (y2 >= y)
    )
    for k in range(0, len(crossings) - 1, 2):
        yield crossings[k], crossings[k + 1]


def _row_column_ranges(
    edges: Sequence[tuple[float, float, float, float]], iy: int, n: int
) -> list[tuple[int, int]]:
    """Merged inclusive column ranges of row ``iy`` that the polygon touches.

    A tile of the row meets the polygon iff its X range meets the X projection of
    the polygon's part inside the row's strip.  From any point of that part, going
    southwards inside it ends on a polygon edge or on the strip's south border
    line, so the projection is covered by the edge pieces inside the strip plus
    the polygon's interior intervals just above the south border line.
    """
    top, bottom = float(iy), float(iy + 1)
    spans = list(_edge_spans_in_strip(edges, top, bottom))
    spans += _inside_spans_above(edges, bottom)
    ranges = sorted(
        (max(math.ceil(a) - 1, 0), min(math.floor(b), n - 1)) for a, b in spans
    )
    merged: list[tuple[int, int]] = []
    for first, last in ranges:
        if first > last:
            continue
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def cover_polygon(points: Sequence[tuple[float, float]], zoom: int) -> list[str]:
    """IP_112: tiles at ``zoom`` intersecting a polygon (relevance / destination area).

    ``points`` are the (lat, lon) vertices of a simple polygon (at least 3 distinct
    points; repeating the first point at the end is optional).  Edges are straight
    lines in Web-Mercator, so a polygon must not cross the antimeridian (split it).
    Tiles touching the polygon's boundary count as intersecting.  Only the rows of
    the polygon's extent are scanned and each row costs O(edges).  Result sorted;
    more than :data:`MAX_TILES` tiles -> ValueError.
    """
    check_zoom(zoom)
    vertices = _polygon_vertices(points, zoom)
    n = 1 << zoom
    edges = [
        (*vertices[k], *vertices[(k + 1) % len(vertices)]) for k in range(len(vertices))
    ]
    ys = [y for _, y in vertices]
    rows = range(max(math.ceil(min(ys)) - 1, 0), min(math.floor(max(ys)), n - 1) + 1)
    if len(rows) > MAX_TILES:
        raise ValueError(_too_many(zoom))
    cells: list[tuple[int, int]] = []
    count = 0
    for iy in rows:
        for first, last in _row_column_ranges(edges, iy, n):
            count += last - first + 1
            if count > MAX_TILES:
                raise ValueError(_too_many(zoom))
            cells.extend((ix, iy) for ix in range(first, last + 1))
    return sorted(tile_from_xy(ix, iy, zoom) for ix, iy in cells)
