"""What a TCPStreaming payload carries, and which C-Roads message type it is (sans-I/O).

:func:`identify`: by the payload's ITS PDU header (first octet protocolVersion, second messageID,
UPER; ``identify = "header"``), else, or with ``"type"`` only, by the type byte's mapping
(:class:`PayloadTypes`, both ways; default the ETSI messageIDs: SPATEM 4, MAPEM 5, SREM 9,
SSEM 10). A payload neither identifies is :class:`Unidentified`. :func:`stand_in` builds a test
payload with a real ITS PDU header (not a decodable SPATEM). Why the header can be read this way
(TLEX 6.3.4.5, ETSI TS 102 894-2): docs/tlex-bridge.md ("Which message a payload is").
"""
from __future__ import annotations

import functools
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from interchange.ground.profile import MESSAGE_TYPES, MessageType

#: The messages traffic-light controllers exchange through a streaming service.
TRAFFIC_LIGHT_KINDS: Final = (MessageType.SPATEM.value, MessageType.MAPEM.value, MessageType.SREM.value,
                              MessageType.SSEM.value)
#: ETSI TS 102 894-2 ItsPduHeader messageID of every message type the profile gives one (SPATEM 4, ...).
ETSI_IDS: Final[Mapping[str, int]] = MappingProxyType(
    {t.value: spec.etsi_message_id for t, spec in MESSAGE_TYPES.items() if spec.etsi_message_id is not None})
#: messageID -> message type, for reading a payload's own header (DENM 1, CAM 2, SPATEM 4, ...).
KINDS: Final[Mapping[int, str]] = MappingProxyType({value: kind for kind, value in ETSI_IDS.items()})
#: The traffic-light messages' messageIDs: also the default payload type bytes.
MESSAGE_IDS: Final[Mapping[str, int]] = MappingProxyType({kind: ETSI_IDS[kind] for kind in TRAFFIC_LIGHT_KINDS})
ITS_PDU_HEADER_SIZE: Final = 6  #: protocolVersion (1 octet), messageID (1), stationID (4)
#: protocolVersion values read as an ITS PDU header (TS 103 301 V1: 1, V2: 2; one more to come).
DEFAULT_ITS_PROTOCOL_VERSIONS: Final = (1, 2, 3)
#: Typical UPER sizes (bytes) of one message: SPATEM of a 10-signal-group crossing, a MAPEM, an SREM/SSEM.
TYPICAL_SIZE: Final = {"SPATEM": 180, "MAPEM": 1200, "SREM": 60, "SSEM": 70}
ITS_PROTOCOL_VERSION: Final = 2
FIRST_RESERVED_TYPE: Final = 0xF0  #: 0xF0-0xFF are the protocol's (6.3.4.5)
Identification = Literal["header", "type"]


@dataclass(frozen=True, slots=True)
class ItsPduHeader:
    protocol_version: int
    message_id: int
    station_id: int


def its_header(payload: bytes) -> ItsPduHeader | None:
    """The first six octets of a payload as an ITS PDU header (None when it is shorter)."""
    if len(payload) < ITS_PDU_HEADER_SIZE:
        return None
    return ItsPduHeader(payload[0], payload[1], int.from_bytes(payload[2:6], "big"))


class PayloadTypes:
    """One controller's payload type bytes, both ways (message type <-> type byte)."""

    __slots__ = ("by_byte", "by_kind")

    def __init__(self, by_kind: Mapping[str, int]) -> None:
        problem = mapping_problem(by_kind)
        if problem is not None:
            raise ValueError(problem)
        self.by_kind: Mapping[str, int] = MappingProxyType(dict(by_kind))
        self.by_byte: Mapping[int, str] = MappingProxyType({value: kind for kind, value in by_kind.items()})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PayloadTypes) and dict(self.by_kind) == dict(other.by_kind)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.by_kind.items())))

    def __repr__(self) -> str:
        return f"PayloadTypes({dict(self.by_kind)})"


def mapping_problem(by_kind: Mapping[str, int]) -> str | None:
    """Why ``by_kind`` cannot be a controller's type bytes (None: it can)."""
    for kind, value in by_kind.items():
        if kind not in TRAFFIC_LIGHT_KINDS:
            return f"{kind!r} is not a traffic-light message type ({', '.join(TRAFFIC_LIGHT_KINDS)})"
        if not 0 <= value < FIRST_RESERVED_TYPE:
            return f"{kind} type byte {value}: 0x00-0xEF (0xF0-0xFF are reserved for the protocol, TLEX 6.3.4.5)"
    seen: dict[int, str] = {}
    for kind, value in by_kind.items():
        if value in seen:
            return f"type byte 0x{value:02x} is given to both {seen[value]} and {kind}"
        seen[value] = kind
    return None


#: The default type bytes: the ETSI messageIDs.
DEFAULT_TYPES: Final = PayloadTypes(MESSAGE_IDS)


@dataclass(frozen=True, slots=True)
class Identified:
    """A payload's message type; ``mapped`` is the type byte's other message type when the
    payload's own header says otherwise (a wrong mapping, logged)."""

    kind: str
    by: Identification
    mapped: str | None = None


@dataclass(frozen=True, slots=True)
class Unidentified:
    reason: str


def identify(payload_type: int, payload: bytes, types: PayloadTypes, how: Identification = "header",
             versions: frozenset[int] = frozenset(DEFAULT_ITS_PROTOCOL_VERSIONS)) -> Identified | Unidentified:
    """The message type of a payload (see the module docstring)."""
    mapped = types.by_byte.get(payload_type)
    if how == "header" and len(payload) >= ITS_PDU_HEADER_SIZE and payload[0] in versions:
        kind = KINDS.get(payload[1])
        if kind is not None:
            return Identified(kind, "header", mapped if mapped is not None and mapped != kind else None)
    if mapped is not None:
        return Identified(mapped, "type")
    if how == "type":
        return Unidentified(f"type byte 0x{payload_type:02x} is not in the mapping ({_listed(types)})")
    return Unidentified(f"no ITS PDU header ({_header_problem(payload, versions)}) and type byte "
                        f"0x{payload_type:02x} is not in the mapping ({_listed(types)})")


def _header_problem(payload: bytes, versions: frozenset[int]) -> str:
    if len(payload) < ITS_PDU_HEADER_SIZE:
        return f"{len(payload)} bytes"
    if payload[0] not in versions:
        return f"protocolVersion {payload[0]}"
    return f"messageID {payload[1]}"


def _listed(types: PayloadTypes) -> str:
    return ", ".join(f"0x{value:02x} {kind}" for value, kind in sorted(types.by_byte.items()))


def stand_in(kind: str, station_id: int, intersection: str, sequence: int, size: int | None = None) -> bytes:
    """A recognisable stand-in payload of ``kind`` (see the module docstring)."""
    header = bytes([ITS_PROTOCOL_VERSION, MESSAGE_IDS[kind]]) + (station_id & 0xFFFFFFFF).to_bytes(4, "big")
    marker = f"{kind} {intersection} #{sequence};".encode("ascii")
    body = header + marker
    wanted = TYPICAL_SIZE[kind] if size is None else size
    return body + _padding(max(0, wanted - len(body)), sequence)


#: The padding's bytes, (i * 37) & 0xFF: they repeat every 256 (37 * 256 is 0 modulo 256).
_PADDING = bytes((i * 37) & 0xFF for i in range(256))


@functools.lru_cache(maxsize=256)
def _shifted(shift: int) -> bytes:
    """The translation table adding ``shift`` to a byte, modulo 256."""
    return bytes((value + shift) & 0xFF for value in range(256))


def _padding(count: int, sequence: int) -> bytes:
    """``count`` bytes (i * 37 + sequence) & 0xFF, i from 0: a few C calls, not one Python step a byte (a
    simulator plays thousands of controllers)."""
    return (_PADDING * (count // 256 + 1))[:count].translate(_shifted(sequence & 0xFF))


def kind_of(message_id: int) -> str | None:
    """The traffic-light message type of an ETSI messageID (None for others)."""
    kind = KINDS.get(message_id)
    return kind if kind in MESSAGE_IDS else None


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
