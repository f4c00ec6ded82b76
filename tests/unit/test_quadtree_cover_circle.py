"""quadtree.cover_circle: destination-area tiles (IP_112, IP_113), checked by brute force."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quadtree import EARTH_RADIUS_M, MAX_LATITUDE, bounds, cover_circle, from_latlon
from quadtree.cover import distance_to_rectangle_m
from quadtree.tiles import tile_bounds_xy, tile_from_xy, xy_from_tile

Rect = tuple[float, float, float, float]


# ----------------------------------------------------------------- brute force helpers


def haversine_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    h = (
        math.sin((p2 - p1) / 2) ** 2
        + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def inside(lat: float, lon: float, rect: Rect) -> bool:
    south, west, north, east = rect
    return south <= lat <= north and (lon - west) % 360.0 <= east - west


def brute_distance_m(lat: float, lon: float, rect: Rect, samples: int = 400) -> float:
    """Dense sampling of the rectangle's four edges, refined by golden-section search."""
    if inside(lat, lon, rect):
        return 0.0
    south, west, north, east = rect
    edges = [
        lambda t: (south + t * (north - south), west),
        lambda t: (south + t * (north - south), east),
        lambda t: (south, west + t * (east - west)),
        lambda t: (north, west + t * (east - west)),
    ]
    best = math.inf
    for edge in edges:
        def f(t: float, edge=edge) -> float:
            return haversine_m(lat, lon, *edge(t))

        values = [f(k / samples) for k in range(samples + 1)]
        k = min(range(samples + 1), key=values.__getitem__)
        a, b = max(k - 1, 0) / samples, min(k + 1, samples) / samples
        ratio = (math.sqrt(5) - 1) / 2
        for _ in range(80):
            c, d = b - ratio * (b - a), a + ratio * (b - a)
            if f(c) <= f(d):
                b = d
            else:
                a = c
        best = min(best, values[k], f((a + b) / 2))
    return best


def destination(lat: float, lon: float, distance_m: float, bearing_deg: float) -> tuple[float, float]:
    """Point reached from (lat, lon) along a great circle (spherical direct problem)."""
    delta = distance_m / EARTH_RADIUS_M
    phi, theta = math.radians(lat), math.radians(bearing_deg)
    phi2 = math.asin(
        math.sin(phi) * math.cos(delta) + math.cos(phi) * math.sin(delta) * math.cos(theta)
    )
    lam = math.atan2(
        math.sin(theta) * math.sin(delta) * math.cos(phi),
        math.cos(delta) - math.sin(phi) * math.sin(phi2),
    )
    lon2 = (lon + math.degrees(lam) + 180.0) % 360.0 - 180.0
    return math.degrees(phi2), lon2


def candidate_window(lat: float, lon: float, radius: float, zoom: int) -> set[str]:
    """All tiles in the circle's sampled bounding box, widened by two tiles (or the world)."""
    n = 1 << zoom
    if zoom <= 4:
        return {tile_from_xy(ix, iy, zoom) for ix in range(n) for iy in range(n)}
    points = [(lat, lon)] + [destination(lat, lon, radius, b / 2) for b in range(720)]
    rows, cols = [], []
    for plat, plon in points:
        plat = max(min(plat, MAX_LATITUDE), -MAX_LATITUDE)
        _, iy, _ = xy_from_tile(from_latlon(plat, plon, zoom))
        rows.append(iy)
        delta = (plon - lon + 180.0) % 360.0 - 180.0
        cols.append(math.floor((0.5 + (lon + delta) / 360.0) * n))
    return {
        tile_from_xy(ix % n, iy, zoom)
        for iy in range(max(min(rows) - 2, 0), min(max(rows) + 2, n - 1) + 1)
        for ix in range(min(cols) - 2, max(cols) + 3)
    }


def settled(lat: float, lon: float, rect: Rect, radius: float, tolerance: float) -> float | None:
    """A distance on the right side of the rim by a margin, from bounds alone, for a tile well inside or
    well outside the circle; None near the rim (the brute force decides). The tile's distance is at
    most its nearest corner's; and at least the distance to its centre less R * (its height + its
    width) / 2 in radians (the centre reaches any point of the tile along a meridian, then a parallel)."""
    south, west, north, east = rect
    corner = min(haversine_m(lat, lon, a, b) for a in (south, north) for b in (west, east))
    if corner <= radius - tolerance:
        return corner
    reach = EARTH_RADIUS_M * math.radians(north - south + east - west) / 2
    lower = haversine_m(lat, lon, (south + north) / 2, (west + east) / 2) - reach
    return lower if lower > radius + tolerance else None


def check_against_brute_force(lat: float, lon: float, radius: float, zoom: int) -> list[str]:
    result = cover_circle(lat, lon, radius, zoom)
    assert result == sorted(set(result))
    window = candidate_window(lat, lon, radius, zoom)
    assert set(result) <= window
    tolerance = 0.01  # metres; the brute force itself is accurate to well under a millimetre
    for tile in window:
        rect = bounds(tile)
        distance = settled(lat, lon, rect, radius, tolerance)
        if distance is None:
            distance = brute_distance_m(lat, lon, rect)
        if distance <= radius - tolerance:
            assert tile in result, f"missed {tile} at {distance:.3f} m"
        elif distance > radius + tolerance:
            assert tile not in result, f"{tile} is {distance:.3f} m away"
    # Every point of the disc (inside and on the rim) falls in a returned tile.
    rng = random.Random(f"{lat},{lon},{radius},{zoom}")
    for k in range(400):
        d = radius * (1 - 1e-9) if k % 4 == 0 else radius * math.sqrt(rng.random())
        plat, plon = destination(lat, lon, d, rng.uniform(0, 360))
        if abs(plat) <= MAX_LATITUDE:
            assert from_latlon(plat, plon, zoom) in result
    return result


# ----------------------------------------------------------------- distance to a tile


def test_nearest_point_on_a_meridian_is_not_at_the_same_latitude() -> None:
    rect = (55.0, 20.0, 65.0, 30.0)
    exact = distance_to_rectangle_m(60.0, 0.0, *rect)
    same_latitude = haversine_m(60.0, 0.0, 60.0, 20.0)
    foot = math.degrees(math.atan(math.tan(math.radians(60.0)) / math.cos(math.radians(20.0))))
    assert foot == pytest.approx(61.519, abs=0.001)
    assert exact == pytest.approx(haversine_m(60.0, 0.0, foot, 20.0), abs=1e-6)
    assert same_latitude - exact > 5_000
    assert exact == pytest.approx(brute_distance_m(60.0, 0.0, rect), abs=1e-3)


@pytest.mark.parametrize(
    ("lat", "lon", "rect", "expected"),
    [
        (50.0, 5.0, (49.0, 4.0, 51.0, 6.0), 0.0),
        (52.0, 5.0, (49.0, 4.0, 51.0, 6.0), math.radians(1.0) * EARTH_RADIUS_M),
        (10.0, 179.5, (0.0, -180.0, 20.0, -170.0), 0.0),  # 179.5 is not in [-180, -170]
    ],
)
def test_distance_to_rectangle_simple_cases(lat: float, lon: float, rect: Rect, expected: float) -> None:
    if expected == 0.0 and not inside(lat, lon, rect):
        assert distance_to_rectangle_m(lat, lon, *rect) > 0
        assert distance_to_rectangle_m(lat, lon, *rect) == pytest.approx(
            brute_distance_m(lat, lon, rect), abs=1e-3
        )
    else:
        assert distance_to_rectangle_m(lat, lon, *rect) == pytest.approx(expected, abs=1e-6)


def test_distance_across_the_antimeridian() -> None:
    rect = (0.0, -180.0, 10.0, -179.0)
    expected = haversine_m(5.0, 179.0, 5.0, -180.0)
    assert distance_to_rectangle_m(5.0, 179.0, *rect) == pytest.approx(expected, rel=1e-4)
    assert distance_to_rectangle_m(5.0, 180.0, *rect) == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_distance_to_rectangle_matches_dense_sampling(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(40):
        zoom = rng.randint(1, 14)
        n = 1 << zoom
        rect = tile_bounds_xy(rng.randrange(n), rng.randrange(n), zoom)
        lat = rng.uniform(-MAX_LATITUDE, MAX_LATITUDE)
        lon = rng.uniform(-180.0, 180.0)
        exact = distance_to_rectangle_m(lat, lon, *rect)
        brute = brute_distance_m(lat, lon, rect)
        assert exact == pytest.approx(brute, abs=1e-3 + 1e-9 * brute)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 20).flatmap(
        lambda z: st.tuples(st.just(z), st.integers(0, 2**z - 1), st.integers(0, 2**z - 1))
    ),
    st.floats(-MAX_LATITUDE, MAX_LATITUDE),
    st.floats(-1.0, 1.0),
)
def test_distance_to_nearby_rectangles_matches_dense_sampling(
    tile: tuple[int, int, int], lat: float, lon_offset: float
) -> None:
    zoom, ix, iy = tile
    rect = tile_bounds_xy(ix, iy, zoom)
    lon = max(min((rect[1] + rect[3]) / 2 + lon_offset * (rect[3] - rect[1]) * 3, 180.0), -180.0)
    exact = distance_to_rectangle_m(lat, lon, *rect)
    brute = brute_distance_m(lat, lon, rect)
    assert exact == pytest.approx(brute, abs=1e-3 + 1e-9 * brute)


# ----------------------------------------------------------------- cover_circle exactness


@pytest.mark.parametrize(
    ("lat", "lon", "radius", "zoom"),
    [
        (69.111746, 20.749621, 5_000, 13),  # Kilpisjarvi
        (69.111746, 20.749621, 1_000, 14),
        (42.033415, -8.65392, 5_000, 13),  # Valenca-Tui
        (42.033415, -8.65392, 1_000, 14),
        (51.485992, 4.735311, 5_000, 13),  # Hazeldonk
        (51.485992, 4.735311, 20_000, 12),
        (51.485992, 4.735311, 150, 18),
        (0.0, 0.0, 3_000, 13),  # equator and prime meridian
        (-16.5, 179.98, 10_000, 12),  # antimeridian
        (16.5, -179.99, 50_000, 9),
        (84.9, 30.0, 30_000, 9),  # north edge of the quadtree
        (-84.95, -100.0, 50_000, 8),  # south edge
        (60.0, 25.0, 800_000, 5),  # large: meridian foot far from the centre's latitude
        (70.0, 100.0, 2_500_000, 3),  # contains the north pole
        (-40.0, -60.0, 9_000_000, 2),
    ],
)
def test_cover_circle_matches_brute_force(lat: float, lon: float, radius: float, zoom: int) -> None:
    result = check_against_brute_force(lat, lon, radius, zoom)
    assert from_latlon(lat, lon, zoom) in result
    assert all(len(tile) == zoom for tile in result)


@settings(max_examples=25, deadline=None)
@given(
    st.floats(-80.0, 80.0),
    st.floats(-180.0, 180.0),
    st.floats(1.0, 8_000.0),
    st.integers(11, 15),
)
def test_cover_circle_matches_brute_force_randomly(lat: float, lon: float, radius: float, zoom: int) -> None:
    # at most ~8 tiles across: the brute force's cost grows with the square of that (near the poles
    # an 8 km circle at zoom 15 is ~80 tiles across and takes half a minute); wider circles are in
    # the fixed cases above
    tile_width_m = 40_075_016.7 * math.cos(math.radians(lat)) / (1 << zoom)
    check_against_brute_force(lat, lon, min(radius, 4 * tile_width_m), zoom)


def test_antimeridian_circle_has_tiles_on_both_sides() -> None:
    result = cover_circle(10.0, 179.999, 5_000, 13)
    columns = {xy_from_tile(tile)[0] for tile in result}
    assert 0 in columns and (1 << 13) - 1 in columns


def test_pole_circle_takes_whole_rows() -> None:
    # 18 degrees of arc reach past the pole down to 85.05 N on the far side.
    result = cover_circle(80.0, 0.0, 2_000_000, 3)
    assert {tile for tile in result if xy_from_tile(tile)[1] == 0} == {
        tile_from_xy(ix, 0, 3) for ix in range(8)
    }


def test_radius_zero_is_the_tile_of_the_centre() -> None:
    assert cover_circle(51.485992, 4.735311, 0, 18) == ["120202130121133020"]
    south, west, _, _ = bounds("120202130121133020")
    # On a tile corner a zero radius still gives exactly one tile, the from_latlon one.
    assert cover_circle(south, west, 0.0, 18) == [from_latlon(south, west, 18)]


def test_tiny_radius_on_a_tile_corner_gives_four_tiles() -> None:
    ix, iy, zoom = xy_from_tile("120202130121133020")
    _, west, north, _ = tile_bounds_xy(ix, iy, zoom)
    result = cover_circle(north, west, 0.5, zoom)
    assert result == sorted(
        tile_from_xy(ix + dx, iy + dy, zoom) for dx in (-1, 0) for dy in (-1, 0)
    )


def test_radius_of_half_the_earth_covers_the_world() -> None:
    assert len(cover_circle(50.0, 5.0, math.pi * EARTH_RADIUS_M, 2)) == 16
    assert len(cover_circle(50.0, 5.0, 1e9, 3)) == 64
    assert cover_circle(50.0, 5.0, 1e9, 0) == [""]


@pytest.mark.parametrize(
    ("lat", "lon", "radius", "zoom"),
    [
        (0.0, 0.0, 1e9, 20),
        (50.0, 5.0, 20_000_000, 12),
        (50.0, 5.0, 2_000_000, 14),
    ],
)
def test_absurd_sizes_are_refused(lat: float, lon: float, radius: float, zoom: int) -> None:
    with pytest.raises(ValueError, match="more than 1000000 tiles"):
        cover_circle(lat, lon, radius, zoom)


@pytest.mark.parametrize("radius", [-1.0, math.nan, math.inf, "5", None, True])
def test_bad_radius(radius: object) -> None:
    with pytest.raises(ValueError, match="radius"):
        cover_circle(50.0, 5.0, radius, 13)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("lat", "lon", "zoom", "match"),
    [
        (86.0, 5.0, 13, "latitude"),
        (math.nan, 5.0, 13, "latitude"),
        (50.0, 181.0, 13, "longitude"),
        (50.0, 5.0, 31, "zoom"),
        (50.0, 5.0, 13.0, "zoom"),
    ],
)
def test_bad_centre_or_zoom(lat: float, lon: float, zoom: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cover_circle(lat, lon, 100.0, zoom)  # type: ignore[arg-type]


# ----------------------------------------------------------------- IP_112 / IP_113 tile counts


def worst_count(lat: float, radius: float, zoom: int, steps: int = 8) -> int:
    """Largest cover over centres on a grid across one tile (corners and edges included)."""
    south, west, north, east = bounds(from_latlon(lat, 10.0, zoom))
    return max(
        len(cover_circle(south + (north - south) * i / steps, west + (east - west) * j / steps, radius, zoom))
        for i in range(steps + 1)
        for j in range(steps + 1)
    )


@pytest.mark.parametrize("lat", [0.0, 40.0, 45.0, 50.0, 55.0, 60.0, 63.0, 65.0, 66.0])
def test_ip112_5km_at_zoom_13_needs_at_most_36_tiles_up_to_66_degrees(lat: float) -> None:
    assert worst_count(lat, 5_000, 13) <= 36
    assert worst_count(-lat, 5_000, 13) <= 36


@pytest.mark.parametrize(("lat", "at_least"), [(66.4, 37), (69.111746, 40), (70.0, 43)])
def test_ip112_bound_does_not_hold_further_north(lat: float, at_least: int) -> None:
    assert worst_count(lat, 5_000, 13, steps=12) >= at_least


@pytest.mark.parametrize("lat", [0.0, 40.0, 45.0, 50.0, 55.0, 60.0, 63.0, 65.0, 65.8])
def test_ip113_1km_at_zoom_14_needs_at_most_9_tiles_up_to_65_8_degrees(lat: float) -> None:
    assert worst_count(lat, 1_000, 14) <= 9
    assert worst_count(-lat, 1_000, 14) <= 9


def test_ip113_bound_does_not_hold_north_of_65_84_degrees() -> None:
    # 4 columns are needed once the 2 km diameter exceeds two tile widths,
    # 2 * 2443.25 m * cos(lat), i.e. north of acos(1000 / 2443.25) = 65.84 degrees.
    # Centred on a tile corner: 4 x 4 tiles minus the 4 corner tiles.
    south, west, _, _ = bounds(from_latlon(65.9, 10.0, 14))
    assert len(cover_circle(south, west, 1_000, 14)) == 12
    check_against_brute_force(south, west, 1_000, 14)
    assert worst_count(69.111746, 1_000, 14) >= 12  # Kilpisjarvi, a Table 16 example
