"""IF2 routing keys, Table 4 properties and binding keys <-> C-Roads properties and selectors
(interchange/bridges/if2/keys.py, bindings.py), on every example of the IF2 specification
(chapter 6.4 and the chapter 7 example code) and the IP profile's appendix A, plus round trips."""
from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jms_selectors
import quadtree
from interchange.broker.validation import validate_application_properties
from interchange.bridges.if2 import keys
from interchange.bridges.if2.bindings import binding_selector, bindings_selector, selector_bindings
from interchange.bridges.if2.keys import (
    SUBTYPE_PROPERTY,
    If2Envelope,
    If2KeyError,
    ProviderTable,
    RoutingKey,
    croads_properties,
    envelope_of,
    if2_envelope,
    table4_headers,
)

PROVIDERS = ProviderTable({"RWS": "NL00001", "BASt": "DE15608", "DIRIF": "FR00042"})
HAZELDONK = "120202130121133020"  # IP appendix A, Table 16
ROTTERDAM_ZOOM_9 = "120202112"  # IF2 6.4's example area
ROTTERDAM_POINT = (51.885, 4.29)  # a point in it (its zoom-18 tile starts with 120202112)


def dotted(tile: str) -> str:
    return ".".join(tile)


def matches(binding: str, key: str) -> bool:
    """RabbitMQ topic matching (the reference for the equivalence tests)."""
    pattern = "^" + r"\.".join({"*": r"[^.]+", "#": r".*"}.get(w, re.escape(w)) for w in binding.split(".")) + "$"
    pattern = pattern.replace(r"\..*", r"(\..*)?").replace(r".*\.", r"(.*\.)?")
    return re.match(pattern, key) is not None


def selects(selector: str, properties: dict) -> bool:
    return jms_selectors.compile(selector).matches(properties) is True


# ------------------------------------------------------------------ the spec's examples
def test_routing_key_layout_of_6_4() -> None:
    """<message type>.<message version>.<provider>.<subtype id>.{quadtree path}; '.' in the version as
    '_'; the quadtree path one digit per word at zoom 18."""
    key = RoutingKey("DENM", "1.2.1", "RWS", "3", HAZELDONK)
    assert str(key) == "DENM.1_2_1.RWS.3." + dotted(HAZELDONK)
    assert RoutingKey.parse(str(key)) == key
    assert len(str(key).split(".")) == 4 + 18


def test_java_example_publish_and_headers() -> None:
    """Chapter 7.3.2: exchange = message type, key from the fake data (DENM subtype = cause code),
    headers lat/lon and expiration "10000"."""
    lat, lon = 51.485992, 4.735311
    tile = quadtree.from_latlon(lat, lon, 18)
    key = f"DENM.1_2_1.RWS.5.{dotted(tile)}"
    envelope = envelope_of(key, 10000, {"lat": lat, "lon": lon})
    props = croads_properties(envelope, PROVIDERS)
    assert props == {"messageType": "DENM", "protocolVersion": "DENM:1.2.1", "publisherId": "NL00001",
                     "publicationId": "NL00001:if2-DENM-1_2_1", "originatingCountry": "NL",
                     "quadTree": f",{HAZELDONK},", "causeCode": 5, "subCauseCode": 0,
                     "latitude": lat, "longitude": lon}
    assert envelope.ttl_ms == 10000
    back = if2_envelope(props, PROVIDERS, envelope.ttl_ms)
    assert str(back.key) == key and (back.lat, back.lon, back.ttl_ms) == (lat, lon, 10000)
    assert table4_headers(back) == {"lat": lat, "lon": lon, "ttl": 10000}


@pytest.mark.parametrize(("if2_type", "croads_type"), [("DENM", "DENM"), ("IVI", "IVIM"), ("MAP", "MAPEM"),
                                                      ("SPAT", "SPATEM")])
def test_the_four_exchanges_of_6_2(if2_type: str, croads_type: str) -> None:
    subtype = "1" if if2_type == "DENM" else "0"
    props = croads_properties(If2Envelope(RoutingKey(if2_type, "1.3.1", "BASt", subtype, HAZELDONK)), PROVIDERS)
    assert props["messageType"] == croads_type and props["protocolVersion"] == f"{croads_type}:1.3.1"
    assert props["publisherId"] == "DE15608" and props["originatingCountry"] == "DE"
    assert str(if2_envelope(props, PROVIDERS).key).startswith(f"{if2_type}.1_3_1.BASt.{subtype}.")


def test_hash_alone_is_everything_of_the_exchange() -> None:
    """6.4: "the routing key filter is as simple as a single #"."""
    assert binding_selector("DENM", "#", PROVIDERS) == "messageType = 'DENM'"
    assert selector_bindings("messageType = 'DENM'", PROVIDERS) == {"DENM": ["#"]}


def test_rotterdam_example_of_6_4() -> None:
    """DENM.1_2_1.RWS.*.1.2.0.2.0.2.1.1.2.#: DENMs 1.2.1 from RWS around Rotterdam (zoom 9), any subtype."""
    binding = "DENM.1_2_1.RWS.*." + dotted(ROTTERDAM_ZOOM_9) + ".#"
    selector = binding_selector("DENM", binding, PROVIDERS)
    assert selector == ("messageType = 'DENM' AND protocolVersion = 'DENM:1.2.1' AND publisherId = 'NL00001' "
                        f"AND quadTree LIKE '%,{ROTTERDAM_ZOOM_9}%'")
    assert selector_bindings(selector, PROVIDERS) == {"DENM": [binding]}
    inside = quadtree.from_latlon(*ROTTERDAM_POINT, 18)
    assert inside.startswith(ROTTERDAM_ZOOM_9)
    for key, wanted in [(f"DENM.1_2_1.RWS.{c}.{dotted(inside)}", True) for c in ("1", "94", "-1")] + [
            (f"DENM.1_2_1.RWS.1.{dotted(HAZELDONK)}", False), (f"DENM.1_3_1.RWS.1.{dotted(inside)}", False),
            (f"DENM.1_2_1.BASt.1.{dotted(inside)}", False)]:
        assert matches(binding, key) is wanted, key
        props = croads_properties(envelope_of(key, None, None), PROVIDERS)
        assert selects(selector, props) is wanted, key


@pytest.mark.parametrize("zoom", range(0, 19))
def test_filters_of_zoom_0_to_18(zoom: int) -> None:
    """6.4: "a filter should always be of a lower number zoomlevel, i.e. 0-18"."""
    tile = HAZELDONK[:zoom]
    binding = "SPAT.*.*.*." + (dotted(tile) + ".#" if tile else "#")
    selector = binding_selector("SPAT", binding, PROVIDERS)
    assert selects(selector, croads_properties(envelope_of(f"SPAT.1_0.RWS.0.{dotted(HAZELDONK)}", None, None),
                                               PROVIDERS))
    wanted = "#" if not tile else f"SPAT.*.*.*.{dotted(tile)}" + (".#" if zoom < 18 else "")  # 22 words: no '#'
    assert selector_bindings(selector, PROVIDERS) == {"SPAT": [wanted]}


def test_deeper_than_18_has_no_key() -> None:
    with pytest.raises(If2KeyError, match="deeper than zoom 18"):
        selector_bindings(f"messageType = 'DENM' AND quadTree LIKE '%,{HAZELDONK}0%'", PROVIDERS)
    assert binding_selector("DENM", "*.*.*.*." + dotted(HAZELDONK) + ".0", PROVIDERS) == "FALSE"


@pytest.mark.parametrize(("name", "lat", "lon", "tile"), [
    ("Kilpisjarvi", 69.111746, 20.749621, "102231321102200323"),
    ("Valenca-Tui", 42.033415, -8.65392, "031332213323322232"),
    ("Hazeldonk", 51.485992, 4.735311, HAZELDONK)])
def test_appendix_a_points_route_on_their_tiles(name: str, lat: float, lon: float, tile: str) -> None:
    """C-Roads -> IF2: the routing tile is the zoom-18 tile holding latitude/longitude."""
    props = {"messageType": "MAPEM", "protocolVersion": "MAPEM:2.1.1", "publisherId": "FR00042",
             "quadTree": f",{tile},", "latitude": lat, "longitude": lon}
    envelope = if2_envelope(props, PROVIDERS)
    assert str(envelope.key) == f"MAP.2_1_1.DIRIF.0.{dotted(tile)}"
    back = croads_properties(envelope, PROVIDERS)
    assert back["quadTree"] == f",{tile}," and (back["latitude"], back["longitude"]) == (lat, lon)


# ------------------------------------------------------------------ choices where IF2 is silent
def test_croads_message_without_position_uses_its_first_deep_tile_cut_to_18() -> None:
    props = {"messageType": "IVIM", "protocolVersion": "IVIM:1.2.1", "publisherId": "NL00001",
             "quadTree": f",1202,{HAZELDONK}0123,031332213323322232,", SUBTYPE_PROPERTY: "speed"}
    envelope = if2_envelope(props, PROVIDERS, 5000)
    assert str(envelope.key) == f"IVI.1_2_1.RWS.speed.{dotted(HAZELDONK)}"
    assert quadtree.from_latlon(envelope.lat, envelope.lon, 18) == HAZELDONK  # the tile's centre
    assert envelope.ttl_ms == 5000


def test_cancellation_denm_and_non_denm_subtypes() -> None:
    props = croads_properties(envelope_of(f"DENM.1_2_1.RWS.-1.{dotted(HAZELDONK)}", None, None), PROVIDERS)
    assert (props["causeCode"], props["subCauseCode"]) == (-1, -1)
    props = croads_properties(envelope_of(f"IVI.1_2_1.RWS.speed.{dotted(HAZELDONK)}", None, None), PROVIDERS)
    assert props[SUBTYPE_PROPERTY] == "speed" and "causeCode" not in props
    assert "ttl" not in table4_headers(If2Envelope(RoutingKey.parse(f"IVI.1.RWS.0.{dotted(HAZELDONK)}")))


def test_ttl_header_when_no_expiration() -> None:
    key = f"MAP.1.RWS.0.{dotted(HAZELDONK)}"
    assert envelope_of(key, None, {"ttl": 7000}).ttl_ms == 7000
    assert envelope_of(key, 3000, {"ttl": 7000}).ttl_ms == 3000


# ------------------------------------------------------------------ bad input: clear errors
@pytest.mark.parametrize(("key", "why"), [
    ("", "empty routing key"),
    ("DENM.1_2_1.RWS.3", "has 4 words, not 22"),
    (f"CAM.1.RWS.3.{dotted(HAZELDONK)}", "'CAM' is not an IF2 type"),
    (f"DENM..RWS.3.{dotted(HAZELDONK)}", "version word '' is not like '1_2_1'"),
    (f"DENM.1_2_1.RWS.x.{dotted(HAZELDONK)}", "not a causeCode"),
    (f"DENM.1_2_1.RWS.256.{dotted(HAZELDONK)}", "not a causeCode"),
    (f"DENM.1_2_1.RWS.3.{dotted(HAZELDONK[:-1])}.4", "word 22 .'4'. is not a quadtree digit"),
    (f"DENM.1_2_1.R*S.3.{dotted(HAZELDONK)}", "provider 'R\\*S' is not one routing-key word"),
    ("DENM.1." + "x" * 250 + f".3.{dotted(HAZELDONK)}", "longer than 255 bytes"),
])
def test_bad_routing_keys(key: str, why: str) -> None:
    with pytest.raises(If2KeyError, match=why):
        RoutingKey.parse(key)


def test_bad_properties_and_tables() -> None:
    key = f"DENM.1_2_1.NOPE.3.{dotted(HAZELDONK)}"
    with pytest.raises(If2KeyError, match="provider 'NOPE' is not in the provider table"):
        croads_properties(envelope_of(key, None, None), PROVIDERS)
    with pytest.raises(If2KeyError, match="lie in tile .* not in the routing key's"):
        croads_properties(envelope_of(f"DENM.1.RWS.3.{dotted(HAZELDONK)}", None, {"lat": 42.0, "lon": -8.6}),
                          PROVIDERS)
    with pytest.raises(If2KeyError, match="lat and lon come together"):
        envelope_of(f"DENM.1.RWS.3.{dotted(HAZELDONK)}", None, {"lat": 42.0})
    with pytest.raises(If2KeyError, match="not a finite number"):
        envelope_of(f"DENM.1.RWS.3.{dotted(HAZELDONK)}", None, {"lat": "x", "lon": 1.0})
    with pytest.raises(If2KeyError, match="ttl -1 is not"):
        envelope_of(f"DENM.1.RWS.3.{dotted(HAZELDONK)}", -1, None)
    base = {"messageType": "DENM", "protocolVersion": "DENM:1.2.1", "publisherId": "NL00001",
            "quadTree": f",{HAZELDONK},", "causeCode": 3}
    for change, why in [({"messageType": "SREM"}, "'SREM' has no IF2 exchange"),
                        ({"protocolVersion": "1.2.1"}, "not 'DENM:<version>'"),
                        ({"protocolVersion": "DENM:1_2"}, "not like '1.2.1'"),
                        ({"publisherId": "SE00001"}, "'SE00001' is not in the provider table"),
                        ({"causeCode": "3"}, "causeCode '3' is not an integer"),
                        ({"quadTree": ",1202,"}, "no tile of zoom 18"),
                        ({"quadTree": ",12x,"}, "quadTree")]:
        with pytest.raises(If2KeyError, match=why):
            if2_envelope({**base, **change}, PROVIDERS)
    with pytest.raises(If2KeyError, match="is not a C-Roads publisherId: must be 2 uppercase letters and a number 0-16383"):
        ProviderTable({"RWS": "NL99999"})
    with pytest.raises(If2KeyError, match="given to both"):
        ProviderTable({"RWS": "NL00001", "RWS2": "NL00001"})
    with pytest.raises(If2KeyError, match="appears twice"):
        ProviderTable.of([("RWS", "NL00001"), ("RWS", "NL00002")])


@pytest.mark.parametrize(("binding", "why"), [
    ("", "empty binding key"), ("DENM.1*.#", "a wildcard is a whole word"), ("DENM..#", "is not a word"),
    ("DENM.1.NOPE.#", "matches nothing: provider 'NOPE' is not in the provider table"),
    ("#.0.#.1.#.2.#.3.#.0.#.1.#.2.#", "too many '#'")])
def test_bad_binding_keys(binding: str, why: str) -> None:
    with pytest.raises(If2KeyError, match=why):
        binding_selector("DENM", binding, PROVIDERS)


@pytest.mark.parametrize(("selector", "why"), [
    ("originatingCountry = 'NL'", "'originatingCountry' is not carried in the routing key"),
    ("messageType = 'DENM' AND causeCode > 3", "is not '<property> = <value>'"),
    ("messageType = 'DENM' AND NOT causeCode = 3", "only =, IN and quadTree LIKE"),
    ("messageType = 'DENM' AND causeCode BETWEEN 1 AND 3", "only =, IN and quadTree LIKE"),
    ("messageType = 'DENM' AND quadTree LIKE '%12%'", "is not '%,<tile digits or _>%'"),
    ("messageType = 'DENM' AND latitude = 51.0", "'latitude' is not carried"),
    ("messageType = 'SREM'", "'SREM' has no IF2 exchange"),
    ("publisherId = 'NL00001'", "does not fix messageType"),
    ("messageType = 'IVIM' AND \"custom-intercor-if2-subtype\" = '0'", "subtype 0 is also published"),
    ("messageType = ", "selector:"),
])
def test_selectors_without_an_equivalent_binding(selector: str, why: str) -> None:
    with pytest.raises(If2KeyError, match=why):
        selector_bindings(selector, PROVIDERS)


def test_selector_or_and_in_become_several_bindings() -> None:
    found = selector_bindings("messageType IN ('DENM', 'IVIM') AND publisherId = 'DE15608' OR "
                              "(causeCode = 3 OR causeCode = 4) AND quadTree LIKE '%,12_2%'", PROVIDERS)
    assert found == {"DENM": ["DENM.*.BASt.#", "DENM.*.*.3.1.2.*.2.#", "DENM.*.*.4.1.2.*.2.#"],
                     "IVI": ["IVI.*.BASt.#"]}
    assert selector_bindings("messageType = 'DENM' AND messageType = 'IVIM'", PROVIDERS) == {}
    assert bindings_selector({}, PROVIDERS) == "FALSE"


# ------------------------------------------------------------------ round trips (hypothesis)
tiles = st.text("0123", min_size=18, max_size=18)
types = st.sampled_from(["DENM", "IVI", "MAP", "SPAT"])
versions = st.lists(st.integers(0, 20), min_size=1, max_size=4).map(lambda v: ".".join(map(str, v)))
providers = st.sampled_from(sorted(PROVIDERS.publisher_ids))


@st.composite
def routing_keys(draw: st.DrawFn) -> RoutingKey:
    kind = draw(types)
    subtype = str(draw(st.integers(-1, 255))) if kind == "DENM" else draw(st.from_regex(r"[A-Za-z0-9_-]{1,8}",
                                                                                       fullmatch=True))
    return RoutingKey(kind, draw(versions), draw(providers), subtype, draw(tiles))


@settings(max_examples=300, deadline=None)
@given(routing_keys(), st.one_of(st.none(), st.integers(0, 10**9)), st.booleans())
def test_if2_to_croads_and_back_is_identity(key: RoutingKey, ttl: int | None, with_position: bool) -> None:
    lat = lon = None
    if with_position:
        south, west, north, east = quadtree.bounds(key.tile)
        lat, lon = (south + north) / 2, (west + east) / 2
    envelope = If2Envelope(key, ttl, lat, lon)
    props = croads_properties(envelope, PROVIDERS)
    assert RoutingKey.parse(str(key)) == key
    back = if2_envelope(props, PROVIDERS, ttl)
    assert back.key == key and back.ttl_ms == ttl
    if with_position:
        assert (back.lat, back.lon) == (lat, lon)


binding_words = st.one_of(st.sampled_from(["*", "#", "#", "0", "1", "2", "3", "DENM", "IVI", "RWS", "1_2", "5"]))


@settings(max_examples=150, deadline=None)
@given(types, st.lists(binding_words, min_size=1, max_size=24), st.lists(routing_keys(), min_size=8, max_size=8))
def test_binding_selector_is_equivalent_to_topic_matching(exchange: str, words: list[str],
                                                          keys: list[RoutingKey]) -> None:
    """For any binding key and message of the exchange: the selector matches the message's C-Roads
    properties exactly when RabbitMQ's topic matching matches its routing key."""
    binding = ".".join(words)
    try:
        selector = binding_selector(exchange, binding, PROVIDERS)
    except If2KeyError as exc:  # matches no key of a known provider, or too many '#' to say compactly
        if "too many '#'" in str(exc):
            assert words.count("#") >= 3
            return
        assert "is not in the provider table" in str(exc)
        selector = "FALSE"
    for key in keys:
        key = RoutingKey(exchange, key.version, key.provider, key.subtype if (exchange == "DENM") ==
                         (key.message_type == "DENM") else ("3" if exchange == "DENM" else "0"), key.tile)
        props = croads_properties(If2Envelope(key), PROVIDERS)
        assert selects(selector, props) == matches(binding, str(key)), (binding, str(key), selector)


@settings(max_examples=200, deadline=None)
@given(types, st.lists(st.sampled_from(["*", "0", "1", "2", "3"]), max_size=18), st.booleans(), st.booleans())
def test_prefix_bindings_round_trip(exchange: str, digits: list[str], fix_provider: bool, fix_version: bool) -> None:
    binding = ".".join([exchange, "1_2" if fix_version else "*", "RWS" if fix_provider else "*", "*", *digits])
    binding = binding + ".#" if len(digits) < 18 else binding
    back = selector_bindings(binding_selector(exchange, binding, PROVIDERS), PROVIDERS)
    words = binding.removesuffix(".#").split(".")
    while words[-1] == "*":  # every key has 22 words: trailing '*' before a '#' add nothing
        words.pop()
    canonical = ".".join(words) + (".#" if len(words) < 22 else "")
    assert back == {exchange: ["#" if canonical == f"{exchange}.#" else canonical]}


# ------------------------------------------------------------------ IP_112/113: the area's tiles
def _offset(lat: float, lon: float, metres: float, bearing_deg: float) -> tuple[float, float]:
    """The point ``metres`` from (lat, lon) along ``bearing_deg`` on a sphere of the WGS84 equator's radius."""
    d, b = metres / 6378137.0, math.radians(bearing_deg)
    p1, l1 = math.radians(lat), math.radians(lon)
    p2 = math.asin(math.sin(p1) * math.cos(d) + math.cos(p1) * math.sin(d) * math.cos(b))
    l2 = l1 + math.atan2(math.sin(b) * math.sin(d) * math.cos(p1), math.cos(d) - math.sin(p1) * math.sin(p2))
    return math.degrees(p2), math.degrees(l2)


@pytest.mark.parametrize(("if2_type", "zoom"), [("DENM", 13), ("IVI", 13), ("MAP", 14), ("SPAT", 14)])
@pytest.mark.parametrize("radius_m", [0.0, 300.0, 1000.0, 5000.0])
def test_the_area_around_lat_lon_is_covered_at_the_types_zoom(if2_type: str, zoom: int, radius_m: float) -> None:
    """quadTree: the key's tile first (IP_038), then tiles of zoom 13 (IP_112) or 14 (IP_113) that hold
    every point within the radius (sampled on circles); the broker's rules accept it."""
    lat, lon = 51.485992, 4.735311
    subtype = "3" if if2_type == "DENM" else "0"
    envelope = If2Envelope(RoutingKey(if2_type, "1.2.1", "RWS", subtype, HAZELDONK), 10_000, lat, lon)
    props = croads_properties(envelope, PROVIDERS, radius_m)
    tiles = quadtree.parse_property(props["quadTree"])
    assert tiles[0] == HAZELDONK and all(len(t) == zoom for t in tiles[1:]), tiles
    for metres in (radius_m * k / 4 for k in range(5)):
        for bearing in range(0, 360, 15):
            point_tile = quadtree.from_latlon(*_offset(lat, lon, metres * 0.999, bearing), zoom)
            assert any(point_tile.startswith(t) or t.startswith(point_tile) for t in tiles), (metres, bearing)
    assert validate_application_properties(props) == []
    if radius_m == 0.0:
        assert tiles == [HAZELDONK]  # the point's own area tile holds the reference tile: nothing to add


def test_without_lat_lon_the_area_is_around_the_tiles_centre() -> None:
    props = croads_properties(If2Envelope(RoutingKey("DENM", "1.2.1", "RWS", "3", HAZELDONK)), PROVIDERS, 1000.0)
    tiles = quadtree.parse_property(props["quadTree"])
    assert tiles[0] == HAZELDONK and len(tiles) > 1 and "latitude" not in props


def test_an_area_the_cover_refuses_is_a_clear_refusal() -> None:
    with pytest.raises(If2KeyError, match="area radius -1.0 m: must be 0 or more"):
        croads_properties(If2Envelope(RoutingKey("DENM", "1.2.1", "RWS", "3", HAZELDONK)), PROVIDERS, -1.0)
    with pytest.raises(If2KeyError, match="area: .*radius"):  # the cover's own limit (the toolkit's error)
        croads_properties(If2Envelope(RoutingKey("DENM", "1.2.1", "RWS", "3", HAZELDONK)), PROVIDERS, 1e9)


def test_the_area_of_a_tile_is_remembered_and_the_same_for_each_point_in_it() -> None:
    south, west, north, east = quadtree.bounds(HAZELDONK)
    areas = keys.AreaCover(limit=2)
    corners = [croads_properties(If2Envelope(RoutingKey("DENM", "1.2.1", "RWS", "3", HAZELDONK), None, lat, lon),
                                 PROVIDERS, 1000.0, areas)["quadTree"]
               for lat in (south + 1e-9, north - 1e-9) for lon in (west + 1e-9, east - 1e-9)]
    assert len(set(corners)) == 1 and corners[0] == keys.area_property(HAZELDONK, "DENM", 1000.0)
    areas.property(HAZELDONK, "IVIM", 1000.0)
    areas.property(HAZELDONK, "SPATEM", 1000.0)
    assert len(areas._known) == 2 and (HAZELDONK, "DENM", 1000.0) not in areas._known  # the oldest forgotten


def test_properties_the_broker_refuses_are_refused_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's own rules run on what the bridge builds: a quadTree without its zoom-18 reference
    tile (a broken area_property, by fault injection) is refused, naming IP_038."""
    monkeypatch.setattr(keys, "area_property", lambda *_: ",1202020,")
    with pytest.raises(If2KeyError, match="the node would refuse it: .*quadTree.*IP_038"):
        croads_properties(If2Envelope(RoutingKey("DENM", "1.2.1", "RWS", "3", HAZELDONK)), PROVIDERS)
