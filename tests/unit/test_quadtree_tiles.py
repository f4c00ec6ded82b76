"""quadtree.tiles: appendix A tile of a position, bounds, tile arithmetic (IP_037/IP_038)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import quadtree
from quadtree import MAX_LATITUDE, bounds, children, from_latlon, parent
from quadtree.tiles import tile_from_xy, xy_from_tile

# Table 16 of the IP profile (zoom 18).
TABLE_16 = [
    ("Kilpisjarvi (NO-FI)", 69.111746, 20.749621, "102231321102200323", 54),
    ("Valenca-Tui (ES-PT)", 42.033415, -8.65392, "031332213323322232", 127),
    ("Hazeldonk (E19, BE-NL)", 51.485992, 4.735311, "120202130121133020", 95),
]


def appendix_a(lat: float, lon: float, zoom: int = 18) -> str:
    """The appendix A Python code with its OCR typos fixed, for comparison."""
    sinlat = math.sin(lat * math.pi / 180.0)
    x = 0.5 + lon / 360.0
    y = 0.5 - math.log((1.0 + sinlat) / (1.0 - sinlat)) / (4 * math.pi)
    x = math.floor(math.pow(2, zoom) * x)
    y = math.floor(math.pow(2, zoom) * y)
    qtree = ""
    for _ in range(zoom):
        qtree = str(x & 1 | 2 * (y & 1)) + qtree
        x = x >> 1
        y = y >> 1
    return qtree


@pytest.mark.parametrize(("place", "lat", "lon", "tile", "size_m"), TABLE_16)
def test_table_16_examples(place: str, lat: float, lon: float, tile: str, size_m: int) -> None:
    assert from_latlon(lat, lon) == tile
    assert from_latlon(lat, lon, 18) == tile
    assert appendix_a(lat, lon) == tile


@pytest.mark.parametrize(
    ("tile", "size_m"),
    [
        ("102231321102200323", 54),
        # Table 16 prints 127 m for Valenca-Tui, but a zoom-18 tile at 42.03 N is
        # 113 m wide (127 m would be latitude ~33.8 N): an erratum in the table.
        ("031332213323322232", 113),
        ("120202130121133020", 95),
    ],
)
def test_table_16_tile_sizes(tile: str, size_m: int) -> None:
    """Table 16 "size of tile (east-west)": the tile's width along its parallel, in metres."""
    south, west, north, east = bounds(tile)
    mid = math.radians((south + north) / 2)
    width = math.radians(east - west) * math.cos(mid) * quadtree.EARTH_RADIUS_M
    assert round(width) == size_m


@pytest.mark.parametrize(("place", "lat", "lon", "tile", "size_m"), TABLE_16)
def test_table_16_prefixes_are_lower_zooms(
    place: str, lat: float, lon: float, tile: str, size_m: int
) -> None:
    for zoom in range(19):
        assert from_latlon(lat, lon, zoom) == tile[:zoom]


@given(
    st.floats(-MAX_LATITUDE + 1e-9, MAX_LATITUDE - 1e-9),
    st.floats(-180.0, 180.0, exclude_max=True),
    st.integers(0, 30),
)
def test_same_as_appendix_a_inside_the_world(lat: float, lon: float, zoom: int) -> None:
    tile = from_latlon(lat, lon, zoom)
    assert len(tile) == zoom and set(tile) <= set("0123")
    # Appendix A wraps around when rounding pushes x to 1.0 (lon a hair below 180);
    # from_latlon clamps into the last column there, and is identical elsewhere.
    if math.floor(2**zoom * (0.5 + lon / 360.0)) < 2**zoom:
        assert tile == appendix_a(lat, lon, zoom)
    else:  # (at zoom 0 the one tile is the world, "")
        assert set(tile) <= set("13") and (zoom == 0 or tile[-1] in "13")


def test_zoom_zero_is_the_world() -> None:
    assert from_latlon(10.0, 20.0, 0) == ""
    assert bounds("") == pytest.approx((-85.0511287798066, -180.0, 85.0511287798066, 180.0))


def test_quadrant_digits() -> None:
    assert from_latlon(45.0, -90.0, 1) == "0"  # NW
    assert from_latlon(45.0, 90.0, 1) == "1"  # NE
    assert from_latlon(-45.0, -90.0, 1) == "2"  # SW
    assert from_latlon(-45.0, 90.0, 1) == "3"  # SE


def test_points_on_tile_edges_belong_to_the_east_and_south_tile() -> None:
    assert from_latlon(0.0, 0.0, 1) == "3"
    assert from_latlon(10.0, 0.0, 1) == "1"
    assert from_latlon(0.0, -10.0, 1) == "2"


@pytest.mark.parametrize("zoom", [1, 5, 18, 30])
def test_world_edges_stay_in_the_grid(zoom: int) -> None:
    last = "3" * zoom
    assert from_latlon(-MAX_LATITUDE, 180.0, zoom) == last
    assert from_latlon(MAX_LATITUDE, -180.0, zoom) == "0" * zoom
    assert from_latlon(MAX_LATITUDE, 180.0, zoom) == "1" * zoom
    assert from_latlon(-MAX_LATITUDE, -180.0, zoom) == "2" * zoom
    assert from_latlon(0.0, 180.0, zoom) == "3" + "1" * (zoom - 1)
    assert from_latlon(0.0, 179.99999999999997, zoom) == "3" + "1" * (zoom - 1)


@pytest.mark.parametrize(
    ("lat", "lon"),
    [
        (85.06, 0.0),
        (-85.06, 0.0),
        (90.0, 0.0),
        (math.nan, 0.0),
        (math.inf, 0.0),
        (0.0, math.nan),
        (0.0, -math.inf),
        (0.0, 180.0001),
        (0.0, -180.5),
        ("1.0", 0.0),
        (None, 0.0),
        (True, 0.0),
    ],
)
def test_bad_positions_raise(lat: object, lon: object) -> None:
    with pytest.raises(ValueError, match="latitude|longitude"):
        from_latlon(lat, lon)  # type: ignore[arg-type]


@pytest.mark.parametrize("zoom", [-1, 31, 1.0, 18.0, True, False, "18", None])
def test_bad_zoom_raises(zoom: object) -> None:
    with pytest.raises(ValueError, match="zoom"):
        from_latlon(50.0, 5.0, zoom)  # type: ignore[arg-type]


def test_integer_coordinates_are_accepted() -> None:
    assert from_latlon(0, 0, 2) == from_latlon(0.0, 0.0, 2) == "30"


@pytest.mark.parametrize(
    ("tile", "expected"),
    [
        ("0", (0.0, -180.0, 85.0511287798066, 0.0)),
        ("1", (0.0, 0.0, 85.0511287798066, 180.0)),
        ("2", (-85.0511287798066, -180.0, 0.0, 0.0)),
        ("3", (-85.0511287798066, 0.0, 0.0, 180.0)),
        ("30", (-66.51326044311186, 0.0, 0.0, 90.0)),
    ],
)
def test_bounds_known_values(tile: str, expected: tuple[float, float, float, float]) -> None:
    assert bounds(tile) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("place", "lat", "lon", "tile", "size_m"), TABLE_16)
def test_bounds_contain_the_position(place: str, lat: float, lon: float, tile: str, size_m: int) -> None:
    south, west, north, east = bounds(tile)
    assert south <= lat < north and west <= lon < east


@given(st.text(alphabet="0123", max_size=30))
def test_bounds_round_trip(tile: str) -> None:
    south, west, north, east = bounds(tile)
    assert south < north and west < east
    centre = from_latlon((south + north) / 2, (west + east) / 2, len(tile))
    assert centre == tile
    # Just inside the north-west corner is the tile itself (the appendix A
    # formula loses up to ~1e-8 of a tile near the poles at zoom 24).
    if len(tile) <= 24:
        assert from_latlon(north - 1e-6 * (north - south), west, len(tile)) == tile


@given(st.text(alphabet="0123", min_size=1, max_size=30))
def test_xy_round_trip(tile: str) -> None:
    ix, iy, zoom = xy_from_tile(tile)
    assert tile_from_xy(ix, iy, zoom) == tile


@pytest.mark.parametrize("tile", ["4", "01a", " 0", "0,1", "0" * 31, None, 12])
def test_bounds_rejects_invalid_tiles(tile: object) -> None:
    with pytest.raises(ValueError, match="tile"):
        bounds(tile)  # type: ignore[arg-type]


def test_bounds_accepts_zoom_30() -> None:
    south, west, north, east = bounds("3" * 30)
    assert east == 180.0 and south == pytest.approx(-85.0511287798066)


def test_tile_from_xy_rejects_indices_outside_the_grid() -> None:
    with pytest.raises(ValueError, match="outside"):
        tile_from_xy(4, 0, 2)
    with pytest.raises(ValueError, match="outside"):
        tile_from_xy(0, -1, 2)


def test_parent_and_children() -> None:
    assert parent("1203") == "120"
    assert parent("1") == ""
    assert children("12") == ["120", "121", "122", "123"]
    assert children("") == ["0", "1", "2", "3"]
    with pytest.raises(ValueError, match="no parent"):
        parent("")
    with pytest.raises(ValueError):
        children("0" * 30)
