"""Payload kinds carried over TCPStreaming, and recognisable stand-in payloads for the simulator.

The specs leave the payload type byte to the application (6.3.4.5; 0xF0-0xFF are the protocol's).
Our assumption, configurable in the bridge: the payload type byte is the ETSI ITS PDU header
``messageID`` of the message carried (ETSI TS 102 894-2: spatem 4, mapem 5, srem 9, ssem 10, as the
profile's message types hold them), and
the payload is the UPER-encoded message, whose first two bytes are that header's protocolVersion
and messageID (both byte-aligned in UPER). The bridge reads nothing else of the payload.

:func:`stand_in` builds such a payload for tests and demos: a real ITS PDU header (protocol
version 2, the messageID, the station id), then an ASCII marker naming kind, intersection and
sequence number, padded to a typical size. It is not a decodable SPATEM: the bridge never decodes.
"""
from __future__ import annotations

import struct
import time
from typing import Final

from interchange.ground.profile import MESSAGE_TYPES, MessageType

#: ETSI TS 102 894-2 ItsPduHeader messageID of the messages traffic-light controllers exchange (the profile's).
MESSAGE_IDS: Final = {t.value: id_ for t in (MessageType.SPATEM, MessageType.MAPEM, MessageType.SREM, MessageType.SSEM)
                      if (id_ := MESSAGE_TYPES[t].etsi_message_id) is not None}
KINDS: Final = {value: kind for kind, value in MESSAGE_IDS.items()}
#: Typical UPER sizes (bytes) of one message: SPATEM of a 10-signal-group crossing, a MAPEM, an SREM/SSEM.
TYPICAL_SIZE: Final = {"SPATEM": 180, "MAPEM": 1200, "SREM": 60, "SSEM": 70}
ITS_PROTOCOL_VERSION: Final = 2


def stand_in(kind: str, station_id: int, intersection: str, sequence: int, size: int | None = None) -> bytes:
    """A recognisable stand-in payload of ``kind`` (see the module docstring)."""
    header = bytes([ITS_PROTOCOL_VERSION, MESSAGE_IDS[kind]]) + (station_id & 0xFFFFFFFF).to_bytes(4, "big")
    marker = f"{kind} {intersection} #{sequence};".encode("ascii")
    body = header + marker
    wanted = TYPICAL_SIZE[kind] if size is None else size
    return body + bytes((i * 37 + sequence) & 0xFF for i in range(max(0, wanted - len(body))))


def kind_of(payload_type: int) -> str | None:
    """The message kind of a payload type byte, None for kinds the bridge does not carry."""
    return KINDS.get(payload_type)


_STAMP = struct.Struct(">QII")  # send time (ns, wall clock), station id, sequence number


def stamped(kind: str, station_id: int, intersection: str, sequence: int) -> bytes:
    """A stand-in whose bytes 6..22 carry the send time (ns), station id and sequence number, for
    benchmarks measuring latency and loss at the far end (``read_stamp``)."""
    data = bytearray(stand_in(kind, station_id, intersection, sequence, max(TYPICAL_SIZE[kind], 6 + _STAMP.size)))
    _STAMP.pack_into(data, 6, time.time_ns(), station_id & 0xFFFFFFFF, sequence & 0xFFFFFFFF)
    return bytes(data)


def read_stamp(payload: bytes) -> tuple[int, int, int]:
    """(send time ns, station id, sequence) of a :func:`stamped` payload."""
    return _STAMP.unpack_from(payload, 6)
