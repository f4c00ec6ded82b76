"""Messages that break each entry of a set of tables 1-7, derived from the tables' data alone.

:func:`cases` turns every property (its kind, its value rule, when it is mandatory), every rule
across properties and the custom-name rule of a :class:`~interchange.ground.profile.Tables` into
property sets that are valid but for that one entry, each with the (property, requirement) a
reader must report. The readers (the broker's validation, its C accelerator, the audit's Spark
SQL) are tested against these: a reader that ignores an entry, or names another requirement,
fails. Written from the profile's declarations, not from any reader's code.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import assert_never

from interchange.ground.profile import (
    TABLES,
    CancellationRule,
    CommaList,
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
    mandatory_for,
)

#: Values that match a Pattern rule's regex, for the regexes of the profile (a new Pattern rule
#: needs a sample here; :func:`good_value` says so).
PATTERN_SAMPLES = ("DE", "ABC", "x", "a-1", "A1")
#: Candidates for a value a Pattern rule refuses.
PATTERN_MISSES = ("", "\n", "%", "0" * 300, "a b", "de", "DEU")


@dataclass(frozen=True)
class Case:
    """``props`` break ``expected`` = (property, requirement) and nothing else of the tables."""

    what: str
    props: dict[str, object]
    expected: tuple[str, str]


def good_value(prop: Property) -> object:
    """A value ``prop``'s kind and rule accept."""
    rule = prop.rule
    match rule:
        case None:
            return {Kind.STRING: "x", Kind.INTEGER: 1, Kind.FLOATING: 1.5}[prop.kind]
        case NonEmpty():
            return "x"
        case OneOf(values=values):
            return values[0]
        case Range(low=low):
            return float(low) if prop.kind is Kind.FLOATING else int(low)
        case Pattern(regex=regex):
            for sample in PATTERN_SAMPLES:
                if re.fullmatch(regex, sample, re.DOTALL):
                    return sample
            raise AssertionError(f"add a value matching {regex!r} to profile_cases.PATTERN_SAMPLES")
        case CommaList():
            return ",1,"
        case PublisherId(letters=letters):
            return "D" * letters + "1"
        case QuadTreeTiles(reference_zoom=zoom):
            return "," + "0" * zoom + ","
        case _:
            assert_never(rule)


def bad_values(prop: Property) -> list[tuple[str, object, str]]:
    """(what, value, requirement) of values of ``prop``'s kind its rule refuses."""
    rule, requirement = prop.rule, prop.requirement
    match rule:
        case None:
            return []
        case NonEmpty():
            return [("empty", "", requirement)]
        case OneOf(values=values):
            return [("not listed", "|".join(values) + "-x", requirement)]
        case Range(low=low, high=high, also=also):
            step = 1.0 if prop.kind is Kind.FLOATING else 1
            below = [("below", low - step, requirement)] if low - step != also else []
            return [("above", high + step, requirement), *below]
        case Pattern(regex=regex):
            misses = [m for m in PATTERN_MISSES if not re.fullmatch(regex, m, re.DOTALL)]
            return [("no match", misses[0], requirement)]
        case CommaList(item_regex=item):
            listed = rule.requirement or requirement
            cases: list[tuple[str, object, str]] = [("no list", "a,b", listed), ("empty item", ",a,,b,", listed)]
            if item is not None:
                cases.append(("bad item", ",1, ,", listed))
            return cases
        case PublisherId(letters=letters, max_number=highest):
            return [("lower case", "d" * letters + "1", requirement),
                    ("number too high", "D" * letters + str(highest + 1), requirement)]
        case QuadTreeTiles(reference_zoom=zoom):
            return [("no leading comma", "0" * zoom + ",", rule.form_requirement),
                    ("too coarse", "," + "0" * (zoom - 1) + ",", rule.zoom_requirement)]
        case _:
            assert_never(rule)


def wrong_kind(kind: Kind) -> object:
    return {Kind.STRING: 5, Kind.INTEGER: "5", Kind.FLOATING: "5.5"}[kind]


def base(tables: Tables, message_type: str) -> dict[str, object]:
    """A valid property set of ``message_type``: its mandatory properties, good values, and the
    values the rules across properties ask for."""
    props: dict[str, object] = {}
    for prop in tables.properties:
        if prop.mandatory.every_message or message_type in prop.mandatory.message_types:
            props[prop.name] = message_type if prop.name == "messageType" else good_value(prop)
    for rule in tables.cross_rules:
        match rule:
            case PublicationIdRule():
                if rule.publisher in props:
                    props[rule.publication] = f"{props[rule.publisher]}{rule.separator}x"
            case CancellationRule() | ShardRule():
                pass
            case _:
                assert_never(rule)
    return props


def _type_where(tables: Tables, prop: Property) -> str:
    """A message type the property is mandatory for, else the first."""
    return (prop.mandatory.message_types or tuple(MessageType))[0].value


def cases(tables: Tables) -> list[Case]:
    """Every entry of ``tables``, broken once (see the module docstring)."""
    found: list[Case] = []
    for prop in tables.properties:
        kind_of = _type_where(tables, prop)
        props = base(tables, kind_of)
        found.append(Case(f"{prop.name}: wrong kind", {**props, prop.name: wrong_kind(prop.kind)},
                          (prop.name, prop.requirement)))
        if prop.name == "messageType":
            props = base(tables, MessageType.CPM.value)
        found += [Case(f"{prop.name}: {what}", {**props, prop.name: value}, (prop.name, requirement))
                  for what, value, requirement in bad_values(prop)]
        if prop.mandatory.every_message or prop.mandatory.message_types:
            missing = {k: v for k, v in base(tables, kind_of).items() if k != prop.name}
            found.append(Case(f"{prop.name}: missing", missing, (prop.name, prop.requirement)))
        for types, requirement in prop.by_type:  # in a message of another of its tables: that table's requirement
            for message_type in types:
                props = base(tables, message_type.value)
                found.append(Case(f"{prop.name} in {message_type.value}: wrong kind",
                                  {**props, prop.name: wrong_kind(prop.kind)}, (prop.name, requirement)))
                found += [Case(f"{prop.name} in {message_type.value}: {what}", {**props, prop.name: value},
                               (prop.name, requirement if listed == prop.requirement else listed))
                          for what, value, listed in bad_values(prop)]
    by_name = {p.name: p for p in tables.properties}
    for rule in tables.cross_rules:
        match rule:
            case PublicationIdRule():
                props = base(tables, MessageType.CPM.value)
                found.append(Case("publication without separator", {**props, rule.publication: "x"},
                                  (rule.publication, rule.requirement)))
                found.append(Case("publication of another publisher",
                                  {**props, rule.publication: f"{props[rule.publisher]}0{rule.separator}x"},
                                  (rule.publication, rule.requirement)))
            case CancellationRule():
                props = base(tables, rule.message_type.value)
                other = good_value(by_name[rule.second])
                found.append(Case("half a cancellation", {**props, rule.first: rule.value, rule.second: other},
                                  (rule.second, rule.requirement)))
            case ShardRule():
                props = base(tables, MessageType.CPM.value)
                found.append(Case("shard below the first", {**props, rule.shard_id: rule.first - 1},
                                  (rule.shard_id, rule.first_requirement)))
                found.append(Case("shard beyond the count",
                                  {**props, rule.shard_id: rule.first + 1, rule.shard_count: rule.first},
                                  (rule.shard_id, rule.count_requirement)))
                found.append(Case("count without shard", {**props, rule.shard_count: rule.first + 1},
                                  (rule.shard_id, rule.count_requirement)))
            case _:
                assert_never(rule)
    custom = tables.custom_names
    found.append(Case("name outside the tables", {**base(tables, MessageType.CPM.value), "notInTheTables": 1},
                      ("notInTheTables", custom.requirement)))
    return found


def valid_sets(tables: Tables) -> list[dict[str, object]]:
    """Valid property sets: each message type's base, and one with every property set to a good value."""
    full = base(tables, MessageType.CPM.value)
    for prop in tables.properties:
        full.setdefault(prop.name, good_value(prop))
    return [base(tables, t.value) for t in MessageType] + [full]


def changed_tables() -> Tables:
    """The profile with six properties added to Table 7 (CPM, laneCount mandatory) and iviStatus narrowed to 0-3."""
    cpm = mandatory_for(MessageType.CPM)
    added = (
        Property("laneCount", (7,), Kind.INTEGER, "IP_135", Range(1, 8), cpm),
        Property("zoneIds", (7,), Kind.STRING, "IP_135", CommaList(item_regex="-?[0-9]+", items="integers")),
        Property("detector", (7,), Kind.STRING, "IP_135", OneOf(("loop", "radar", "camera"))),
        Property("road", (7,), Kind.STRING, "IP_135", Pattern("[A-Z]{3}", "3 uppercase letters")),
        Property("operatorId", (7,), Kind.STRING, "IP_135", PublisherId(letters=3, max_digits=3, max_number=500)),
        # a rule the C code has no code for: messages carrying it go to the Python path
        Property("lane", (7,), Kind.STRING, "IP_135", Pattern("[a-z]+-[0-9]+", "a name and a number")),
    )
    narrowed = tuple(dataclasses.replace(p, rule=Range(0, 3)) if p.name == "iviStatus" else p for p in TABLES.properties)
    return dataclasses.replace(TABLES, properties=narrowed + added)
