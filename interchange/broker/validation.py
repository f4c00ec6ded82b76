"""Check a message's application properties against tables 1-7 of the IP profile (IP_016, IP_022).

:func:`validate_application_properties` returns every problem found (an empty list means valid);
the broker drops and logs a message with problems (IP_016). The rules are the data of
:mod:`interchange.ground.profile`; :func:`build_validator` turns each into a Python check once and
names in each problem the requirement the profile gives it. Integers may be any AMQP integer type;
strings must be AMQP strings (a symbol is refused). The conventions and why: docs/broker.md
("Admission").
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, assert_never
from uuid import UUID

import quadtree
from interchange.broker.amqp_scan import FLOATING_TYPES, INTEGER_TYPES, AmqpDecimal
from interchange.ground.profile import (
    PROPERTY_NAMES,
    TABLES,
    CancellationRule,
    CommaList,
    CrossRule,
    Kind,
    MessageType,
    NonEmpty,
    OneOf,
    Pattern,
    Property,
    PublicationIdRule,
    PublisherId,
    QuadTreeTiles,
    Range,
    ShardRule,
    Tables,
)

__all__ = ["MESSAGE_TYPES", "STANDARD_PROPERTIES", "STANDARD_PROPERTY_NAMES", "Problem", "Validate", "build_validator",
           "check_property_value", "check_publication_id", "validate_application_properties"]

#: messageType values of Table 1 (IP_022).
MESSAGE_TYPES: frozenset[str] = frozenset(t.value for t in MessageType)
#: Names defined in tables 1-7 (anything else must follow IP_131).
STANDARD_PROPERTIES = frozenset(PROPERTY_NAMES)
#: The same names in the order of the tables.
STANDARD_PROPERTY_NAMES: tuple[str, ...] = PROPERTY_NAMES


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
#: (str for strings, int for integers, float for floats), which the profile cannot express: Any.
Check = Callable[[Any], Finding]


def _comma_list(value: str) -> list[str] | None:
    """``",a,b,"`` -> ``["a", "b"]``; None if not of that form or an item is empty (IP_029)."""
    if len(value) < 3 or value[0] != "," or value[-1] != ",":
        return None
    items = value[1:-1].split(",")
    return None if "" in items else items


def _list_check(rule: CommaList, property_requirement: str) -> Check:
    form = f"must be a comma separated list like {rule.short_example!r}, got "
    requirement = rule.requirement or property_requirement
    if rule.item_regex is None:
        def check(value: str) -> Finding:
            return (form + repr(value), requirement) if _comma_list(value) is None else None
        return check
    item = re.compile(rule.item_regex).fullmatch
    items_text = f"must list {rule.items} like {rule.example!r}, got "

    def check_items(value: str) -> Finding:
        items = _comma_list(value)
        if items is None:
            return form + repr(value), requirement
        if not all(item(i) for i in items):
            return items_text + repr(value), requirement
        return None
    return check_items


def _range_check(rule: Range, requirement: str) -> Check:
    low, high, also = rule.low, rule.high, rule.also
    expected = f"must be {rule.expected}, got "

    def check(value: float) -> Finding:
        if low <= value <= high or value == also:  # False for NaN
            return None
        return expected + repr(value), requirement
    return check


def _publisher_id_check(rule: PublisherId, requirement: str) -> Check:
    form = re.compile(rule.regex).fullmatch
    highest = rule.max_number
    expected = f"must be {rule.expected}, got "

    def check(value: str) -> Finding:
        match = form(value)
        if match is None or int(match.group(1)) > highest:
            return expected + repr(value), requirement
        return None
    return check


def _quadtree_check(rule: QuadTreeTiles) -> Check:
    # the form parse_property accepts, matched in one regex call (parse_property costs ~0.5 us per
    # tile on the hot path); parse_property stays the authority that says what is malformed
    well_formed = re.compile(rule.form_regex).fullmatch
    reference = re.compile(rule.reference_regex).search
    zoom = rule.reference_zoom
    too_coarse = f"needs at least one tile of zoom level {zoom} or more", rule.zoom_requirement

    def check(value: str) -> Finding:
        if well_formed(value) is not None:
            return None if reference(value) is not None else too_coarse
        try:
            tiles = quadtree.parse_property(value)
        except ValueError as exc:
            return f"malformed: {exc}", rule.form_requirement
        return None if any(len(tile) >= zoom for tile in tiles) else too_coarse
    return check


def _value_check(prop: Property) -> Check | None:
    """The Python check of a property's value rule (None: any value of its kind)."""
    rule, requirement = prop.rule, prop.requirement
    match rule:
        case None:
            return None
        case NonEmpty():
            empty = ("must not be empty", requirement)
            return lambda value: None if value else empty
        case OneOf(values=values):
            allowed = frozenset(values)
            expected = f"must be {rule.expected}, got "
            return lambda value: None if value in allowed else (expected + repr(value), requirement)
        case Range():
            return _range_check(rule, requirement)
        case Pattern(regex=regex):
            matches = re.compile(regex, re.DOTALL).fullmatch
            expected = f"must be {rule.expected}, got "
            return lambda value: None if matches(value) is not None else (expected + repr(value), requirement)
        case CommaList():
            return _list_check(rule, requirement)
        case PublisherId():
            return _publisher_id_check(rule, requirement)
        case QuadTreeTiles():
            return _quadtree_check(rule)
        case _:
            assert_never(rule)


# --- the validator ------------------------------------------------------------------------------------

_KIND_TYPES = {Kind.STRING: frozenset({"string"}), Kind.INTEGER: INTEGER_TYPES, Kind.FLOATING: FLOATING_TYPES}


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


class Validate(Protocol):
    """:func:`validate_application_properties`'s signature."""

    def __call__(self, props: Mapping[str, object], types: Mapping[str, str] | None = None, *,
                 capability_shard_count: int | None = None) -> list[Problem]: ...


def _mandatory(tables: Tables) -> tuple[tuple[str, ...], dict[str | None, tuple[str, ...]], dict[str, str]]:
    """The properties every C-ITS message carries, those mandatory per messageType (looked up with
    None too), and the requirement of each property (read only when one is missing)."""
    mandatory_all = tuple(p.name for p in tables.properties if p.mandatory.every_message)
    mandatory_by_type: dict[str | None, tuple[str, ...]] = {
        t.value: names for t in MessageType
        if (names := tuple(p.name for p in tables.properties if t in p.mandatory.message_types))}
    return mandatory_all, mandatory_by_type, {p.name: p.requirement for p in tables.properties}


def _of_the_type(problems: list[Problem], by_type: Mapping[tuple[str, str], Property],
                 message_type: str | None) -> list[Problem]:
    """``problems`` citing the table of the message's type where a property is in two tables (Table
    5's id in an SREM breaks IP_103, Table 4's IP_100 elsewhere); ``by_type``: (name, its default
    requirement) -> the property."""
    return [Problem(p.property, p.message, prop.requirement_for(message_type))
            if (prop := by_type.get((p.property, p.requirement))) is not None else p for p in problems]


def build_validator(tables: Tables) -> Validate:
    """The validator of ``tables`` (the module's is the profile's, :data:`validate_application_properties`):
    every check built once, here, and read by the returned function from its closure."""
    # name -> (accepted AMQP type names, expected kind, requirement, value check)
    rules = {p.name: (_KIND_TYPES[p.kind], p.kind.value, p.requirement, _value_check(p)) for p in tables.properties}
    custom_name = re.compile(tables.custom_names.regex, re.DOTALL).fullmatch
    not_custom = f"not defined in tables 1-7 and not named {tables.custom_names.form}"
    custom_requirement = tables.custom_names.requirement
    mandatory_all, mandatory_by_type, requirement_of = _mandatory(tables)
    # (name, its default requirement) -> the property, for those whose requirement depends on the messageType
    by_type = {(p.name, p.requirement): p for p in tables.properties if p.by_type}
    cross_checks = tuple(_cross_check(rule) for rule in tables.cross_rules)

    def validate(props: Mapping[str, object], types: Mapping[str, str] | None = None, *,
                 capability_shard_count: int | None = None) -> list[Problem]:
        """Every way ``props`` breaks tables 1-7 of the IP profile; an empty list means valid.

        ``types`` maps each name to its AMQP type name (``ScannedMessage.application_property_types``);
        names missing from it are typed from their Python value. ``capability_shard_count`` is the
        shardCount declared by the capability the message is published on, if any (appendix G).
        """
        problems: list[Problem] = []
        add = problems.append
        if types is None:
            types = {}
        # standard properties whose type and value passed (so each has its kind's type: Any)
        valid: dict[str, Any] = {}
        for name, value in props.items():
            rule = rules.get(name)
            if rule is None:
                if custom_name(name) is None:
                    add(Problem(name, not_custom, custom_requirement))
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

        for name in mandatory_all:
            if name not in props:
                add(Problem(name, "missing, mandatory for every C-ITS message", requirement_of[name]))
        message_type: str | None = valid.get("messageType")
        for name in mandatory_by_type.get(message_type, ()):
            if name not in props:
                add(Problem(name, f"missing, mandatory for {message_type}", requirement_of[name]))
        for cross_check in cross_checks:
            cross_check(props, valid, message_type, capability_shard_count, add)
        return _of_the_type(problems, by_type, message_type) if by_type and problems else problems

    return validate


# --- the rules across properties --------------------------------------------------------------------

#: (all properties, the valid ones, the valid messageType, the capability's shardCount, add a problem)
CrossCheck = Callable[[Mapping[str, object], Mapping[str, Any], str | None, int | None, Callable[[Problem], None]], None]


def _publication_id_problem(rule: PublicationIdRule, value: str, publisher: str | None) -> str | None:
    prefix, separator, local_id = value.partition(rule.separator)
    if not separator or not prefix or not local_id:
        return f"must be {rule.form!r}, got {value!r}"
    if publisher is not None and prefix != publisher:
        return f"must start with the {rule.publisher} {publisher!r}, got {value!r}"
    return None


_PUBLICATION = next(rule for rule in TABLES.cross_rules if isinstance(rule, PublicationIdRule))


def check_publication_id(value: str, publisher_id: str | None) -> str | None:
    """What is wrong with ``value`` as the publicationId of ``publisher_id`` (None: not known to
    be valid), with its requirement, or None (Table 1; the II checks capabilities with it)."""
    problem = _publication_id_problem(_PUBLICATION, value, publisher_id)
    return None if problem is None else f"{problem} ({_PUBLICATION.requirement})"


def _publication_check(rule: PublicationIdRule) -> CrossCheck:
    name, publisher = rule.publication, rule.publisher

    def check(props: Mapping[str, object], valid: Mapping[str, Any], message_type: str | None,
              capability_shard_count: int | None, add: Callable[[Problem], None]) -> None:
        if name in valid:
            problem = _publication_id_problem(rule, valid[name], valid.get(publisher))
            if problem is not None:
                add(Problem(name, problem, rule.requirement))
    return check


def _cancellation_check(rule: CancellationRule) -> CrossCheck:
    first, second, cancelled, kind = rule.first, rule.second, rule.value, rule.message_type.value

    def check(props: Mapping[str, object], valid: Mapping[str, Any], message_type: str | None,
              capability_shard_count: int | None, add: Callable[[Problem], None]) -> None:
        if message_type == kind and first in valid and second in valid:
            a, b = valid[first], valid[second]
            if (a == cancelled) != (b == cancelled):
                message = f"must be {cancelled} together with {first} for a cancellation, got {a} and {b}"
                add(Problem(second, message, rule.requirement))
    return check


def _shard_check(rule: ShardRule) -> CrossCheck:
    shard_id_name, count_name, first = rule.shard_id, rule.shard_count, rule.first
    low, high = rule.first_requirement, rule.count_requirement

    def check(props: Mapping[str, object], valid: Mapping[str, Any], message_type: str | None,
              capability_shard_count: int | None, add: Callable[[Problem], None]) -> None:
        if shard_id_name not in valid:
            if count_name in valid and shard_id_name not in props:
                add(Problem(shard_id_name, f"missing while {count_name} is set", high))
            return
        shard_id = valid[shard_id_name]
        shard_count = valid.get(count_name)
        if shard_id < first:
            add(Problem(shard_id_name, f"must be {first} or more, got {shard_id}", low))
        elif shard_count is not None and shard_id > shard_count:
            add(Problem(shard_id_name, f"{shard_id} exceeds {count_name} {shard_count}", high))
        elif capability_shard_count is not None and shard_id > capability_shard_count:
            add(Problem(shard_id_name, f"{shard_id} exceeds the capability's {count_name} {capability_shard_count}",
                        high))
        if capability_shard_count is not None and shard_count is not None and shard_count != capability_shard_count:
            add(Problem(count_name, f"{shard_count} differs from the capability's {count_name} {capability_shard_count}",
                        high))
    return check


def _cross_check(rule: CrossRule) -> CrossCheck:
    match rule:
        case PublicationIdRule():
            return _publication_check(rule)
        case CancellationRule():
            return _cancellation_check(rule)
        case ShardRule():
            return _shard_check(rule)
        case _:
            assert_never(rule)




# --- the profile's validator --------------------------------------------------------------------------

#: Every way a message's application properties break the profile's tables 1-7 (an empty list: valid).
validate_application_properties: Validate = build_validator(TABLES)
_CHECKS: dict[str, Check | None] = {p.name: _value_check(p) for p in TABLES.properties}


def check_property_value(name: str, value: Any) -> str | None:
    """What is wrong with ``value`` for the tables 1-7 property ``name`` (its value rule only:
    e.g. publisherId "2 uppercase letters and 0-16383"), or None. The II checks capability
    documents with it, so a capability never announces values a message is refused for; the
    bridges check their configuration with it."""
    check = _CHECKS.get(name)
    finding = check(value) if check is not None else None
    return None if finding is None else f"{finding[0]} ({finding[1]})"
