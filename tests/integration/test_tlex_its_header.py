"""Where UPER puts the ITS PDU header, by a third-party encoder (asn1tools, from
``tlex_counterpart/its.asn``, written from ETSI TS 102 894-2 / TS 103 301): protocolVersion,
messageID and stationID are octets 0, 1 and 2-5 of any traffic-light message, whatever follows, so
the TLEX bridge identifies a payload by them (with the profile's messageIDs) whatever type byte the
streaming service used."""
from __future__ import annotations

import pytest
from tlex_counterpart import its

from interchange.bridges.tlex.payloads import DEFAULT_TYPES, ETSI_IDS, MESSAGE_IDS, Identified, identify, its_header
from interchange.ground.profile import MESSAGE_TYPES, MessageType


@pytest.mark.parametrize("kind", ["SPATEM", "MAPEM", "SREM", "SSEM"])
@pytest.mark.parametrize("version", [1, 2])
def test_uper_puts_the_its_pdu_header_in_the_first_six_octets(kind: str, version: int) -> None:
    """asn1tools encodes ItsPduHeader and a message that starts with it (its.asn, written from
    ETSI TS 102 894-2 / TS 103 301): protocolVersion, messageID and stationID are octets 0, 1, 2-5,
    whatever follows; the bridge reads them there with the profile's messageIDs."""
    assert its.header(version, its.MESSAGE_IDS[kind], 0xA1B2C3D4) == bytes([version, its.MESSAGE_IDS[kind]]) + \
        bytes.fromhex("a1b2c3d4")
    encoded = its.message(kind, 4_000_000_001, "5-57", 77, filler=300, protocol_version=version)
    header = its_header(encoded)
    assert header is not None and (header.protocol_version, header.message_id, header.station_id) == (
        version, its.MESSAGE_IDS[kind], 4_000_000_001)
    assert ETSI_IDS[kind] == its.MESSAGE_IDS[kind] == MESSAGE_TYPES[MessageType(kind)].etsi_message_id
    for type_byte in (1, 0x33, MESSAGE_IDS[kind]):  # whatever byte the service used
        assert identify(type_byte, encoded, DEFAULT_TYPES) == Identified(kind, "header", DEFAULT_TYPES.by_byte.get(
            type_byte) if DEFAULT_TYPES.by_byte.get(type_byte) not in (None, kind) else None)
