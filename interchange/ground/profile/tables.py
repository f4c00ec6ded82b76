"""Tables 1-7 of the IP profile: each property's kind, value rule and when it is mandatory; cross-property rules; IP_131.

- IP_022 (Table 1): publisherId, originatingCountry, protocolVersion, messageType and quadTree are
  mandatory on every message; publicationId is ``<publisherId>:<id>`` (:class:`PublicationIdRule`).
- IP_026 (Table 2, DENM): causeCode and subCauseCode mandatory integers 0-255, both -1 for a
  cancellation (:class:`CancellationRule`). IP_029 (Table 3, IVIM), IP_100/IP_103 (Tables 4, 5:
  ``id`` is IP_103's in SREM and SSEM), IP_122/IP_123 (Table 6, CAM), IP_135 (Table 7, CPM).
- IP_037/IP_038: quadTree; IP_128-130, appendix G: shardId, shardCount (:class:`ShardRule`);
  IP_131: any other name is ``custom-<namespace>-<name>`` (:data:`CUSTOM_NAMES`).
- Names of tables 1-7 are checked alike on every message type (only the mandatory ones depend on
  messageType); a wrong kind or form, or a missing mandatory value, breaks its table's requirement
  (a property of two tables: the table of the message's type, :meth:`Property.requirement_for`);
  the quadTree's value rule names its own (IP_037/IP_038).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from interchange.ground.profile.messages import REFERENCE_ZOOM, MessageType
from interchange.ground.profile.values import (
    CommaList,
    Kind,
    NonEmpty,
    OneOf,
    Pattern,
    PublisherId,
    QuadTreeTiles,
    Range,
    ValueRule,
)

__all__ = ["CANCELLATION", "CROSS_RULES", "CUSTOM_NAMES", "EVERY_MESSAGE", "OPTIONAL", "PROPERTIES", "PROPERTY_NAMES",
           "TABLES", "CancellationRule", "CrossRule", "CustomNames", "Mandatory", "Property", "PublicationIdRule",
           "ShardRule", "Tables", "mandatory_for", "property_named"]


@dataclass(frozen=True, slots=True)
class Mandatory:
    """When a property must be present: in every C-ITS message, or in those of some types."""

    every_message: bool = False
    message_types: tuple[MessageType, ...] = ()


OPTIONAL = Mandatory()
EVERY_MESSAGE = Mandatory(every_message=True)


def mandatory_for(*message_types: MessageType) -> Mandatory:
    return Mandatory(message_types=message_types)


@dataclass(frozen=True, slots=True)
class Property:
    """One row of tables 1-7."""

    name: str
    tables: tuple[int, ...]
    kind: Kind
    requirement: str  #: of its table: broken by a value of another kind, or by its absence when mandatory
    rule: ValueRule | None = None  #: None: any value of its kind (a rule across properties may apply)
    mandatory: Mandatory = OPTIONAL
    #: (message types, requirement): the requirement of another of its tables for messages of those
    #: types (Table 5's ``id`` is IP_103's in SREM and SSEM, Table 4's IP_100 elsewhere)
    by_type: tuple[tuple[tuple[MessageType, ...], str], ...] = ()

    def requirement_for(self, message_type: str | None) -> str:
        """The requirement a problem of this property breaks in a message of ``message_type`` (its
        valid messageType, None when it has none)."""
        for types, requirement in self.by_type:
            if message_type in types:
                return requirement
        return self.requirement


@dataclass(frozen=True, slots=True)
class PublicationIdRule:
    """Table 1: ``publication`` is ``<publisherId><separator><id>``, both parts non-empty, starting
    with the message's own ``publisher`` when that is valid."""

    publication: str = "publicationId"
    publisher: str = "publisherId"
    separator: str = ":"
    requirement: str = "IP_022"

    @property
    def form(self) -> str:
        return f"<{self.publisher}>{self.separator}<id>"


@dataclass(frozen=True, slots=True)
class CancellationRule:
    """Table 2: in a ``message_type`` message, ``first`` and ``second`` are ``value`` together (a
    cancellation) or neither is; a mismatch is reported on ``second``."""

    message_type: MessageType
    first: str
    second: str
    value: int
    requirement: str


@dataclass(frozen=True, slots=True)
class ShardRule:
    """IP_128-130, appendix G: ``shard_id`` is ``first`` or more (``first_requirement``) and at most
    the message's ``shard_count`` and the capability's; a message with ``shard_count`` carries
    ``shard_id``; the message's ``shard_count`` equals the capability's (``count_requirement``). A
    message without ``shard_id`` is in shard ``first`` (IP_128)."""

    shard_id: str = "shardId"
    shard_count: str = "shardCount"
    first: int = 1
    first_requirement: str = "IP_128"
    count_requirement: str = "IP_130"


#: Every kind of rule across properties; a reader handles each (its ``match`` ends in ``assert_never``).
CrossRule = PublicationIdRule | CancellationRule | ShardRule


@dataclass(frozen=True, slots=True)
class CustomNames:
    """IP_131: a property not in tables 1-7 is named ``form``; ``regex`` matches the whole name
    (any character in the name part, line breaks too)."""

    regex: str = "custom-[^-]+-.+"
    form: str = "custom-<namespace>-<name>"
    requirement: str = "IP_131"


S, I, F = Kind.STRING, Kind.INTEGER, Kind.FLOATING  # noqa: E741 (the tables' columns stay one letter wide)
CANCELLATION = -1  #: Table 2: causeCode and subCauseCode of a cancellation DENM
_CAUSE_CODE = Range(0, 255, also=CANCELLATION, also_meaning="a cancellation")  # ETSI TS 102 894-2
_LIST = CommaList()
_INTEGER_LIST = CommaList(item_regex="-?[0-9]+", items="integers", example=",557,559,", short_example=",1,2,")
_DENM, _CAM = mandatory_for(MessageType.DENM), mandatory_for(MessageType.CAM)

#: Tables 1-7, in the tables' order.
PROPERTIES: tuple[Property, ...] = (
    # Table 1: every C-ITS message (IP_022)
    Property("publisherId", (1,), S, "IP_022", PublisherId(), EVERY_MESSAGE),
    Property("publicationId", (1,), S, "IP_022"),  # PublicationIdRule
    Property("originatingCountry", (1,), S, "IP_022",
             Pattern("[A-Z]{2}", "an ISO 3166-1 alpha-2 code (2 uppercase letters)"), EVERY_MESSAGE),
    Property("protocolVersion", (1,), S, "IP_022", NonEmpty(), EVERY_MESSAGE),
    Property("serviceType", (1,), S, "IP_022", _LIST),
    Property("baselineVersion", (1,), S, "IP_022", NonEmpty()),
    Property("messageType", (1,), S, "IP_022", OneOf(tuple(t.value for t in MessageType)), EVERY_MESSAGE),
    Property("longitude", (1,), F, "IP_022", Range(-180.0, 180.0)),  # WGS84 decimal degrees
    Property("latitude", (1,), F, "IP_022", Range(-90.0, 90.0)),
    Property("quadTree", (1,), S, "IP_022", QuadTreeTiles(REFERENCE_ZOOM), EVERY_MESSAGE),
    Property("shardId", (1,), I, "IP_022"),  # ShardRule
    Property("shardCount", (1,), I, "IP_022", Range(1, 2**31 - 1)),
    # Table 2: DENM (IP_026)
    Property("causeCode", (2,), I, "IP_026", _CAUSE_CODE, _DENM),
    Property("subCauseCode", (2,), I, "IP_026", _CAUSE_CODE, _DENM),
    # Table 3: IVIM (IP_029)
    Property("iviStatus", (3,), I, "IP_029", Range(0, 7)),  # ISO 19321 IviStatus
    Property("iviType", (3,), S, "IP_029", _INTEGER_LIST),
    Property("pictogramCategoryCode", (3,), S, "IP_029", _INTEGER_LIST),
    Property("iviContainer", (3,), S, "IP_029", _LIST),
    # Tables 4 and 5: SPATEM, MAPEM (IP_100), SREM, SSEM (IP_103)
    Property("id", (4, 5), S, "IP_100", _LIST, by_type=(((MessageType.SREM, MessageType.SSEM), "IP_103"),)),
    Property("name", (4,), S, "IP_100", _LIST),
    # Table 6: CAM (IP_122, IP_123), ETSI TS 102 894-2 StationType and VehicleRole
    Property("stationType", (6,), I, "IP_122", Range(0, 255), _CAM),
    Property("vehicleRole", (6,), I, "IP_123", Range(0, 15)),
    # Table 7: CPM (IP_135)
    Property("type", (7,), S, "IP_135", OneOf(("Vehicle", "RSU"))),
)

#: The rules across properties, in the order their problems are reported.
CROSS_RULES: tuple[CrossRule, ...] = (
    PublicationIdRule(),
    CancellationRule(MessageType.DENM, "causeCode", "subCauseCode", CANCELLATION, "IP_026"),
    ShardRule(),
)

CUSTOM_NAMES = CustomNames()


@dataclass(frozen=True, slots=True)
class Tables:
    """Tables 1-7 as a whole: what a reader builds its checks from (a test builds readers from a
    changed copy, ``dataclasses.replace(TABLES, properties=...)``, to see that they follow it)."""

    properties: tuple[Property, ...]
    cross_rules: tuple[CrossRule, ...]
    custom_names: CustomNames


TABLES = Tables(PROPERTIES, CROSS_RULES, CUSTOM_NAMES)

#: The names of tables 1-7 in the tables' order (anything else follows IP_131).
PROPERTY_NAMES: tuple[str, ...] = tuple(p.name for p in PROPERTIES)
_BY_NAME: Mapping[str, Property] = MappingProxyType({p.name: p for p in PROPERTIES})


def property_named(name: str) -> Property | None:
    """The tables 1-7 property ``name``, or None."""
    return _BY_NAME.get(name)
