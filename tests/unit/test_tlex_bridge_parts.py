"""The TLEX bridge's parts without sockets: its configuration's errors, the translator (IP_104 gate,
drops, MAPEM repetition while SPATEMs flow: IP_048/049, the destination area's tiles: IP_113), the
MAPEM store, and the message encoder against proton's."""
from __future__ import annotations

from pathlib import Path

import pytest
from proton import Message

import jms_selectors
from interchange.actor import check_properties
from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.config import ControllerConfig, TlexBridgeConfig
from interchange.bridges.tlex.payloads import stand_in
from interchange.bridges.tlex.publication import MAPEM_SUPPRESSED, WAITS_FOR_MAPEM, BiMessage, Dropped, Translator, tile
from interchange.testing.tlex_harness import TLCS
from quadtree import cover_circle
from quadtree.property import parse_property

HAZELDONK = (51.485992, 4.735311)


CONTROLLERS = [ControllerConfig(tlc_id=TLCS[0], intersections=["5-57"], latitude=HAZELDONK[0], longitude=HAZELDONK[1]),
               ControllerConfig(tlc_id=TLCS[1], intersections=["5-58", "5-59"], latitude=52.0116, longitude=4.3571)]


def test_bridge_config_errors() -> None:
    base = dict(api_url="https://x", domain="d", actor=Path("a"), publisher_id="NL00001", originating_country="NL")
    with pytest.raises(ValueError, match="exactly one of authorization"):
        TlexBridgeConfig(**base, controllers=CONTROLLERS)
    with pytest.raises(ValueError, match="belongs to two controllers"):
        TlexBridgeConfig(**base, authorization="t", controllers=[CONTROLLERS[0], CONTROLLERS[0].model_copy(
            update={"tlc_id": "NLZH0099"})])
    with pytest.raises(ValueError, match="shard_id 1..2"):
        TlexBridgeConfig(**base, authorization="t", controllers=CONTROLLERS, shard_count=2)
    with pytest.raises(ValueError, match="region-id"):
        ControllerConfig(tlc_id="NLZH0001", intersections=["x"], latitude=1, longitude=1)


def test_mapem_repeated_while_spatems_flow() -> None:
    """IP_048: the bridge repeats a controller's MAPEM at least every 9 min while its SPATEMs flow
    (with a fresh TTL); a controller that stopped sending has nothing repeated; IP_049 lets an
    operator skip identical copies closer than mapem_min_interval_ms (default: all published)."""
    base = dict(api_url="https://x", authorization="t", domain="d", actor=Path("a"), publisher_id="NL00001",
                originating_country="NL", controllers=CONTROLLERS)
    translator = Translator(TlexBridgeConfig(**base))  # type: ignore[arg-type]

    def kinds(tlc: str, payload_type: int, body: bytes, now_ms: int) -> list[tuple[str, bytes]] | Dropped:
        result = translator.to_bi(Payload(payload_type, 1, body, tlc), now_ms)
        return result if isinstance(result, Dropped) else [(m.kind, m.body) for m in result]

    minute = 60_000
    assert kinds(TLCS[0], 5, b"map-1", 0) == [("MAPEM", b"map-1")]
    assert kinds(TLCS[0], 4, b"s1", 8 * minute) == [("SPATEM", b"s1")]
    repeated = translator.to_bi(Payload(4, 1, b"s2", TLCS[0]), 9 * minute)
    assert [(m.kind, m.body, m.ttl_ms) for m in repeated] == [  # type: ignore[union-attr]  # a fresh MAPEM TTL
        ("MAPEM", b"map-1", 648_000), ("SPATEM", b"s2", 1000)]
    assert kinds(TLCS[0], 4, b"s3", 9 * minute + 100) == [("SPATEM", b"s3")]  # once per interval
    assert kinds(TLCS[0], 5, b"map-1", 10 * minute) == [("MAPEM", b"map-1")]  # the controller's own copies: all
    assert kinds(TLCS[0], 5, b"map-1", 10 * minute + 1000) == [("MAPEM", b"map-1")]
    assert kinds(TLCS[0], 4, b"s4", 18 * minute) == [("SPATEM", b"s4")]  # its last copy restarted the clock
    assert kinds(TLCS[0], 4, b"s5", 19 * minute + 1000) == [("MAPEM", b"map-1"), ("SPATEM", b"s5")]
    assert translator.mapems.repeated == 2 and translator.mapems.suppressed == 0

    quiet = Translator(TlexBridgeConfig(**base, mapem_min_interval_ms=60_000))  # type: ignore[arg-type]
    assert [m.body for m in quiet.to_bi(Payload(5, 1, b"map-1", TLCS[1]), 0)] == [b"map-1"]  # type: ignore[union-attr]
    assert quiet.to_bi(Payload(5, 1, b"map-1", TLCS[1]), 1000) == Dropped(
        "identical MAPEM within mapem_min_interval_ms (IP_049)", TLCS[1], MAPEM_SUPPRESSED)
    assert [m.body for m in quiet.to_bi(Payload(5, 1, b"map-2", TLCS[1]), 2000)] == [b"map-2"]  # type: ignore[union-attr]  # changed
    assert [m.body for m in quiet.to_bi(Payload(5, 1, b"map-2", TLCS[1]), 62_000)] == [b"map-2"]  # type: ignore[union-attr]
    assert quiet.mapems.suppressed == 1


def test_mapem_store_keeps_nine_minutes(tmp_path: Path) -> None:
    from interchange.bridges.tlex.mapem_store import KEEP_MS, MapemStore

    store = MapemStore(tmp_path / "tlex")
    store.save(TLCS[0], 1_000_000, b"map-1")
    store.save(TLCS[0], 1_050_000, b"map-2")  # the newer one replaces it
    store.save(TLCS[1], 1_000_000, b"map-b")
    assert store.load([TLCS[0], TLCS[1], TLCS[2]], 1_100_000) == {TLCS[0]: (1_050_000, b"map-2"),
                                                                   TLCS[1]: (1_000_000, b"map-b")}
    assert store.load([TLCS[0], TLCS[1]], 1_000_000 + KEEP_MS) == {TLCS[0]: (1_050_000, b"map-2")}
    translator = Translator(TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=Path("a"),
                                             publisher_id="NL00001", originating_country="NL", controllers=CONTROLLERS))
    restored = translator.restored_mapem(TLCS[0], b"map-2", age_ms=600_000, now_ms=2_000_000)
    assert restored.ttl_ms == 48_000 and restored.body == b"map-2"  # 648 s - 600 s
    after = translator.to_bi(Payload(4, 1, b"s", TLCS[0]), 2_000_000)  # SPATEM may follow, and the MAPEM
    assert [m.kind for m in after] == ["MAPEM", "SPATEM"]  # type: ignore[union-attr]  # is 600 s old: repeated


def test_message_encoder_matches_proton() -> None:
    from interchange.bridges.tlex.outbound import MessageEncoder

    translator = Translator(TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=Path("a"),
                                             publisher_id="NL00001", originating_country="NL", controllers=CONTROLLERS))
    encoder = MessageEncoder()
    for body in (b"", b"m" * 255, b"M" * 256, stand_in("MAPEM", 1, "5-57", 1)):
        [message] = translator.to_bi(Payload(5, 1, body, TLCS[0]), 0)  # type: ignore[misc]
        assert isinstance(message, BiMessage)
        decoded = Message()
        decoded.decode(encoder.encode(message))
        assert bytes(decoded.body) == body and decoded.properties == message.properties
        assert decoded.ttl == 648.0 and decoded.durable is False
        assert encoder.encode(message) == encoder.encode(message)


def test_translator_ip104_and_drops() -> None:
    sharded = [c.model_copy(update={"shard_id": i + 1}) for i, c in enumerate(CONTROLLERS)]
    config = TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=Path("a"), publisher_id="NL00001",
                              originating_country="NL", controllers=sharded, shard_count=2)
    translator = Translator(config)
    spat = Payload(4, 1, b"s", TLCS[0])
    assert translator.to_bi(spat, 0) == Dropped("SPATEM before the controller's first MAPEM (IP_104)", TLCS[0],
                                                WAITS_FOR_MAPEM)
    assert [m.kind for m in translator.to_bi(Payload(5, 1, b"m", TLCS[0]), 0)] == ["MAPEM"]  # type: ignore[union-attr]
    published = translator.to_bi(spat, 1)
    assert isinstance(published, list) and [m.body for m in published] == [b"s"]
    assert published[0].properties["shardId"] == 1 and published[0].properties["shardCount"] == 2
    assert translator.to_bi(Payload(4, 1, b"s", TLCS[1]), 1) == Dropped(
        "SPATEM before the controller's first MAPEM (IP_104)", TLCS[1], WAITS_FOR_MAPEM)
    assert isinstance(translator.to_bi(Payload(0x21, 1, b"?", TLCS[0]), 1), Dropped)
    assert isinstance(translator.to_bi(Payload(5, 1, b"m", "NLXX0000"), 1), Dropped)
    assert translator.to_controllers({"messageType": "SREM", "id": ",5-58,5-57,"}, b"r", 9) == [
        Payload(9, 9, b"r", TLCS[1]), Payload(9, 9, b"r", TLCS[0])]
    assert isinstance(translator.to_controllers({"messageType": "SREM"}, b"r", 9), Dropped)
    assert isinstance(translator.to_controllers({"messageType": "SREM", "id": ",9-9,"}, b"r", 9), Dropped)
    assert translator.srem_selectors() == ["messageType = 'SREM' AND (id LIKE '%,5-57,%' OR id LIKE '%,5-58,%' "
                                           "OR id LIKE '%,5-59,%')"]
    split = translator.srem_selectors(max_length=70)
    assert split == ["messageType = 'SREM' AND (id LIKE '%,5-57,%' OR id LIKE '%,5-58,%')",
                     "messageType = 'SREM' AND (id LIKE '%,5-59,%')"]


def test_messages_carry_their_destination_area_ip113() -> None:
    """IP_113: besides the zoom-18 tile of the reference position (IP_038), zoom-14 tiles covering
    the destination area (a circle of the configured radius, per message type or per controller), so
    a consumer filtering on a neighbouring zoom-14 tile gets the message; at most 9 tiles for 1 km;
    the capabilities cover the same area; the broker's rules accept the properties."""
    corner = ControllerConfig(tlc_id=TLCS[0], intersections=["5-57"], latitude=51.4800, longitude=4.7460)
    wide = ControllerConfig(tlc_id=TLCS[1], intersections=["5-58"], latitude=52.0116, longitude=4.3571,
                            area_radius_m=1000)
    config = TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=Path("a"), publisher_id="NL00001",
                              originating_country="NL", controllers=[corner, wide], area_radius_m={"MAPEM": 0})
    translator = Translator(config)
    [map_message] = translator.to_bi(Payload(5, 1, stand_in("MAPEM", 1, "5-57", 1), TLCS[0]), 0)  # type: ignore[misc]
    [spat] = translator.to_bi(Payload(4, 1, stand_in("SPATEM", 1, "5-57", 2), TLCS[0]), 1)  # type: ignore[misc]
    reference, *area = parse_property(str(spat.properties["quadTree"]))
    assert reference == tile(corner) and len(area) > 1 and {len(t) for t in area} == {14}
    assert reference[:14] in area and set(area) == set(cover_circle(corner.latitude, corner.longitude, 300, 14))
    neighbour = next(t for t in area if t != reference[:14])
    assert jms_selectors.compile(f"quadTree LIKE '%,{neighbour}%'").matches(spat.properties)
    assert not jms_selectors.compile(f"quadTree LIKE '%,{neighbour}%'").matches(
        {"quadTree": f",{reference},"})  # what the zoom-18 tile alone gave: the consumer missed it
    assert parse_property(str(map_message.properties["quadTree"])) == [reference, reference[:14]]  # MAPEM: radius 0
    wide_tiles = translator.area(wide, "SPATEM")
    assert 1 < len(wide_tiles) <= 9 and translator.area(wide, "MAPEM") == wide_tiles  # the controller's radius
    assert check_properties(spat.properties) == []
    caps = {c.application.publicationId: c.application.quadTree for c in translator.capabilities()}
    assert caps[f"NL00001:{TLCS[0]}-SPATEM"] == area and caps[f"NL00001:{TLCS[1]}-SSEM"] == wide_tiles
    with pytest.raises(ValueError, match="area_radius_m: SREM: the bridge publishes SPATEM, MAPEM, SSEM"):
        TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=Path("a"), publisher_id="NL00001",
                         originating_country="NL", controllers=[corner], area_radius_m={"SREM": 10})
    with pytest.raises(ValueError, match="less than or equal to 10000"):
        ControllerConfig(tlc_id=TLCS[0], intersections=["5-57"], latitude=51.48, longitude=4.74, area_radius_m=20_000)
