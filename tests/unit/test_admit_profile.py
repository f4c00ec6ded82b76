"""_admit_profile.h, the profile as the C accelerator reads it, is what interchange.ground.profile
generates (interchange.broker.admit_header), and what the C code cannot follow is left to Python."""
from __future__ import annotations

import dataclasses

from interchange.broker import admit_header
from interchange.ground.profile import TABLES, CommaList, CustomNames, Kind, Pattern, Property, PublicationIdRule, Range


def test_the_header_is_generated_from_the_profile() -> None:
    assert admit_header.HEADER.read_text(encoding="utf-8") == admit_header.header_text(), (
        "interchange/broker/_admit_profile.h is out of date: run python -m interchange.broker.admit_header "
        "and rebuild the extension (bash scripts/setup.sh)")
    assert admit_header.main(["--check"]) == 0


def _entry(header: str, name: str) -> str:
    return next(line for line in header.splitlines() if line.startswith(f"    [N_{name}] = "))


def test_every_property_and_message_type_is_in_the_header() -> None:
    header = admit_header.header_text()
    assert "#define ADMIT_PROFILE_HANDLED 1" in header
    assert _entry(header, "CAUSE_CODE") == (
        '    [N_CAUSE_CODE] = {"causeCode", 9, K_INTEGER, C_INT_RANGE, 1, 0, 255, -1, 0.0, 0.0, 0, 0},')
    assert "C_UNHANDLED" not in header  # the C code follows every rule of the profile
    assert 'static const char *const MESSAGE_TYPES[MT_COUNT] = {"DENM", "IVIM", "SPATEM", "MAPEM", "SREM", "SSEM", ' \
           '"CPM", "POIM-PA", "CAM"};' in header
    assert "static const int8_t MANDATORY_MT_CAM[] = {N_STATION_TYPE, -1};" in header


def test_rules_without_c_code_are_left_to_python() -> None:
    odd = (Property("road", (7,), Kind.STRING, "IP_135", Pattern("[a-z]{3}", "3 small letters")),
           Property("zones", (7,), Kind.STRING, "IP_135", CommaList(item_regex="[0-9]{2}")),
           Property("speed", (7,), Kind.STRING, "IP_135", Range(0, 9)),  # a range over a string
           Property("weight", (7,), Kind.FLOATING, "IP_135", Range(0.0, 9.0, also=-1)))
    header = admit_header.header_text(dataclasses.replace(TABLES, properties=TABLES.properties + odd))
    assert "#define ADMIT_PROFILE_HANDLED 1" in header
    for name in ("ROAD", "ZONES", "SPEED", "WEIGHT"):
        assert ", C_UNHANDLED, " in _entry(header, name), name
    twice = dataclasses.replace(TABLES, cross_rules=TABLES.cross_rules + (PublicationIdRule("id", "name"),))
    assert "#define ADMIT_PROFILE_HANDLED 0" in admit_header.header_text(twice)
    custom = dataclasses.replace(TABLES, custom_names=CustomNames(regex="x-[a-z]+"))
    assert "#define ADMIT_PROFILE_HANDLED 0" in admit_header.header_text(custom)
