"""Check a message's application properties against tables 1-7 of the IP profile (IP_016, IP_022).

:func:`validate_application_properties` returns every problem found (an empty list means valid);
the broker drops and logs a message with problems (IP_016). Each check names its requirement:

- IP_022 (Table 1, every C-ITS message): publisherId, originatingCountry, protocolVersion,
  messageType and quadTree are mandatory strings; publicationId, serviceType, baselineVersion,
  longitude, latitude, shardId and shardCount are typed when present. publisherId is two
  uppercase letters and a number 0-16383 with optional leading zeros (ISO 14816, e.g. "DE15608");
  originatingCountry is two uppercase letters (ISO 3166-1 alpha-2); publicationId is
  ``<publisherId>:<id>`` for the message's own publisherId; messageType is one of DENM, IVIM,
  SPATEM, MAPEM, SREM, SSEM, CPM, POIM-PA, CAM; longitude/latitude are float or double in
  [-180, 180] / [-90, 90].
- IP_026 (Table 2, DENM): causeCode and subCauseCode are mandatory integers 0-255, both -1 for a
  cancellation.
- IP_029 (Table 3, IVIM, and every list-valued string): a comma separated list starts and ends
  with a comma, ``",a,b,"``, with no empty item (``",-1,"`` stands for "not present").
  iviStatus is an integer 0-7 (ISO 19321 IviStatus), iviType and pictogramCategoryCode lists of
  integers, iviContainer a list.
- IP_100 / IP_103 (Tables 4 and 5, SPATEM/MAPEM and SREM/SSEM): id and name are lists.
- IP_122 / IP_123 (Table 6, CAM): stationType is a mandatory integer 0-255 (ETSI TS 102 894-2
  StationType); vehicleRole an integer 0-15.
- IP_135 (Table 7, CPM): type is "Vehicle" or "RSU".
- IP_037 / IP_038: quadTree is a ``",t1,t2,"`` list of tiles of digits 0-3 (parsed by
  :func:`quadtree.parse_property`) with at least one reference tile of zoom level 18 or more.
- IP_128-130 and appendix G: shardId and shardCount are integers, 1 <= shardId <= shardCount;
  a message carrying shardCount carries shardId (Table 1); against the capability's declared
  shardCount, shardId must not exceed it and a message's shardCount must equal it. A message
  without shardId is accepted: routing treats it as shard 1 (IP_128).
- IP_131: a property not defined in tables 1-7 is named ``custom-<namespace>-<name>``.

Conventions: names defined in any of tables 1-7 are accepted on every message type (only the
mandatory ones depend on messageType) and are checked the same way wherever they appear.
Integers may be any AMQP integer type (byte ... ulong). Strings must be AMQP strings: a symbol
is refused, because the tables say string and JMS consumers (e.g. Qpid JMS getStringProperty)
cannot read a symbol property as text. Types come from the scanner's
``application_property_types``; without them they are inferred from plain Python values.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import quadtree
from interchange.broker.amqp_scan import FLOATING_TYPES, INTEGER_TYPES, AmqpDecimal

__all__ = ["MESSAGE_TYPES", "STANDARD_PROPERTIES", "STANDARD_PROPERTY_NAMES", "Problem", "validate_application_properties"]

#: messageType values of Table 1 (IP_022).
MESSAGE_TYPES = frozenset({"DENM", "IVIM", "SPATEM", "MAPEM", "SREM", "SSEM", "CPM", "POIM-PA", "CAM"})

#: Minimum zoom level of a message's reference location tile (IP_038).
REFERENCE_ZOOM = 18


@dataclass(frozen=True, slots=True)
class Problem:
    """One violation: the property concerned, what is wrong, and the requirement it breaks."""

    property: str
    message: str
    requirement: str

    def __str__(self) -> str:
        return f"{self.property}: {self.message} ({self.requirement})"


# --- value checks: each returns None when fine, or (what is wrong, requirement) ------------------

Finding = tuple[str, str] | None
#: A value check. It is called only with a value whose AMQP type passed the property's kind
#: (str for strings, int for integers, float for floats), which the table cannot express: Any.
Check = Callable[[Any], Finding]

_PUBLISHER_ID = re.compile(r"[A-Z]{2}([0-9]{1,5})")
_COUNTRY = re.compile(r"[A-Z]{2}")
_CUSTOM_NAME = re.compile(r"custom-[^-]+-.+", re.DOTALL)
_INTEGER_ITEM = re.compile(r"-?[0-9]+")
#: ``",t1,t2,"`` with non-empty tiles of the digits 0-3: what :func:`quadtree.parse_property`
#: accepts, matched in one regex call (parse_property costs ~0.5 us per tile on the hot path).
_QUADTREE_FORM = re.compile(r",(?:[0-3]+,)+")
_REFERENCE_TILE = re.compile(r",[0-3]{%d}" % REFERENCE_ZOOM)


def _comma_list(value: str) -> list[str] | None:
    """``",a,b,"`` -> ``["a", "b"]``; None if not of that form or an item is empty (IP_029)."""
    if len(value) < 3 or value[0] != "," or value[-1] != ",":
        return None
    items = value[1:-1].split(",")
    return None if "" in items else items


def _check_list(value: str) -> Finding:
    if _comma_list(value) is None:
        return f"must be a comma separated list like ',a,b,', got {value!r}", "IP_029"
    return None


def _check_integer_list(value: str) -> Finding:
    items = _comma_list(value)
    if items is None:
        return f"must be a comma separated list like ',1,2,', got {value!r}", "IP_029"
    if not all(_INTEGER_ITEM.fullmatch(item) for item in items):
        return f"must list integers like ',557,559,', got {value!r}", "IP_029"
    return None


def _check_non_empty(value: str) -> Finding:
    return None if value else ("must not be empty", "IP_022")


def _check_publisher_id(value: str) -> Finding:
    match = _PUBLISHER_ID.fullmatch(value)
    if match is None or int(match.group(1)) > 16383:
        return f"must be 2 uppercase letters and a number 0-16383 (ISO 14816), got {value!r}", "IP_022"
    return None


def _check_country(value: str) -> Finding:
    if _COUNTRY.fullmatch(value) is None:
        return f"must be an ISO 3166-1 alpha-2 code (2 uppercase letters), got {value!r}", "IP_022"
    return None


def _check_message_type(value: str) -> Finding:
    if value not in MESSAGE_TYPES:
        return f"must be one of {', '.join(sorted(MESSAGE_TYPES))}, got {value!r}", "IP_022"
    return None


def _check_quadtree(value: str) -> Finding:
    if _QUADTREE_FORM.fullmatch(value) is not None:  # hot path, the form parse_property accepts
        if _REFERENCE_TILE.search(value) is not None:
            return None
        return f"needs at least one tile of zoom level {REFERENCE_ZOOM} or more", "IP_038"
    try:
        tiles = quadtree.parse_property(value)  # the authority: explains what is malformed
    except ValueError as exc:
        return f"malformed: {exc}", "IP_037"
    if not any(len(tile) >= REFERENCE_ZOOM for tile in tiles):
        return f"needs at least one tile of zoom level {REFERENCE_ZOOM} or more", "IP_038"
    return None


def _check_cpm_type(value: str) -> Finding:
    return None if value in ("Vehicle", "RSU") else (f"must be 'Vehicle' or 'RSU', got {value!r}", "IP_135")


def _range(low: float, high: float, requirement: str) -> Callable[[float], Finding]:
    def check(value: float) -> Finding:
        if low <= value <= high:  # False for NaN
            return None
        return f"must be {low} to {high}, got {value!r}", requirement

    return check


def _check_cause_code(value: int) -> Finding:
    if value == -1 or 0 <= value <= 255:
        return None
    return f"must be 0 to 255, or -1 for a cancellation, got {value}", "IP_026"


# --- the property tables ------------------------------------------------------------------------

_STRING = "a string"
_INTEGER = "an integer"
_FLOATING = "a float or double"

#: name -> (expected kind, requirement of the table defining it, value check or None): tables 1-7.
_SPEC: dict[str, tuple[str, str, Check | None]] = {
    # Table 1: every C-ITS message (IP_022)
    "publisherId": (_STRING, "IP_022", _check_publisher_id),
    "publicationId": (_STRING, "IP_022", None),  # checked against publisherId below
    "originatingCountry": (_STRING, "IP_022", _check_country),
    "protocolVersion": (_STRING, "IP_022", _check_non_empty),
    "serviceType": (_STRING, "IP_022", _check_list),
    "baselineVersion": (_STRING, "IP_022", _check_non_empty),
    "messageType": (_STRING, "IP_022", _check_message_type),
    "longitude": (_FLOATING, "IP_022", _range(-180.0, 180.0, "IP_022")),
    "latitude": (_FLOATING, "IP_022", _range(-90.0, 90.0, "IP_022")),
    "quadTree": (_STRING, "IP_022", _check_quadtree),
    "shardId": (_INTEGER, "IP_022", None),  # checked with shardCount below
    "shardCount": (_INTEGER, "IP_022", _range(1, 2**31 - 1, "IP_022")),
    # Table 2: DENM (IP_026)
    "causeCode": (_INTEGER, "IP_026", _check_cause_code),
    "subCauseCode": (_INTEGER, "IP_026", _check_cause_code),
    # Table 3: IVIM (IP_029)
    "iviStatus": (_INTEGER, "IP_029", _range(0, 7, "IP_029")),
    "iviType": (_STRING, "IP_029", _check_integer_list),
    "pictogramCategoryCode": (_STRING, "IP_029", _check_integer_list),
    "iviContainer": (_STRING, "IP_029", _check_list),
    # Tables 4 and 5: SPATEM, MAPEM (IP_100), SREM, SSEM (IP_103)
    "id": (_STRING, "IP_100", _check_list),
    "name": (_STRING, "IP_100", _check_list),
    # Table 6: CAM (IP_122, IP_123)
    "stationType": (_INTEGER, "IP_122", _range(0, 255, "IP_122")),
    "vehicleRole": (_INTEGER, "IP_123", _range(0, 15, "IP_123")),
    # Table 7: CPM (IP_135)
    "type": (_STRING, "IP_135", _check_cpm_type),
}

#: Names defined in tables 1-7 (anything else must follow IP_131).
STANDARD_PROPERTIES = frozenset(_SPEC)
#: The same names in the order of the tables.
STANDARD_PROPERTY_NAMES: tuple[str, ...] = tuple(_SPEC)

_KIND_TYPES = {_STRING: frozenset({"string"}), _INTEGER: INTEGER_TYPES, _FLOATING: FLOATING_TYPES}
#: name -> (accepted AMQP type names, expected kind, requirement, value check): the hot-path form.
_RULES = {name: (_KIND_TYPES[kind], kind, requirement, check) for name, (kind, requirement, check) in _SPEC.items()}

_MANDATORY_ALL = ("publisherId", "originatingCountry", "protocolVersion", "messageType", "quadTree")
#: messageType -> (mandatory names beyond Table 1, requirement); looked up with None too.
_MANDATORY_BY_TYPE: dict[str | None, tuple[tuple[str, ...], str]] = {
    "DENM": (("causeCode", "subCauseCode"), "IP_026"),
    "CAM": (("stationType",), "IP_122"),
}


def _inferred_type(value: object) -> str:
    """The AMQP type a plain Python value would be sent as (for callers without type names)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "binary"
    if isinstance(value, UUID):
        return "uuid"
    if isinstance(value, AmqpDecimal):
        return value.type
    return type(value).__name__


def check_property_value(name: str, value: Any) -> str | None:
    """What is wrong with ``value`` for the tables 1-7 property ``name`` (its value rule only:
    e.g. publisherId "2 uppercase letters and 0-16383"), or None. The II checks capability
    documents with it (issue 10), so a capability never announces values a message is refused for.
    """
    rule = _SPEC.get(name)
    check = rule[2] if rule is not None else None
    finding = check(value) if check is not None else None
    return None if finding is None else f"{finding[0]} ({finding[1]})"


def validate_application_properties(
    props: Mapping[str, object],
    types: Mapping[str, str] | None = None,
    *,
    capability_shard_count: int | None = None,
) -> list[Problem]:
    """Every way ``props`` breaks tables 1-7 of the IP profile; an empty list means valid.

    ``types`` maps each name to its AMQP type name (``ScannedMessage.application_property_types``);
    names missing from it are typed from their Python value. ``capability_shard_count`` is the
    shardCount declared by the capability the message is published on, if any (appendix G).
    """
    problems: list[Problem] = []
    add = problems.append
    rules = _RULES
    if types is None:
        types = {}
    # standard properties whose type and value passed (so each has its kind's type: Any)
    valid: dict[str, Any] = {}
    for name, value in props.items():
        rule = rules.get(name)
        if rule is None:
            if _CUSTOM_NAME.fullmatch(name) is None:
                add(Problem(name, "not defined in tables 1-7 and not named custom-<namespace>-<name>", "IP_131"))
            continue
        accepted, kind, requirement, check = rule
        amqp_type = types.get(name)
        if amqp_type is None:
            amqp_type = _inferred_type(value)
        if amqp_type not in accepted:
            add(Problem(name, f"must be {kind}, got AMQP {amqp_type}", requirement))
            continue
        if check is not None:
            finding = check(value)
            if finding is not None:
                add(Problem(name, *finding))
                continue
        valid[name] = value

    for name in _MANDATORY_ALL:
        if name not in props:
            add(Problem(name, "missing, mandatory for every C-ITS message", "IP_022"))
    message_type: str | None = valid.get("messageType")
    mandatory = _MANDATORY_BY_TYPE.get(message_type)
    if mandatory is not None:
        names, requirement = mandatory
        for name in names:
            if name not in props:
                add(Problem(name, f"missing, mandatory for {message_type}", requirement))

    _check_publication_id(valid, add)
    if message_type == "DENM" and "causeCode" in valid and "subCauseCode" in valid:
        cause, sub_cause = valid["causeCode"], valid["subCauseCode"]
        if (cause == -1) != (sub_cause == -1):
            message = f"must be -1 together with causeCode for a cancellation, got {cause} and {sub_cause}"
            add(Problem("subCauseCode", message, "IP_026"))
    _check_shards(props, valid, capability_shard_count, add)
    return problems


def _check_publication_id(valid: Mapping[str, Any], add: Callable[[Problem], None]) -> None:
    """IP_022: publicationId is ``<publisherId>:<unique id>`` for the message's own publisherId."""
    if "publicationId" not in valid:
        return
    value = valid["publicationId"]
    publisher, separator, local_id = value.partition(":")
    if not separator or not publisher or not local_id:
        add(Problem("publicationId", f"must be '<publisherId>:<id>', got {value!r}", "IP_022"))
    elif "publisherId" in valid and publisher != valid["publisherId"]:
        add(Problem("publicationId", f"must start with the publisherId {valid['publisherId']!r}, got {value!r}", "IP_022"))


def _check_shards(
    props: Mapping[str, object], valid: Mapping[str, Any], capability_shard_count: int | None,
    add: Callable[[Problem], None],
) -> None:
    """IP_128-130, appendix G: 1 <= shardId <= shardCount, for the message's and the capability's shardCount."""
    if "shardId" not in valid:
        if "shardCount" in valid and "shardId" not in props:
            add(Problem("shardId", "missing while shardCount is set", "IP_130"))
        return
    shard_id = valid["shardId"]
    shard_count = valid.get("shardCount")
    if shard_id < 1:
        add(Problem("shardId", f"must be 1 or more, got {shard_id}", "IP_128"))
    elif shard_count is not None and shard_id > shard_count:
        add(Problem("shardId", f"{shard_id} exceeds shardCount {shard_count}", "IP_130"))
    elif capability_shard_count is not None and shard_id > capability_shard_count:
        add(Problem("shardId", f"{shard_id} exceeds the capability's shardCount {capability_shard_count}", "IP_130"))
    if capability_shard_count is not None and shard_count is not None and shard_count != capability_shard_count:
        add(
            Problem("shardCount", f"{shard_count} differs from the capability's shardCount {capability_shard_count}", "IP_130")
        )
