"""Which C-Roads message a TCPStreaming payload is: its ITS PDU header (where a third-party UPER
encoder puts it: tests/integration/test_tlex_its_header.py), else its type byte by the controller's
mapping; the mapping in ``[tlex]`` (per service and per controller, both directions) and its
refusals; the rate-limited records of the warnings."""
from __future__ import annotations

from pathlib import Path

import pytest

from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.config import ControllerConfig, TlexBridgeConfig
from interchange.bridges.tlex.payloads import (MESSAGE_IDS, TYPICAL_SIZE, Identified, PayloadTypes, Unidentified, identify,
                                                stand_in)
from interchange.bridges.tlex.publication import NOT_BRIDGED, UNIDENTIFIED, Dropped, Translator
from interchange.ground.throttle import Throttle

OTHER = PayloadTypes({"SPATEM": 1, "MAPEM": 2, "SREM": 3, "SSEM": 4})


def test_identify_by_header_then_by_type_byte() -> None:
    spatem = stand_in("SPATEM", 1, "5-57", 1)
    assert identify(1, spatem, OTHER) == Identified("SPATEM", "header")
    assert identify(2, spatem, OTHER) == Identified("SPATEM", "header", mapped="MAPEM")  # a wrong mapping: told
    assert identify(2, b"<map/>", OTHER) == Identified("MAPEM", "type")  # no header: the type byte
    assert identify(2, bytes([9, 4, 0, 0, 0, 1]), OTHER) == Identified("MAPEM", "type")  # protocolVersion 9: no header
    unknown = identify(0x21, b"garbage", OTHER)
    assert isinstance(unknown, Unidentified) and unknown.reason == (
        "no ITS PDU header (protocolVersion 103) and type byte 0x21 is not in the mapping "
        "(0x01 SPATEM, 0x02 MAPEM, 0x03 SREM, 0x04 SSEM)")
    assert "(3 bytes)" in identify(0x21, b"abc", OTHER).reason  # type: ignore[union-attr]
    assert "(messageID 99)" in identify(0x21, bytes([2, 99, 0, 0, 0, 1]), OTHER).reason  # type: ignore[union-attr]
    assert identify(0x21, bytes([2, 1, 0, 0, 0, 1]), OTHER) == Identified("DENM", "header")  # named, not bridged
    # "type": the header is not read
    assert identify(1, stand_in("MAPEM", 1, "5-57", 1), OTHER, "type") == Identified("SPATEM", "type")
    assert isinstance(identify(0x21, spatem, OTHER, "type"), Unidentified)
    assert identify(7, bytes([3, 5, 0, 0, 0, 1]), OTHER, versions=frozenset({1, 2})) == Unidentified(
        "no ITS PDU header (protocolVersion 3) and type byte 0x07 is not in the mapping "
        "(0x01 SPATEM, 0x02 MAPEM, 0x03 SREM, 0x04 SSEM)")


@pytest.mark.parametrize("mapping, problem", [
    ({"SPATEM": 0xF0}, "SPATEM type byte 240: 0x00-0xEF (0xF0-0xFF are reserved for the protocol"),
    ({"SPATEM": 1, "MAPEM": 1}, "type byte 0x01 is given to both SPATEM and MAPEM"),
    ({"DENM": 1}, "'DENM' is not a traffic-light message type"),
    ({"SPATEM": -1}, "SPATEM type byte -1"),
])
def test_a_mapping_that_cannot_work_is_refused(mapping: dict[str, int], problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        PayloadTypes(mapping)


CONTROLLERS = [ControllerConfig(tlc_id="NLZH0023", intersections=["5-57"], latitude=51.48, longitude=4.73),
               ControllerConfig(tlc_id="NLZH0024", intersections=["5-58"], latitude=52.01, longitude=4.35,
                                payload_types={"SREM": 7})]
BASE = dict(api_url="https://x", authorization="t", domain="d", actor=Path("a"), publisher_id="NL00001",
            originating_country="NL")


def test_tlex_maps_type_bytes_per_service_and_per_controller_both_ways() -> None:
    config = TlexBridgeConfig(**BASE, controllers=CONTROLLERS,  # type: ignore[arg-type]
                              payload_types={"SPATEM": 1, "MAPEM": 2, "SREM": 3, "SSEM": 4})
    assert config.types_of(CONTROLLERS[0]) == OTHER
    assert config.types_of(CONTROLLERS[1]).by_kind == {"SPATEM": 1, "MAPEM": 2, "SREM": 7, "SSEM": 4}
    translator = Translator(config)
    # in: the header decides; a payload without one by the controller's mapping
    assert [m.kind for m in translator.to_bi(Payload(0x33, 1, stand_in("MAPEM", 1, "5-57", 1), "NLZH0023"), 0)] == [  # type: ignore[union-attr]
        "MAPEM"]
    assert [m.kind for m in translator.to_bi(Payload(4, 1, b"<ssem/>", "NLZH0023"), 0)] == ["SSEM"]  # type: ignore[union-attr]
    dropped = translator.to_bi(Payload(0x33, 1, b"<?>", "NLZH0023"), 0)
    assert isinstance(dropped, Dropped) and dropped.cause == UNIDENTIFIED
    assert translator.to_bi(Payload(3, 1, b"<srem/>", "NLZH0023"), 0) == Dropped(
        "a SREM (by its type) is not bridged: SPATEM, MAPEM and SSEM are", "NLZH0023", NOT_BRIDGED)
    # out: each controller's SREM type byte
    assert translator.to_controllers({"messageType": "SREM", "id": ",5-57,5-58,"}, b"r", 9) == [
        Payload(3, 9, b"r", "NLZH0023"), Payload(7, 9, b"r", "NLZH0024")]
    # the default: the ETSI messageIDs
    default = Translator(TlexBridgeConfig(**BASE, controllers=CONTROLLERS[:1]))  # type: ignore[arg-type]
    assert default.to_controllers({"messageType": "SREM", "id": ",5-57,"}, b"r", 9) == [Payload(9, 9, b"r", "NLZH0023")]


@pytest.mark.parametrize("tlex, problem", [
    ({"payload_types": {"SPATEM": 9}}, "tlex.payload_types: type byte 0x09 is given to both SPATEM and SREM"),
    ({"payload_types": {"SPATEM": 250}}, "tlex.payload_types: SPATEM type byte 250"),
    ({"controllers": [CONTROLLERS[0].model_copy(update={"payload_types": {"SREM": 4}})]},
     "controller NLZH0023: payload_types: type byte 0x04 is given to both SPATEM and SREM"),
    ({"identify": "guess"}, "identify"),
])
def test_a_tlex_mapping_that_cannot_work_is_refused_when_read(tlex: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(")):
        TlexBridgeConfig.model_validate({**BASE, "controllers": [c.model_dump() for c in CONTROLLERS[:1]], **tlex})


def test_throttle_lets_the_first_through_then_one_per_interval_with_the_count() -> None:
    throttle = Throttle(60.0, max_keys=2)
    assert throttle.hit("a", 0.0) == 1
    assert [throttle.hit("a", t) for t in (1.0, 30.0, 59.9)] == [None, None, None]
    assert throttle.hit("a", 60.0) == 4  # three held back and this one
    assert throttle.hit("b", 61.0) == 1 and throttle.hit("a", 61.0) is None
    assert throttle.hit("c", 62.0) == 1  # a third key: the one recorded longest ago ("a", at 60) is forgotten
    assert throttle.hit("b", 63.0) is None and throttle.hit("a", 63.0) == 1
    with pytest.raises(ValueError):
        Throttle(-1)


@pytest.mark.parametrize("sequence", [0, 1, 219, 256, 1000, 2**40 + 7])
@pytest.mark.parametrize("size", [0, 30, 255, 256, 257, 1300])
def test_a_stand_in_is_its_header_marker_then_the_padding_of_its_sequence(sequence: int, size: int) -> None:
    body = bytes([2, MESSAGE_IDS["MAPEM"]]) + (7).to_bytes(4, "big") + f"MAPEM 5-57 #{sequence};".encode()
    padding = bytes((i * 37 + sequence) & 0xFF for i in range(max(0, size - len(body))))
    assert stand_in("MAPEM", 7, "5-57", sequence, size) == body + padding
    assert len(stand_in("MAPEM", 7, "5-57", sequence)) == TYPICAL_SIZE["MAPEM"]
