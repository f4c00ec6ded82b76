"""Tests of the application-properties checks of tables 1-7 (IP_022, IP_026, IP_029, IP_038, IP_131 ...).

Property sets are encoded with proton and read back with the scanner, so the AMQP types the
validator sees are the ones a real producer's message carries.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message, byte, float32, int32, short, symbol, ubyte, ulong, ushort

import quadtree
from interchange.broker.amqp_scan import scan_message
from interchange.broker.validation import (
    MESSAGE_TYPES,
    STANDARD_PROPERTIES,
    Problem,
    validate_application_properties,
)

QT = ",120212302013111223,1202123020110,"  # one zoom-18 reference tile and one zoom-13 area tile
DELETE = object()

COMMON = {
    "publisherId": "DE15608",
    "originatingCountry": "DE",
    "quadTree": QT,
}
EXTRA = {
    "DENM": {"causeCode": int32(1), "subCauseCode": int32(4), "serviceType": ",HLN-TJA,"},
    "IVIM": {
        "iviStatus": int32(0),
        "iviType": ",1,0,2,",
        "pictogramCategoryCode": ",557,559,612,",
        "iviContainer": ",giv,tc,avc,",
    },
    "SPATEM": {"id": ",5-57,5-59,", "name": ",Main street,-1,"},
    "MAPEM": {"id": ",5-57,", "name": ",-1,"},
    "SREM": {"id": ",6-12,"},
    "SSEM": {"id": ",6-12,"},
    "CAM": {"stationType": int32(5), "vehicleRole": int32(0)},
    "CPM": {"type": "RSU"},
    "POIM-PA": {},
}


def props_for(message_type: str, **changes: object) -> dict[str, object]:
    props: dict[str, object] = {
        **COMMON,
        "messageType": message_type,
        "protocolVersion": f"{message_type}:1.3.1",
        "publicationId": f"DE15608:{message_type}-0001",
        "baselineVersion": "1.8.0",
        "latitude": 52.52,
        "longitude": 13.405,
        **EXTRA[message_type],
    }
    for name, value in changes.items():
        if value is DELETE:
            del props[name]
        else:
            props[name] = value
    return props


def problems_of(props: dict[str, object], **kwargs: object) -> list[str]:
    """Encode with proton, scan, validate: the problems as text."""
    scanned = scan_message(Message(body=b"payload", inferred=True, properties=props).encode())
    found = validate_application_properties(
        scanned.application_properties, scanned.application_property_types, **kwargs
    )
    return [str(problem) for problem in found]


@pytest.mark.parametrize("message_type", sorted(MESSAGE_TYPES))
def test_valid_property_set_for_each_message_type(message_type: str) -> None:
    assert problems_of(props_for(message_type)) == []


@pytest.mark.parametrize("message_type", sorted(MESSAGE_TYPES))
def test_minimal_property_set_for_each_message_type(message_type: str) -> None:
    mandatory = {"DENM": ("causeCode", "subCauseCode"), "CAM": ("stationType",)}.get(message_type, ())
    props = {
        **COMMON,
        "messageType": message_type,
        "protocolVersion": "x:1",
        **{name: int32(1) for name in mandatory},
    }
    assert problems_of(props) == []


def test_appendix_f_logged_denm_is_valid() -> None:
    props = {
        "latitude": 50.2268645,
        "longitude": 14.4041937,
        "messageType": "DENM",
        "protocolVersion": "DENM:1.3.1",
        "causeCode": 1,
        "subCauseCode": 4,
        "serviceType": ",HLN-TJA,",
        "quadTree": ",120212302013111223,1202123020110,1202123020111,1202123021000,",
        "originatingCountry": "CZ",
        "publisherId": "CZ00003",
    }
    assert problems_of(props) == []


@pytest.mark.parametrize(
    "message_type, changes, expected",
    [
        # Table 1, IP_022: mandatory fields and their formats
        ("DENM", {"publisherId": DELETE}, ["publisherId: missing, mandatory for every C-ITS message (IP_022)"]),
        ("CPM", {"originatingCountry": DELETE, "protocolVersion": DELETE}, [
            "originatingCountry: missing, mandatory for every C-ITS message (IP_022)",
            "protocolVersion: missing, mandatory for every C-ITS message (IP_022)",
        ]),
        ("IVIM", {"quadTree": DELETE}, ["quadTree: missing, mandatory for every C-ITS message (IP_022)"]),
        ("DENM", {"messageType": DELETE}, ["messageType: missing, mandatory for every C-ITS message (IP_022)"]),
        ("DENM", {"messageType": "DENMX"}, [
            "messageType: must be one of CAM, CPM, DENM, IVIM, MAPEM, POIM-PA, SPATEM, SREM, SSEM, got 'DENMX' (IP_022)"
        ]),
        ("DENM", {"messageType": "denm"}, [
            "messageType: must be one of CAM, CPM, DENM, IVIM, MAPEM, POIM-PA, SPATEM, SREM, SSEM, got 'denm' (IP_022)"
        ]),
        ("DENM", {"publisherId": "de15608"}, [
            "publisherId: must be 2 uppercase letters and a number 0-16383 (ISO 14816), got 'de15608' (IP_022)"
        ]),
        ("DENM", {"publisherId": "DE16384", "publicationId": "DE16384:x"}, [
            "publisherId: must be 2 uppercase letters and a number 0-16383 (ISO 14816), got 'DE16384' (IP_022)"
        ]),
        ("DENM", {"publisherId": "DE016383", "publicationId": "DE016383:x"}, [
            "publisherId: must be 2 uppercase letters and a number 0-16383 (ISO 14816), got 'DE016383' (IP_022)"
        ]),
        ("DENM", {"publisherId": "DE"}, [
            "publisherId: must be 2 uppercase letters and a number 0-16383 (ISO 14816), got 'DE' (IP_022)"
        ]),
        ("DENM", {"publisherId": symbol("DE15608")}, ["publisherId: must be a string, got AMQP symbol (IP_022)"]),
        ("DENM", {"publisherId": None}, ["publisherId: must be a string, got AMQP null (IP_022)"]),
        ("CAM", {"originatingCountry": "DEU"}, [
            "originatingCountry: must be an ISO 3166-1 alpha-2 code (2 uppercase letters), got 'DEU' (IP_022)"
        ]),
        ("CAM", {"originatingCountry": "de"}, [
            "originatingCountry: must be an ISO 3166-1 alpha-2 code (2 uppercase letters), got 'de' (IP_022)"
        ]),
        ("CAM", {"protocolVersion": ""}, ["protocolVersion: must not be empty (IP_022)"]),
        ("CAM", {"baselineVersion": int32(1)}, ["baselineVersion: must be a string, got AMQP int (IP_022)"]),
        ("DENM", {"publicationId": "DE15608"}, [
            "publicationId: must be '<publisherId>:<id>', got 'DE15608' (IP_022)"
        ]),
        ("DENM", {"publicationId": "DE15608:"}, [
            "publicationId: must be '<publisherId>:<id>', got 'DE15608:' (IP_022)"
        ]),
        ("DENM", {"publicationId": "NO73944:679ABX92"}, [
            "publicationId: must start with the publisherId 'DE15608', got 'NO73944:679ABX92' (IP_022)"
        ]),
        ("DENM", {"serviceType": "HLN-TJA"}, [
            "serviceType: must be a comma separated list like ',a,b,', got 'HLN-TJA' (IP_022)"
        ]),
        ("DENM", {"serviceType": ",HLN-TJA,,SI-GLOSA,"}, [
            "serviceType: must be a comma separated list like ',a,b,', got ',HLN-TJA,,SI-GLOSA,' (IP_022)"
        ]),
        ("DENM", {"latitude": 90.5}, ["latitude: must be -90.0 to 90.0, got 90.5 (IP_022)"]),
        ("DENM", {"longitude": -180.25}, ["longitude: must be -180.0 to 180.0, got -180.25 (IP_022)"]),
        ("DENM", {"longitude": float("nan")}, ["longitude: must be -180.0 to 180.0, got nan (IP_022)"]),
        ("DENM", {"longitude": int32(13)}, ["longitude: must be a float or double, got AMQP int (IP_022)"]),
        ("DENM", {"latitude": "52.5"}, ["latitude: must be a float or double, got AMQP string (IP_022)"]),
        # quadTree, IP_037/038
        ("DENM", {"quadTree": "120212302013111223"}, [
            "quadTree: malformed: the quadTree property must start with ',': '120212302013111223' (IP_037)"
        ]),
        ("DENM", {"quadTree": ",120212302013111224,"}, None),  # malformed tile; text from the quadtree package
        ("DENM", {"quadTree": ",1202123020110,1202123020111,"}, [
            "quadTree: needs at least one tile of zoom level 18 or more (IP_038)"
        ]),
        ("DENM", {"quadTree": symbol(QT)}, ["quadTree: must be a string, got AMQP symbol (IP_022)"]),
        # Table 2, IP_026: DENM
        ("DENM", {"causeCode": DELETE}, ["causeCode: missing, mandatory for DENM (IP_026)"]),
        ("DENM", {"causeCode": DELETE, "subCauseCode": DELETE}, [
            "causeCode: missing, mandatory for DENM (IP_026)",
            "subCauseCode: missing, mandatory for DENM (IP_026)",
        ]),
        ("DENM", {"causeCode": "1"}, ["causeCode: must be an integer, got AMQP string (IP_026)"]),
        ("DENM", {"causeCode": True}, ["causeCode: must be an integer, got AMQP boolean (IP_026)"]),
        ("DENM", {"causeCode": 1.0}, ["causeCode: must be an integer, got AMQP double (IP_026)"]),
        ("DENM", {"subCauseCode": int32(256)}, [
            "subCauseCode: must be 0 to 255, or -1 for a cancellation, got 256 (IP_026)"
        ]),
        ("DENM", {"causeCode": int32(-2)}, ["causeCode: must be 0 to 255, or -1 for a cancellation, got -2 (IP_026)"]),
        ("DENM", {"causeCode": int32(-1)}, [
            "subCauseCode: must be -1 together with causeCode for a cancellation, got -1 and 4 (IP_026)"
        ]),
        # Table 3, IP_029: IVIM
        ("IVIM", {"iviStatus": int32(8)}, ["iviStatus: must be 0 to 7, got 8 (IP_029)"]),
        ("IVIM", {"iviStatus": "0"}, ["iviStatus: must be an integer, got AMQP string (IP_029)"]),
        ("IVIM", {"iviType": ",1,x,"}, ["iviType: must list integers like ',557,559,', got ',1,x,' (IP_029)"]),
        ("IVIM", {"pictogramCategoryCode": "557,559,"}, [
            "pictogramCategoryCode: must be a comma separated list like ',1,2,', got '557,559,' (IP_029)"
        ]),
        ("IVIM", {"pictogramCategoryCode": int32(557)}, [
            "pictogramCategoryCode: must be a string, got AMQP int (IP_029)"
        ]),
        ("IVIM", {"iviContainer": ",giv,,tc,"}, [
            "iviContainer: must be a comma separated list like ',a,b,', got ',giv,,tc,' (IP_029)"
        ]),
        ("IVIM", {"iviContainer": ","}, ["iviContainer: must be a comma separated list like ',a,b,', got ',' (IP_029)"]),
        # Tables 4 and 5, IP_100/IP_103
        ("SPATEM", {"id": "5-57"}, ["id: must be a comma separated list like ',a,b,', got '5-57' (IP_100)"]),
        ("MAPEM", {"name": "name1,"}, ["name: must be a comma separated list like ',a,b,', got 'name1,' (IP_100)"]),
        ("SREM", {"id": int32(5)}, ["id: must be a string, got AMQP int (IP_103)"]),
        ("SSEM", {"id": "5-57"}, ["id: must be a comma separated list like ',a,b,', got '5-57' (IP_103)"]),
        # Table 6, IP_122/IP_123: CAM
        ("CAM", {"stationType": DELETE}, ["stationType: missing, mandatory for CAM (IP_122)"]),
        ("CAM", {"stationType": 5.0}, ["stationType: must be an integer, got AMQP double (IP_122)"]),
        ("CAM", {"stationType": int32(256)}, ["stationType: must be 0 to 255, got 256 (IP_122)"]),
        ("CAM", {"vehicleRole": int32(16)}, ["vehicleRole: must be 0 to 15, got 16 (IP_123)"]),
        # Table 7, IP_135: CPM
        ("CPM", {"type": "Truck"}, ["type: must be 'Vehicle' or 'RSU', got 'Truck' (IP_135)"]),
        ("CPM", {"type": "vehicle"}, ["type: must be 'Vehicle' or 'RSU', got 'vehicle' (IP_135)"]),
        # Sharding, IP_128-130 and appendix G
        ("SPATEM", {"shardId": int32(3), "shardCount": int32(2)}, ["shardId: 3 exceeds shardCount 2 (IP_130)"]),
        ("SPATEM", {"shardId": int32(0), "shardCount": int32(2)}, ["shardId: must be 1 or more, got 0 (IP_128)"]),
        ("SPATEM", {"shardCount": int32(2)}, ["shardId: missing while shardCount is set (IP_130)"]),
        ("SPATEM", {"shardId": int32(1), "shardCount": int32(0)}, ["shardCount: must be 1 to 2147483647, got 0 (IP_022)"]),
        ("SPATEM", {"shardId": "1"}, ["shardId: must be an integer, got AMQP string (IP_022)"]),
        # IP_131: names outside tables 1-7
        ("DENM", {"foo": "x"}, ["foo: not defined in tables 1-7 and not named custom-<namespace>-<name> (IP_131)"]),
        ("DENM", {"custom-x": "x"}, [
            "custom-x: not defined in tables 1-7 and not named custom-<namespace>-<name> (IP_131)"
        ]),
        ("DENM", {"custom--x": "x"}, [
            "custom--x: not defined in tables 1-7 and not named custom-<namespace>-<name> (IP_131)"
        ]),
        ("DENM", {"Custom-nl-x": "x"}, [
            "Custom-nl-x: not defined in tables 1-7 and not named custom-<namespace>-<name> (IP_131)"
        ]),
        ("DENM", {"causecode": int32(1)}, [
            "causecode: not defined in tables 1-7 and not named custom-<namespace>-<name> (IP_131)"
        ]),
    ],
)
def test_invalid_property_sets(message_type: str, changes: dict, expected: list[str] | None) -> None:
    found = problems_of(props_for(message_type, **changes))
    if expected is None:
        assert len(found) == 1 and found[0].startswith("quadTree: malformed: ") and found[0].endswith("(IP_037)")
    else:
        assert found == expected


@pytest.mark.parametrize(
    "message_type, changes",
    [
        ("DENM", {"causeCode": int32(-1), "subCauseCode": int32(-1)}),  # cancellation
        ("DENM", {"causeCode": ubyte(99), "subCauseCode": ulong(0)}),  # any AMQP integer type
        ("DENM", {"causeCode": short(1), "subCauseCode": byte(2)}),
        ("CAM", {"stationType": ushort(15), "vehicleRole": 15}),
        ("DENM", {"latitude": float32(52.5), "longitude": -180.0}),
        ("DENM", {"publisherId": "DE00001", "publicationId": "DE00001:a:b"}),  # leading zeros; ':' in the id
        ("DENM", {"publisherId": "NL16383", "publicationId": "NL16383:x"}),  # IP_031 default value
        ("DENM", {"publisherId": "AT0", "publicationId": "AT0:x"}),
        ("DENM", {"stationType": int32(5), "type": "RSU", "iviStatus": int32(1)}),  # known names on another type
        ("IVIM", {"iviType": ",-1,", "pictogramCategoryCode": ",-1,", "iviStatus": int32(2)}),
        ("DENM", {"custom-nordicway-roadworks": "x", "custom-c-roads-nl-x": int32(1)}),  # IP_131
        ("SPATEM", {"shardId": int32(2), "shardCount": int32(2)}),
        ("SPATEM", {"shardId": int32(1)}),  # without shardCount
        ("MAPEM", {"name": ",Main street,Kerkstraat,"}),
    ],
)
def test_valid_variants(message_type: str, changes: dict) -> None:
    assert problems_of(props_for(message_type, **changes)) == []


def test_capability_shard_count() -> None:
    ok = props_for("SPATEM", shardId=int32(3), shardCount=int32(3))
    assert problems_of(ok, capability_shard_count=3) == []
    assert problems_of(props_for("SPATEM", shardId=int32(3)), capability_shard_count=2) == [
        "shardId: 3 exceeds the capability's shardCount 2 (IP_130)"
    ]
    assert problems_of(ok, capability_shard_count=4) == [
        "shardCount: 3 differs from the capability's shardCount 4 (IP_130)"
    ]
    # IP_128: a message without shardId belongs to shard 1 and is accepted
    assert problems_of(props_for("SPATEM"), capability_shard_count=4) == []


def test_several_problems_are_all_reported_in_order() -> None:
    props = props_for("DENM", publisherId="x", causeCode=DELETE, foo=1, latitude=100.0)
    assert problems_of(props) == [
        "publisherId: must be 2 uppercase letters and a number 0-16383 (ISO 14816), got 'x' (IP_022)",
        "latitude: must be -90.0 to 90.0, got 100.0 (IP_022)",
        "foo: not defined in tables 1-7 and not named custom-<namespace>-<name> (IP_131)",
        "causeCode: missing, mandatory for DENM (IP_026)",
    ]


def test_invalid_message_type_skips_type_specific_mandatory_fields() -> None:
    props = {**COMMON, "protocolVersion": "x", "messageType": int32(1)}
    assert problems_of(props) == ["messageType: must be a string, got AMQP int (IP_022)"]


def test_types_inferred_from_plain_python_values() -> None:
    props = {**COMMON, "messageType": "DENM", "protocolVersion": "DENM:1", "causeCode": 1, "subCauseCode": True}
    found = validate_application_properties(props)
    assert [str(problem) for problem in found] == ["subCauseCode: must be an integer, got AMQP boolean (IP_026)"]
    assert found[0] == Problem("subCauseCode", "must be an integer, got AMQP boolean", "IP_026")


def test_explicit_types_win_over_python_values() -> None:
    props = {**COMMON, "messageType": "CPM", "protocolVersion": "CPM:2"}
    types = {name: "string" for name in props}
    assert validate_application_properties(props, types) == []
    types["originatingCountry"] = "symbol"
    assert [str(p) for p in validate_application_properties(props, types)] == [
        "originatingCountry: must be a string, got AMQP symbol (IP_022)"
    ]


def test_standard_property_names_cover_tables_1_to_7() -> None:
    assert STANDARD_PROPERTIES == {
        "publisherId", "publicationId", "originatingCountry", "protocolVersion", "serviceType",
        "baselineVersion", "messageType", "longitude", "latitude", "quadTree", "shardId", "shardCount",
        "causeCode", "subCauseCode",
        "iviStatus", "iviType", "pictogramCategoryCode", "iviContainer",
        "id", "name",
        "stationType", "vehicleRole",
        "type",
    }  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(value=st.text(alphabet=",01234", max_size=60))
def test_quadtree_fast_path_agrees_with_parse_property(value: str) -> None:
    """The validator's one-regex check accepts exactly what quadtree.parse_property accepts."""
    try:
        tiles = quadtree.parse_property(value)
    except ValueError:
        expected = "IP_037"
    else:
        expected = None if any(len(tile) >= 18 for tile in tiles) else "IP_038"
    found = validate_application_properties({**COMMON, "quadTree": value}, {"quadTree": "string"})
    quadtree_problems = [problem.requirement for problem in found if problem.property == "quadTree"]
    assert quadtree_problems == ([] if expected is None else [expected])


@settings(max_examples=200, deadline=None)
@given(tiles=st.lists(st.text(alphabet="0123", min_size=1, max_size=22), min_size=1, max_size=8))
def test_quadtree_well_formed_lists(tiles: list[str]) -> None:
    value = quadtree.format_property(tiles)
    found = validate_application_properties({**COMMON, "quadTree": value})
    quadtree_problems = [problem.requirement for problem in found if problem.property == "quadTree"]
    assert quadtree_problems == ([] if any(len(tile) >= 18 for tile in tiles) else ["IP_038"])
