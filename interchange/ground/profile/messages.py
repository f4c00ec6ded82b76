"""The message types of Table 1 and how each is published: ETSI messageID, tables, repetition, zooms.

- Table 1 / IP_022: messageType is one of DENM, IVIM, SPATEM, MAPEM, SREM, SSEM, CPM, POIM-PA, CAM
  (:class:`MessageType`, in the table's order); ETSI messageIDs from TS 102 894-2, none for POIM-PA.
- IP_033: a message's TTL is its BI repetition interval x 1.2, at least 1 s (:data:`TTL`).
  IP_048: DENM, IVIM, MAPEM and POIM-PA are repeated at least every 9 min while valid; IP_124:
  CAMs 1 s to 120 s apart; IP_136: CPMs should be 1 s apart; SPATEM, SREM, SSEM: 1 s (a node
  policy, IP_034); 9 min for a missing or unknown messageType (:data:`FALLBACK_INTERVAL_MS`).
- IP_038: reference locations as tiles of zoom 18 or deeper (:data:`REFERENCE_ZOOM`); IP_112:
  IVIM, DENM and POIM-PA areas at zoom 13; IP_113: SPATEM, MAPEM, SSEM, SREM at zoom 14.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

__all__ = ["EVENT_AREA", "FALLBACK_INTERVAL_MS", "INTERSECTION_AREA", "MESSAGE_TYPES", "REFERENCE_ZOOM", "TTL", "AreaZoom",
           "Level", "MessageType",
           "MessageTypeSpec", "REPEATED_WHILE_VALID", "Repetition", "TtlRule"]


class MessageType(StrEnum):
    """Table 1: the nine C-ITS message types, in the table's order."""

    DENM = "DENM"
    IVIM = "IVIM"
    SPATEM = "SPATEM"
    MAPEM = "MAPEM"
    SREM = "SREM"
    SSEM = "SSEM"
    CPM = "CPM"
    POIM_PA = "POIM-PA"
    CAM = "CAM"


class Level(StrEnum):
    """How binding a requirement is (the profile's "shall" and "should")."""

    SHALL = "shall"
    SHOULD = "should"


@dataclass(frozen=True, slots=True)
class Repetition:
    """How often messages of one type are published again on BI.

    ``interval_ms`` is the interval the node assumes for a message without a TTL of its own
    (IP_033 makes it the TTL, x 1.2); ``at_least_ms``/``at_most_ms`` bound the gap between two
    messages of a publication where ``requirement`` does (None: the profile gives no bound).
    """

    interval_ms: int
    at_least_ms: int | None = None
    at_most_ms: int | None = None
    requirement: str | None = None
    level: Level = Level.SHALL


@dataclass(frozen=True, slots=True)
class AreaZoom:
    """The zoom level of the tiles covering a message's area (destination, relevance, awareness)."""

    zoom: int
    requirement: str


@dataclass(frozen=True, slots=True)
class MessageTypeSpec:
    """What one message type is: its ETSI messageID (None: not confirmed), the tables of its
    properties, its repetition and the zoom of its area tiles (None: the profile names none)."""

    message_type: MessageType
    etsi_message_id: int | None
    tables: tuple[int, ...]
    repetition: Repetition
    area_zoom: AreaZoom | None


@dataclass(frozen=True, slots=True)
class TtlRule:
    """IP_033: TTL = repetition interval x ``factor``, at least ``minimum_ms``."""

    factor: float = 1.2
    minimum_ms: int = 1_000
    requirement: str = "IP_033"

    def ttl_ms(self, interval_ms: int) -> int:
        return max(self.minimum_ms, round(interval_ms * self.factor))


NINE_MINUTES_MS = 540_000
#: IP_033.
TTL = TtlRule()
#: IP_038: the minimum zoom level of a message's reference location tiles.
REFERENCE_ZOOM = 18
#: The repetition interval assumed for a missing or unknown messageType: the longest of the profile.
FALLBACK_INTERVAL_MS = NINE_MINUTES_MS

_WHILE_VALID = Repetition(NINE_MINUTES_MS, at_most_ms=NINE_MINUTES_MS, requirement="IP_048")
# SPATEM, SREM and SSEM have no interval in the profile: the node assumes 1 s (short-lived signal
# state and requests; a node policy, IP_034).
_SHORT_LIVED = Repetition(1_000)
#: IP_112: the tiles covering the areas of IVIM, DENM and POIM-PA.
EVENT_AREA = AreaZoom(13, "IP_112")
#: IP_113: the tiles covering the destination areas of SPATEM, MAPEM, SSEM and SREM.
INTERSECTION_AREA = AreaZoom(14, "IP_113")

# ETSI messageIDs: ETSI TS 102 894-2 (CDD V2.1.1, MessageId). POIM-PA has none here: the CDD's
# poi(3) is TS 101 556-1's point of interest message and pam(21) is "reserved for Parking
# Availability Message"; neither is confirmed as the ItsPduHeader messageId of a POIM
# (ETSI TS 103 916), so the profile does not guess.
_SPECS = (
    MessageTypeSpec(MessageType.DENM, 1, (1, 2), _WHILE_VALID, EVENT_AREA),
    MessageTypeSpec(MessageType.IVIM, 6, (1, 3), _WHILE_VALID, EVENT_AREA),
    MessageTypeSpec(MessageType.SPATEM, 4, (1, 4), _SHORT_LIVED, INTERSECTION_AREA),
    MessageTypeSpec(MessageType.MAPEM, 5, (1, 4), _WHILE_VALID, INTERSECTION_AREA),
    MessageTypeSpec(MessageType.SREM, 9, (1, 5), _SHORT_LIVED, INTERSECTION_AREA),
    MessageTypeSpec(MessageType.SSEM, 10, (1, 5), _SHORT_LIVED, INTERSECTION_AREA),
    MessageTypeSpec(MessageType.CPM, 14, (1, 7), Repetition(1_000, 1_000, 1_000, "IP_136", Level.SHOULD), None),
    MessageTypeSpec(MessageType.POIM_PA, None, (1,), _WHILE_VALID, EVENT_AREA),
    # IP_124: the longest gap is the interval assumed, so a CAM never expires before its successor
    MessageTypeSpec(MessageType.CAM, 2, (1, 6), Repetition(120_000, 1_000, 120_000, "IP_124"), None),
)
#: Every message type of Table 1 and what it is, in the table's order.
MESSAGE_TYPES: Mapping[MessageType, MessageTypeSpec] = MappingProxyType({spec.message_type: spec for spec in _SPECS})


#: IP_048/049: the types whose publishers repeat the same message while it is valid.
REPEATED_WHILE_VALID: tuple[MessageType, ...] = tuple(
    t for t, spec in MESSAGE_TYPES.items() if spec.repetition.requirement == "IP_048")
