"""The message profile (interchange.ground.profile) is data every reader follows.

- The profile itself: one entry per name, a text for every requirement it names, message types
  with their ETSI messageID, the TTL defaults the broker derives from its repetitions.
- Each entry (property kind, value rule, mandatory property, rule across properties, custom-name
  rule) is checked by the broker's validation and by its C accelerator: interchange/testing/profile_cases.py
  breaks each one, from the profile's data alone; the audit's Spark SQL is held to the same cases
  in tests/integration/test_spark_profile.py.
- A profile with added and changed entries is checked by validation and by the C accelerator built
  from it (the header generated, the C file compiled as it is) without a line of reader code:
  tests/integration/test_profile_compiled.py (it runs the compiler).
- The bridges' messages pass the profile's tables, with its TTLs.
"""
from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from proton import Message

import quadtree
from ii_api.wire.models import AnyApplication
from interchange.bridges.if2.keys import If2Envelope, ProviderTable, RoutingKey, croads_properties
from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.config import ControllerConfig, TlexBridgeConfig
from interchange.bridges.tlex.payloads import MESSAGE_IDS
from interchange.bridges.tlex.publication import Translator
from interchange.broker import _admit
from interchange.broker.ttl_policy import DEFAULT_TTL_POLICY
from interchange.broker.validation import validate_application_properties
from interchange.ground import profile
from interchange.ground.profile import TABLES, CommaList, Kind, MessageType, OneOf, QuadTreeTiles, Range
from interchange.testing.profile_cases import Case, cases, valid_sets


def encode(props: dict[str, object]) -> bytes:
    return Message(body=b"x", properties=props, inferred=True).encode()


def found(validate, props: dict[str, object]) -> list[tuple[str, str]]:
    return [(p.property, p.requirement) for p in validate(props)]


# --- the profile ------------------------------------------------------------------------------------

def _requirements_named() -> set[str]:
    named = {p.requirement for p in profile.PROPERTIES} | {profile.CUSTOM_NAMES.requirement, profile.TTL.requirement}
    named |= {p.rule.requirement for p in profile.PROPERTIES if isinstance(p.rule, CommaList) and p.rule.requirement}
    named |= {requirement for p in profile.PROPERTIES for _, requirement in p.by_type}
    named |= {r for p in profile.PROPERTIES if isinstance(p.rule, QuadTreeTiles)
              for r in (p.rule.form_requirement, p.rule.zoom_requirement)}
    for rule in profile.CROSS_RULES:
        named |= {getattr(rule, f) for f in ("requirement", "first_requirement", "count_requirement") if hasattr(rule, f)}
    for spec in profile.MESSAGE_TYPES.values():
        named |= {r for r in (spec.repetition.requirement, spec.area_zoom and spec.area_zoom.requirement) if r}
    return named


def test_every_requirement_the_profile_names_has_a_text() -> None:
    named = _requirements_named()
    assert named <= set(profile.REQUIREMENTS), sorted(named - set(profile.REQUIREMENTS))
    assert {"IP_022", "IP_026", "IP_029", "IP_033", "IP_037", "IP_038", "IP_048", "IP_100", "IP_103", "IP_112", "IP_113",
            "IP_122", "IP_123", "IP_124", "IP_128", "IP_130", "IP_131", "IP_135", "IP_136"} <= named


def test_tables_are_consistent() -> None:
    names = [p.name for p in profile.PROPERTIES]
    assert len(names) == len(set(names)) == 23 and names == list(profile.PROPERTY_NAMES)
    for prop in profile.PROPERTIES:
        assert set(prop.tables) <= set(range(1, 8)), prop
        assert not re.fullmatch(profile.CUSTOM_NAMES.regex, prop.name), prop  # the two name spaces are apart
        numeric = isinstance(prop.rule, Range)
        assert numeric == (prop.kind is not Kind.STRING) or prop.rule is None, prop
    assert {t for p in profile.PROPERTIES for t in p.mandatory.message_types} <= set(MessageType)
    message_type = profile.property_named("messageType")
    assert message_type is not None and isinstance(message_type.rule, OneOf)
    assert message_type.rule.values == tuple(t.value for t in MessageType)


def test_message_types_of_table_1() -> None:
    assert [t.value for t in profile.MESSAGE_TYPES] == [
        "DENM", "IVIM", "SPATEM", "MAPEM", "SREM", "SSEM", "CPM", "POIM-PA", "CAM"]
    ids = {t.value: spec.etsi_message_id for t, spec in profile.MESSAGE_TYPES.items()}
    # ETSI TS 102 894-2 MessageId; POIM-PA's is not confirmed (see the profile's docstring)
    assert ids == {"DENM": 1, "CAM": 2, "SPATEM": 4, "MAPEM": 5, "IVIM": 6, "SREM": 9, "SSEM": 10, "CPM": 14,
                   "POIM-PA": None}
    assert profile.REPEATED_WHILE_VALID == (MessageType.DENM, MessageType.IVIM, MessageType.MAPEM, MessageType.POIM_PA)
    zooms = {t.value: spec.area_zoom.zoom for t, spec in profile.MESSAGE_TYPES.items() if spec.area_zoom}
    assert zooms == {"DENM": 13, "IVIM": 13, "POIM-PA": 13, "SPATEM": 14, "MAPEM": 14, "SREM": 14, "SSEM": 14}


def test_ttl_defaults_follow_the_repetitions() -> None:
    """IP_033: the broker's default TTL of each type is its repetition interval x 1.2, at least 1 s."""
    for message_type, spec in profile.MESSAGE_TYPES.items():
        expected = max(1_000, round(spec.repetition.interval_ms * 1.2))
        assert DEFAULT_TTL_POLICY.default_ttl_ms(message_type.value) == expected
    assert DEFAULT_TTL_POLICY.default_ttl_ms("other") == round(profile.FALLBACK_INTERVAL_MS * 1.2)
    assert profile.TTL.ttl_ms(100) == 1_000 and profile.TTL.ttl_ms(540_000) == 648_000


# --- every entry, checked by validation and by the C accelerator ----------------------------------------

PROFILE_CASES = cases(TABLES)


def test_the_cases_cover_every_entry() -> None:
    broken = {case.expected[0] for case in PROFILE_CASES}
    assert set(profile.PROPERTY_NAMES) <= broken
    requirements = {case.expected[1] for case in PROFILE_CASES}
    assert requirements == {"IP_022", "IP_026", "IP_029", "IP_037", "IP_038", "IP_100", "IP_103", "IP_122", "IP_123",
                            "IP_128", "IP_130", "IP_131", "IP_135"}
    assert len(PROFILE_CASES) > 60


@pytest.mark.parametrize("case", PROFILE_CASES, ids=lambda case: case.what)
def test_every_entry_is_checked_by_validation_and_the_accelerator(case: Case) -> None:
    assert found(validate_application_properties, case.props) == [case.expected]
    result = _admit.admit(encode(case.props), None)
    assert result is not None and result[1] is False


def test_valid_sets_pass_both() -> None:
    for props in valid_sets(TABLES):
        assert validate_application_properties(props) == [], props
        result = _admit.admit(encode(props), None)
        assert result is not None and result[1] is True, props


# --- a changed profile ------------------------------------------------------------------------------------


# --- the bridges publish what the profile accepts ------------------------------------------------------

def test_the_bridges_messages_obey_the_profile() -> None:
    """What the TLEX and IF2 bridges put in application properties passes the profile's tables (their
    TTLs follow its IP_033 rule); a cancellation DENM from IF2 carries the profile's cancellation pair."""
    controller = ControllerConfig(tlc_id="NLZH0023", intersections=["5-57"], latitude=51.485992, longitude=4.735311,
                                  names=["Main street"], shard_id=2)
    config = TlexBridgeConfig(api_url="https://x", authorization="t", domain="d", actor=Path("a"), publisher_id="NL00001",
                              originating_country="NL", controllers=[controller], shard_count=3)
    translator = Translator(config)
    sent = [*translator.to_bi(Payload(MESSAGE_IDS["MAPEM"], 1, b"m", "NLZH0023"), 0),
            *translator.to_bi(Payload(MESSAGE_IDS["SPATEM"], 1, b"s", "NLZH0023"), 1),
            *translator.to_bi(Payload(MESSAGE_IDS["SSEM"], 1, b"x", "NLZH0023"), 2)]
    assert [m.kind for m in sent] == ["MAPEM", "SPATEM", "SSEM"]
    for message in sent:
        assert validate_application_properties(message.properties, capability_shard_count=3) == [], message
        interval = config.repetition_ms[message.kind]
        assert message.ttl_ms == profile.TTL.ttl_ms(interval)
    assert sent[0].ttl_ms == 648_000 and sent[1].ttl_ms == 1_000
    for if2_type, subtype in (("DENM", "3"), ("DENM", "-1"), ("IVI", "0"), ("MAP", "0"), ("SPAT", "0")):
        tile = quadtree.from_latlon(51.485992, 4.735311, 18)
        props = croads_properties(If2Envelope(RoutingKey(if2_type, "1.2.1", "RWS", subtype, tile), 10_000,
                                              51.485992, 4.735311), ProviderTable({"RWS": "NL00001"}))
        assert validate_application_properties(props) == [], props
    cancelled = croads_properties(If2Envelope(RoutingKey("DENM", "1.2.1", "RWS", "-1", tile)),
                                  ProviderTable({"RWS": "NL00001"}))
    assert (cancelled["causeCode"], cancelled["subCauseCode"]) == (profile.CANCELLATION, profile.CANCELLATION)


def test_the_ii_has_an_application_model_for_each_message_type() -> None:
    """Table 11's applications are II models with a field per type: one per message type of the profile
    (a type added to the profile needs its model; this says so), plus the catch-all."""
    variants = typing.get_args(typing.get_args(AnyApplication)[0])
    tags = {typing.get_args(variant)[1].tag for variant in variants}
    assert tags == {t.value for t in MessageType} | {"other"}
    for variant in variants:
        model, tag = typing.get_args(variant)[0], typing.get_args(variant)[1].tag
        if tag != "other":
            assert model.model_fields["messageType"].default == tag
