"""ITS messages of the counterpart, UPER-encoded by a third-party encoder (asn1tools) from
``its.asn``: a real ItsPduHeader in front of a stand-in message body.

The messageIDs are ETSI TS 102 894-2's (spatem 4, mapem 5, srem 9, ssem 10), written here from
the standard, not taken from the project.
"""
from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import asn1tools

MESSAGE_IDS = {"SPATEM": 4, "MAPEM": 5, "SREM": 9, "SSEM": 10}
_SPEC = Path(__file__).with_name("its.asn")


@cache
def _compiled() -> Any:
    return asn1tools.compile_files([str(_SPEC)], "uper")


def header(protocol_version: int, message_id: int, station_id: int) -> bytes:
    """An ItsPduHeader alone, UPER."""
    return bytes(_compiled().encode("ItsPduHeader", {
        "protocolVersion": protocol_version, "messageID": message_id, "stationID": station_id}))


def message(kind: str, station_id: int, intersection: str, sequence: int, *, filler: int = 0,
            protocol_version: int = 2) -> bytes:
    """A traffic-light message of ``kind``, UPER: header, then the stand-in body."""
    return bytes(_compiled().encode("TrafficLightMessage", {
        "header": {"protocolVersion": protocol_version, "messageID": MESSAGE_IDS[kind], "stationID": station_id},
        "message": {"intersection": intersection, "sequence": sequence, "filler": bytes(i % 251 for i in range(filler))}}))


def decode(data: bytes) -> dict[str, Any]:
    """A traffic-light message back (what a controller reads of an SREM)."""
    return dict(_compiled().decode("TrafficLightMessage", data))
