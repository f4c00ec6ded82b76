"""Write ``_admit_profile.h``, the message profile as the C accelerator reads it, from the profile.

A rule ``_admit.c`` has no code for is written ``C_UNHANDLED`` (that property goes to the Python
path), one across properties it cannot follow makes ``ADMIT_PROFILE_HANDLED`` 0, so a profile
change never makes the accelerator disagree with the Python path.

    .venv/bin/python -m interchange.broker.admit_header [--check]

then rebuild the extension; ``tests/unit/test_admit_profile.py`` fails when the header is out of
date. Details: docs/broker.md ("Admission").
"""
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import assert_never

from interchange.ground.profile import (
    TABLES,
    CancellationRule,
    CommaList,
    Kind,
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

__all__ = ["HEADER", "header_text", "main"]

HEADER = Path(__file__).with_name("_admit_profile.h")
_INT64 = range(-(2**63), 2**63)
#: The item pattern ``is_integer_list`` implements.
_INTEGER_ITEM = "-?[0-9]+"
#: ``[A-Z]{n}``: the patterns ``is_upper`` implements (n letters).
_UPPER = re.compile(r"\[A-Z\]\{([0-9]+)\}")
#: ``<prefix>-[^-]+-.+``: the custom-name rules ``is_custom_name`` implements.
_CUSTOM = re.compile(r"([a-z]+-)\[\^-\]\+-\.\+")


#: The checks the C code applies to a value of each kind.
_CHECKS_OF = {
    Kind.STRING: {"C_NONE", "C_NON_EMPTY", "C_ONE_OF", "C_MESSAGE_TYPE", "C_UPPER", "C_LIST", "C_INTEGER_LIST",
                  "C_PUBLISHER_ID", "C_QUADTREE"},
    Kind.INTEGER: {"C_NONE", "C_INT_RANGE"},
    Kind.FLOATING: {"C_NONE", "C_FLOAT_RANGE"},
}


def _c_name(name: str) -> str:
    """``publisherId`` -> ``PUBLISHER_ID``, ``POIM-PA`` -> ``POIM_PA``."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return re.sub(r"[^A-Za-z0-9]", "_", snake).upper()


def _c_string(text: str) -> str:
    data = text.encode()
    return '"' + "".join(chr(b) if 0x20 <= b < 0x7F and chr(b) not in '"\\?' else f"\\{b:03o}" for b in data) + '"'


class _Spec:
    """One property as the C struct ``name_spec`` holds it."""

    def __init__(self, prop: Property, message_type_property: str) -> None:
        self.prop = prop
        self.check, self.low, self.high, self.also = "C_NONE", 0, 0, None
        self.values: tuple[str, ...] = ()
        self.flow = self.fhigh = 0.0
        rule, kind = prop.rule, prop.kind
        match rule:
            case None:
                pass
            case NonEmpty():
                self.check = "C_NON_EMPTY"
            case OneOf(values=values):
                self.values = values
                self.check = "C_MESSAGE_TYPE" if prop.name == message_type_property else "C_ONE_OF"
            case Range(low=low, high=high, also=also):
                if kind is Kind.FLOATING and also is None:
                    self.check, self.flow, self.fhigh = "C_FLOAT_RANGE", float(low), float(high)
                elif kind is Kind.INTEGER and all(isinstance(x, int) and x in _INT64 for x in (low, high)) \
                        and (also is None or also in _INT64):
                    self.check, self.low, self.high, self.also = "C_INT_RANGE", int(low), int(high), also
                else:
                    self.check = "C_UNHANDLED"
            case Pattern(regex=regex):
                upper = _UPPER.fullmatch(regex)
                self.check, self.low = ("C_UPPER", int(upper.group(1))) if upper else ("C_UNHANDLED", 0)
            case CommaList(item_regex=item):
                self.check = {None: "C_LIST", _INTEGER_ITEM: "C_INTEGER_LIST"}.get(item, "C_UNHANDLED")
            case PublisherId():
                # low: the letters, high: the highest number, also: the most digits
                self.check, self.low, self.high = "C_PUBLISHER_ID", rule.letters, rule.max_number
                self.also = rule.max_digits
            case QuadTreeTiles(reference_zoom=zoom):
                self.check, self.low = "C_QUADTREE", zoom
            case _:
                assert_never(rule)
        if self.check not in _CHECKS_OF[kind]:
            self.check = "C_UNHANDLED"  # e.g. a range on a string: the C code has none

    def initializer(self, first_value: int) -> str:
        p = self.prop
        has_also = int(self.also is not None)
        return (f"    [N_{_c_name(p.name)}] = {{{_c_string(p.name)}, {len(p.name.encode())}, K_{p.kind.name}, "
                f"{self.check}, {has_also}, {self.low}, {self.high}, {self.also or 0}, {self.flow!r}, "
                f"{self.fhigh!r}, {first_value}, {len(self.values) if self.check == 'C_ONE_OF' else 0}}},")


def _message_type_property(tables: Tables) -> Property:
    found = [p for p in tables.properties if p.name == "messageType" and isinstance(p.rule, OneOf)]
    if len(found) != 1:
        raise SystemExit("admit_header: the profile has no messageType property with a OneOf rule")
    return found[0]


def _cross_rules(tables: Tables, mt_names: dict[str, str]) -> tuple[list[str], bool]:
    """The #defines of the rules across properties, and whether the C code can follow them all."""
    lines: list[str] = []
    seen: set[type] = set()
    handled = True
    for rule in tables.cross_rules:
        if type(rule) in seen:
            handled = False  # the C code follows one rule of each kind
            continue
        seen.add(type(rule))
        match rule:
            case PublicationIdRule():
                if len(rule.separator.encode()) != 1:
                    handled = False
                lines += ["#define HAS_PUBLICATION_RULE 1", f"#define PUBLICATION_SLOT N_{_c_name(rule.publication)}",
                          f"#define PUBLISHER_SLOT N_{_c_name(rule.publisher)}",
                          f"#define PUBLICATION_SEPARATOR {ord(rule.separator[0]) if rule.separator else 0}"]
            case CancellationRule():
                if rule.value not in _INT64:
                    handled = False
                lines += ["#define HAS_CANCELLATION_RULE 1",
                          f"#define CANCELLATION_TYPE {mt_names[rule.message_type.value]}",
                          f"#define CANCELLATION_FIRST N_{_c_name(rule.first)}",
                          f"#define CANCELLATION_SECOND N_{_c_name(rule.second)}",
                          f"#define CANCELLATION_VALUE ({rule.value})"]
            case ShardRule():
                lines += ["#define HAS_SHARD_RULE 1", f"#define SHARD_ID_SLOT N_{_c_name(rule.shard_id)}",
                          f"#define SHARD_COUNT_SLOT N_{_c_name(rule.shard_count)}", f"#define SHARD_FIRST ({rule.first})"]
            case _:
                assert_never(rule)
    for kind in ("PUBLICATION", "CANCELLATION", "SHARD"):
        if not any(line.startswith(f"#define HAS_{kind}_RULE") for line in lines):
            lines.append(f"#define HAS_{kind}_RULE 0")
    return lines, handled


def _name_lookup(properties: Sequence[Property]) -> Iterator[str]:
    """The C function from a property name's bytes to its slot: a switch on the length, then the bytes."""
    yield "/* The standard property named s[:len], or -1: by length, then by bytes. */"
    yield "static int"
    yield "name_id(const uint8_t *s, pos_t len)"
    yield "{"
    yield "    switch (len) {"
    by_length: dict[int, list[str]] = {}
    for p in properties:
        by_length.setdefault(len(p.name.encode()), []).append(p.name)
    for length, names in sorted(by_length.items()):
        tests = " ".join(f"if (same(s, {_c_string(n)}, {length})) return N_{_c_name(n)};" for n in names)
        yield f"    case {length}: {tests} break;"
    yield "    default: break;"
    yield "    }"
    yield "    return -1;"
    yield "}"


def _mandatory_lists(properties: Sequence[Property], mt_names: Mapping[str, str]) -> Iterator[str]:
    """The slots every message must have, and those each message type must have, as -1-ended lists."""
    yield "/* mandatory properties, each list ending in -1 */"
    every = [f"N_{_c_name(p.name)}" for p in properties if p.mandatory.every_message]
    yield "static const int8_t MANDATORY_ALL[] = {" + ", ".join([*every, "-1"]) + "};"
    for t, mt in mt_names.items():
        names = [f"N_{_c_name(p.name)}" for p in properties if t in p.mandatory.message_types]
        yield f"static const int8_t MANDATORY_{mt}[] = {{" + ", ".join([*names, "-1"]) + "};"
    yield "static const int8_t *const MANDATORY_BY_TYPE[MT_COUNT] = {" + ", ".join(
        f"MANDATORY_{mt}" for mt in mt_names.values()) + "};"


def _lines(tables: Tables) -> Iterator[str]:
    properties = tables.properties
    message_type_property = _message_type_property(tables)
    assert isinstance(message_type_property.rule, OneOf)
    message_types = message_type_property.rule.values
    mt_names = {t: f"MT_{_c_name(t)}" for t in message_types}
    specs = [_Spec(p, message_type_property.name) for p in properties]
    cross, handled = _cross_rules(tables, mt_names)
    custom = _CUSTOM.fullmatch(tables.custom_names.regex)
    yield "/* Generated by `python -m interchange.broker.admit_header` from interchange.ground.profile: do not edit."
    yield " * tests/unit/test_admit_profile.py fails when this is not what the profile generates. */"
    yield f"#define ADMIT_PROFILE_HANDLED {int(handled and custom is not None)}"
    yield ""
    yield "enum name_id {"
    yield "    " + ", ".join(f"N_{_c_name(p.name)}" for p in properties) + ", N_COUNT"
    yield "};"
    yield f"#define MESSAGE_TYPE_SLOT N_{_c_name(message_type_property.name)}"
    yield ""
    yield "enum { " + ", ".join(mt_names.values()) + ", MT_COUNT };"
    yield "static const char *const MESSAGE_TYPES[MT_COUNT] = {" + ", ".join(map(_c_string, message_types)) + "};"
    yield "static const uint8_t MESSAGE_TYPE_LENGTHS[MT_COUNT] = {" + ", ".join(
        str(len(t.encode())) for t in message_types) + "};"
    yield ""
    values = [v for spec in specs if spec.check == "C_ONE_OF" for v in spec.values]
    yield "/* the strings of the C_ONE_OF rules, each rule's a run of them */"
    size = max(len(values), 1)
    yield f"static const char *const ONE_OF_VALUES[{size}] = {{" + (", ".join(map(_c_string, values)) or "NULL") + "};"
    yield f"static const uint8_t ONE_OF_LENGTHS[{size}] = {{" + (", ".join(str(len(v.encode())) for v in values) or "0") + "};"
    yield ""
    yield "static const struct name_spec NAMES[N_COUNT] = {"
    first = 0
    for spec in specs:
        yield spec.initializer(first)
        first += len(spec.values) if spec.check == "C_ONE_OF" else 0
    yield "};"
    yield ""
    yield from _name_lookup(properties)
    yield ""
    yield from _mandatory_lists(properties, mt_names)
    yield ""
    yield "/* the rules across properties */"
    yield from cross
    yield ""
    yield "/* IP_131: custom names are <prefix>[^-]+-.+ */"
    yield f"#define CUSTOM_PREFIX {_c_string(custom.group(1) if custom else 'custom-')}"


def header_text(tables: Tables = TABLES) -> str:
    """The header ``tables`` (the profile's by default) generate."""
    return "\n".join(_lines(tables)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the header is out of date, write nothing")
    args = parser.parse_args(argv)
    text = header_text()
    current = HEADER.read_text(encoding="utf-8") if HEADER.exists() else None
    if args.check:
        if current != text:
            print(f"{HEADER} is out of date: run python -m interchange.broker.admit_header", file=sys.stderr)  # noqa: T201
            return 1
        return 0
    if current != text:
        HEADER.write_text(text, encoding="utf-8")
        print(f"wrote {HEADER}: rebuild the extension (bash scripts/setup.sh)")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
