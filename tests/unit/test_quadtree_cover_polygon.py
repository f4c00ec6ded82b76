"""quadtree.cover_polygon: relevance / destination area tiles (IP_112), checked by brute force."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quadtree import MAX_LATITUDE, bounds, cover_polygon, from_latlon
from quadtree.tiles import latitude_of_y, longitude_of_x, mercator_xy, tile_from_xy, xy_from_tile

Point = tuple[float, float]


# ----------------------------------------------------------------- helpers (tile space)


def to_latlon(x: float, y: float, zoom: int) -> Point:
    """Tile-space (X, Y) at ``zoom`` -> (lat, lon)."""
    n = 1 << zoom
    return latitude_of_y(y / n), longitude_of_x(x / n)


def to_tile_space(points: list[Point], zoom: int) -> list[Point]:
    n = 1 << zoom
    return [(x * n, min(max(y, 0.0), 1.0) * n) for x, y in (mercator_xy(lat, lon) for lat, lon in points)]


def point_in_polygon(px: float, py: float, poly: list[Point]) -> bool:
    """Even-odd ray casting."""
    result = False
    for (x1, y1), (x2, y2) in zip(poly, poly[1:] + poly[:1]):
        if (y1 > py) != (y2 > py) and px < x1 + (py - y1) * (x2 - x1) / (y2 - y1):
            result = not result
    return result


def orientation(a: Point, b: Point, c: Point) -> float:
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])


def on_segment(a: Point, b: Point, p: Point) -> bool:
    return min(a[0], b[0]) <= p[0] <= max(a[0], b[0]) and min(a[1], b[1]) <= p[1] <= max(a[1], b[1])


def segments_intersect(a: Point, b: Point, c: Point, d: Point) -> bool:
    o1, o2, o3, o4 = orientation(a, b, c), orientation(a, b, d), orientation(c, d, a), orientation(c, d, b)
    if ((o1 > 0 and o2 < 0) or (o1 < 0 and o2 > 0)) and ((o3 > 0 and o4 < 0) or (o3 < 0 and o4 > 0)):
        return True
    return (
        (o1 == 0 and on_segment(a, b, c))
        or (o2 == 0 and on_segment(a, b, d))
        or (o3 == 0 and on_segment(c, d, a))
        or (o4 == 0 and on_segment(c, d, b))
    )


def square_meets_polygon(ix: int, iy: int, poly: list[Point]) -> bool:
    """Closed unit square vs polygon: corner inside, vertex inside, or edges crossing."""
    corners = [(ix, iy), (ix + 1, iy), (ix + 1, iy + 1), (ix, iy + 1)]
    if any(point_in_polygon(cx, cy, poly) for cx, cy in corners):
        return True
    if any(ix <= x <= ix + 1 and iy <= y <= iy + 1 for x, y in poly):
        return True
    square_edges = list(zip(corners, corners[1:] + corners[:1]))
    return any(
        segments_intersect(a, b, c, d)
        for a, b in zip(poly, poly[1:] + poly[:1])
        for c, d in square_edges
    )


def brute_cover(points: list[Point], zoom: int) -> list[str]:
    poly = to_tile_space(points, zoom)
    n = 1 << zoom
    xs, ys = [p[0] for p in poly], [p[1] for p in poly]
    return sorted(
        tile_from_xy(ix, iy, zoom)
        for iy in range(max(math.floor(min(ys)) - 1, 0), min(math.floor(max(ys)) + 1, n - 1) + 1)
        for ix in range(max(math.floor(min(xs)) - 1, 0), min(math.floor(max(xs)) + 1, n - 1) + 1)
        if square_meets_polygon(ix, iy, poly)
    )


def check_polygon(points: list[Point], zoom: int) -> list[str]:
    result = cover_polygon(points, zoom)
    assert result == brute_cover(points, zoom)
    # Points sampled inside the polygon and on its vertices fall into returned tiles.
    poly = to_tile_space(points, zoom)
    xs, ys = [p[0] for p in poly], [p[1] for p in poly]
    rng = random.Random(repr(points))
    for lat, lon in points:
        assert from_latlon(lat, lon, zoom) in result
    for _ in range(300):
        x, y = rng.uniform(min(xs), max(xs)), rng.uniform(min(ys), max(ys))
        if point_in_polygon(x, y, poly):
            assert from_latlon(*to_latlon(x, y, zoom), zoom) in result
    return result


def star_polygon(rng: random.Random, lat: float, lon: float, size: float, corners: int) -> list[Point]:
    """A random star-shaped (so simple, usually concave) polygon around (lat, lon)."""
    angles = sorted(rng.uniform(0, 2 * math.pi) for _ in range(corners))
    points = []
    for angle in angles:
        r = size * rng.uniform(0.2, 1.0)
        points.append(
            (
                max(min(lat + r * math.sin(angle), MAX_LATITUDE), -MAX_LATITUDE),
                max(min(lon + r * math.cos(angle) * 1.5, 180.0), -180.0),
            )
        )
    return points


# ----------------------------------------------------------------- cases


def test_small_triangle_inside_one_tile() -> None:
    south, west, north, east = bounds("120202130121133020")
    lat = lambda f: south + (north - south) * f  # noqa: E731
    lon = lambda f: west + (east - west) * f  # noqa: E731
    triangle = [(lat(0.2), lon(0.2)), (lat(0.8), lon(0.3)), (lat(0.5), lon(0.9))]
    assert cover_polygon(triangle, 18) == ["120202130121133020"]
    assert cover_polygon(triangle, 13) == ["1202021301211"]


def test_rectangle_between_tile_centres() -> None:
    zoom = 12
    corners = [(1000.5, 700.5), (1004.5, 700.5), (1004.5, 703.5), (1000.5, 703.5)]
    result = check_polygon([to_latlon(x, y, zoom) for x, y in corners], zoom)
    assert result == sorted(
        tile_from_xy(ix, iy, zoom) for ix in range(1000, 1005) for iy in range(700, 704)
    )


def test_concave_u_shape_leaves_out_the_notch() -> None:
    zoom = 14
    ox, oy = 8000, 5000
    u = [(0.5, 0.5), (2.5, 0.5), (2.5, 5.5), (4.5, 5.5), (4.5, 0.5), (6.5, 0.5), (6.5, 6.5), (0.5, 6.5)]
    points = [to_latlon(ox + x, oy + y, zoom) for x, y in u]
    result = check_polygon(points, zoom)
    cells = {xy_from_tile(tile)[:2] for tile in result}
    assert cells == {(ox + ix, oy + iy) for ix in range(7) for iy in range(7)} - {
        (ox + 3, oy + iy) for iy in range(5)
    }
    assert len(result) == 44


def test_concave_comb_and_closing_point() -> None:
    zoom = 13
    comb = [(0.3, 0.3), (9.7, 0.3), (9.7, 8.7), (8.2, 8.7), (8.2, 2.2), (6.8, 2.2), (6.8, 8.7),
            (4.4, 8.7), (4.4, 2.6), (2.6, 2.6), (2.6, 8.7), (0.3, 8.7)]
    points = [to_latlon(4200 + x, 2700 + y, zoom) for x, y in comb]
    result = check_polygon(points, zoom)
    assert cover_polygon(points + points[:1], zoom) == result
    cells = {xy_from_tile(tile)[:2] for tile in result}
    assert (4200 + 3, 2700 + 5) not in cells  # inside the gaps between the teeth
    assert (4200 + 7, 2700 + 5) not in cells
    assert (4200 + 5, 2700 + 5) in cells  # inside a tooth


def test_polygon_larger_than_its_rows_spans_whole_rows() -> None:
    points = [(60.0, -10.0), (60.0, 30.0), (35.0, 30.0), (35.0, -10.0)]
    result = check_polygon(points, 8)
    assert from_latlon(47.5, 10.0, 8) in result


def test_polygon_reaching_the_edges_of_the_world() -> None:
    points = [(MAX_LATITUDE, 170.0), (MAX_LATITUDE, 180.0), (80.0, 180.0)]
    result = check_polygon(points, 6)
    assert "1" * 6 in result
    assert all(xy_from_tile(tile)[0] <= 63 for tile in result)
    south_points = [(-MAX_LATITUDE, -180.0), (-80.0, -180.0), (-MAX_LATITUDE, -170.0)]
    assert "2" * 6 in check_polygon(south_points, 6)


def test_polygon_along_the_north_edge_of_the_world() -> None:
    points = [(MAX_LATITUDE, 0.5), (MAX_LATITUDE, 1.0), (MAX_LATITUDE, 100.0)]
    assert check_polygon(points, 2) == ["10", "11"]


def test_polygon_at_zoom_zero_and_one() -> None:
    points = [(10.0, 10.0), (20.0, 10.0), (15.0, 20.0)]
    assert cover_polygon(points, 0) == [""]
    assert cover_polygon(points, 1) == ["1"]
    assert cover_polygon([(-10.0, -10.0), (10.0, -10.0), (10.0, 10.0)], 1) == ["0", "1", "2", "3"]


def test_degenerate_polygon_covers_its_segment() -> None:
    points = [(50.0, 4.0), (50.5, 4.5), (51.0, 5.0)]
    result = check_polygon(points, 11)
    assert from_latlon(50.25, 4.25, 11) in result


@pytest.mark.parametrize("seed", range(12))
def test_random_concave_polygons_match_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    zoom = rng.randint(6, 16)
    size = 200.0 / (1 << zoom) * rng.uniform(1, 8)
    points = star_polygon(rng, rng.uniform(-70, 70), rng.uniform(-170, 170), size, rng.randint(3, 14))
    check_polygon(points, zoom)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(3, 10), st.integers(2, 12))
def test_random_polygons_property(seed: int, corners: int, zoom: int) -> None:
    rng = random.Random(seed)
    size = 150.0 / (1 << zoom) * rng.uniform(0.3, 6)
    points = star_polygon(rng, rng.uniform(-80, 80), rng.uniform(-175, 175), size, corners)
    if len(set(points)) >= 3:
        assert check_polygon(points, zoom)
    else:
        with pytest.raises(ValueError):
            cover_polygon(points, zoom)


def test_huge_polygon_is_refused() -> None:
    world = [(80.0, -170.0), (80.0, 170.0), (-80.0, 170.0), (-80.0, -170.0)]
    # +-80 degrees lie in rows 1 and 14 at zoom 4; -170..170 touches every column.
    assert len(check_polygon(world, 4)) == 14 * 16
    with pytest.raises(ValueError, match="more than 1000000 tiles"):
        cover_polygon(world, 12)
    with pytest.raises(ValueError, match="more than 1000000 tiles"):
        cover_polygon([(80.0, -170.0), (80.0, -169.0), (-80.0, -169.5)], 22)


@pytest.mark.parametrize(
    ("points", "match"),
    [
        ([(50.0, 4.0), (51.0, 5.0)], "at least 3"),
        ([(50.0, 4.0), (51.0, 5.0), (50.0, 4.0)], "at least 3"),
        ([(50.0, 4.0), (50.0, 4.0), (50.0, 4.0), (51.0, 5.0)], "at least 3"),
        ([], "at least 3"),
        ([(50.0, 4.0), (51.0, 5.0), (86.0, 5.0)], "latitude"),
        ([(50.0, 4.0), (51.0, 5.0), (50.0, 190.0)], "longitude"),
        ([(50.0, 4.0), (51.0, 5.0), (math.nan, 5.0)], "latitude"),
        ([(50.0, 4.0), (51.0, 5.0), (50.0, 4.0, 1.0)], "pair"),
        ([(50.0, 4.0), (51.0, 5.0), 7], "pair"),
        ("50,4,51,5,52,6", "pair"),
    ],
)
def test_bad_polygons(points: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cover_polygon(points, 12)  # type: ignore[arg-type]


@pytest.mark.parametrize("zoom", [-1, 31, 12.0, True])
def test_bad_zoom(zoom: object) -> None:
    with pytest.raises(ValueError, match="zoom"):
        cover_polygon([(50.0, 4.0), (51.0, 5.0), (50.0, 5.0)], zoom)  # type: ignore[arg-type]
