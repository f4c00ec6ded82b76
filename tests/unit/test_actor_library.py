"""The actors' library without a network: properties, capabilities, selectors, settings, areas and the
command line's offline parts. The rules are the node's: each check here is compared with the node's
own reader of the profile (the broker's validation, the II's models, its selector parser, its matching)
on the same input, so a copy that drifted would fail."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import jms_selectors
import quadtree
from ii_api.decisions.subscriptions import compile_selector
from ii_api.selectors.matching import CapabilityMatcher
from ii_api.wire.errors import describe_validation_error
from ii_api.wire.models import Capability, LocalCapabilitiesRequest
from interchange.actor import (
    ActorError,
    Circle,
    OutgoingMessage,
    Polygon,
    Tiles,
    build_capability,
    check_properties,
    check_selector,
    load_settings,
    message_properties,
    message_ttl_ms,
    overlap,
)
from interchange.actor.properties import check_repetition
from interchange.app.cli import main
from interchange.broker.amqp_scan import scan_message
from interchange.broker.ttl_policy import default_ttl_ms
from interchange.broker.validation import validate_application_properties
from interchange.ground.profile import MESSAGE_TYPES, TTL, MessageType
from interchange.testing.selector_cases import REFUSED_BY_THE_JAVA_ENGINES, SELECTORS
from interop_kit.demo_data import demo_capabilities

HAZELDONK = (51.4449, 4.9238)


def denm(**changes: Any) -> dict[str, Any]:
    args: dict[str, Any] = dict(message_type="DENM", publisher_id="NL00001", publication_id="denm-1",
                                protocol_version="DENM:1.3.1", position=HAZELDONK, cause_code=1, sub_cause_code=0)
    args.update(changes)
    return message_properties(**args)


# ------------------------------------------------------------------------------------ properties
def test_properties_from_typed_arguments() -> None:
    props = denm(area=Circle(*HAZELDONK, 1000))
    reference = quadtree.from_latlon(*HAZELDONK, 18)  # IP_038
    area = quadtree.cover_circle(*HAZELDONK, 1000, 13)  # IP_112: DENM areas at zoom 13
    assert quadtree.parse_property(props["quadTree"]) == [reference, *area]
    assert props["publicationId"] == "NL00001:denm-1" and props["originatingCountry"] == "NL"
    assert (props["latitude"], props["longitude"]) == HAZELDONK
    assert check_properties(props) == []
    mapem = message_properties(message_type="MAPEM", publisher_id="NO00002", publication_id="NO00002:m",
                               protocol_version="MAPEM:1", area=Circle(*HAZELDONK, 500))
    assert all(len(t) == 14 for t in quadtree.parse_property(mapem["quadTree"]))  # IP_113


@pytest.mark.parametrize("changes", [
    {"publisher_id": "NL99999"}, {"originating_country": "nl"}, {"cause_code": 300}, {"sub_cause_code": None},
    {"message_type": "DENMS"}, {"protocol_version": None}, {"extra": {"shardId": 0}},
    {"extra": {"nonsense": 1}}, {"extra": {"iviType": ",1,,2,"}}, {"cause_code": -1},
    {"position": None, "quad_tree": ["1202021"]},
])
def test_the_local_check_is_the_brokers(changes: dict[str, Any]) -> None:
    """Whatever is wrong, the library says what the broker's validation says, word for word."""
    props = denm(**changes)
    expected = validate_application_properties(props)
    assert expected, "each case breaks a rule"
    assert check_properties(props) == expected
    with pytest.raises(ActorError) as info:
        OutgoingMessage.build(props, b"x")
    assert all(str(problem) in str(info.value) for problem in expected)
    unchecked = OutgoingMessage.build(props, b"x", check=False)  # a probe may send it, to see it refused
    assert list(unchecked.problems) == expected


@pytest.mark.parametrize("message_type", [t.value for t in MessageType])
def test_ttl_is_ip_033(message_type: str) -> None:
    """The broker's default TTL per type; repeated by the actor, its own interval x 1.2, at least 1 s."""
    assert message_ttl_ms(message_type) == default_ttl_ms(message_type)
    interval = MESSAGE_TYPES[MessageType(message_type)].repetition.interval_ms
    assert message_ttl_ms(message_type) == max(1000, round(interval * 1.2))
    assert message_ttl_ms(message_type, 60_000) == TTL.ttl_ms(60_000) == 72_000
    assert message_ttl_ms(message_type, 500) == 1000


def test_repetition_within_the_profile() -> None:
    check_repetition("DENM", 540_000)
    with pytest.raises(ActorError, match="IP_048"):
        check_repetition("DENM", 541_000)
    with pytest.raises(ActorError, match="IP_124"):
        check_repetition("CAM", 500)
    check_repetition("CPM", 5_000)  # IP_136 is a "should"
    with pytest.raises(ActorError, match="IP_048"):
        OutgoingMessage.build(denm(), b"x", repeat_every_ms=600_000)


def test_encoded_message_reads_back_as_the_broker_reads_it() -> None:
    props = denm(extra={"custom-nl-lane": "2"})
    message = OutgoingMessage.build(props, b"\x01\x02body", repeat_every_ms=60_000)
    scanned = scan_message(message.encode())
    assert scanned.application_properties == props
    assert scanned.application_property_types["causeCode"] == "long"
    assert scanned.ttl_ms == 72_000 and scanned.durable is True
    assert OutgoingMessage.build(props, b"", durable=False).encode() != message.encode()
    assert scan_message(OutgoingMessage.build(props, b"", durable=False).encode()).durable is False


# ---------------------------------------------------------------------------------- capabilities
def test_capability_from_an_area() -> None:
    cap = build_capability(message_type="DENM", publisher_id="NL00001", publication_id="d1",
                           protocol_version="DENM:1.3.1", area=Circle(*HAZELDONK, 2000), cause_codes=[1, 94])
    assert cap.application.quadTree == quadtree.cover_circle(*HAZELDONK, 2000, 13)
    assert cap.application.publicationId == "NL00001:d1" and cap.application.originatingCountry == "NL"
    polygon = build_capability(message_type="IVIM", publisher_id="NL00001", publication_id="i", protocol_version="1",
                               area=Polygon(((51.4, 4.9), (51.5, 4.9), (51.5, 5.0))), zoom=12)
    assert polygon.application.quadTree == quadtree.cover_polygon([(51.4, 4.9), (51.5, 4.9), (51.5, 5.0)], 12)
    tiles = build_capability(message_type="SPATEM", publisher_id="NL00001", publication_id="s", protocol_version="1",
                             area=Tiles(("12020213012113",)))
    assert tiles.application.quadTree == ["12020213012113"]


@pytest.mark.parametrize("application", [
    {"publisherId": "NL20000"}, {"originatingCountry": "Netherlands"}, {"causeCode": [256]},
    {"publicationId": "NO00001:x"},
])
def test_a_capability_is_refused_with_the_nodes_words(application: dict[str, Any]) -> None:
    document = {"application": {**demo_capabilities()[0]["application"], **application}}
    with pytest.raises(ValidationError) as node:
        LocalCapabilitiesRequest.model_validate({"capabilities": [document]})  # what the node answers 400 with
    node_message, _ = describe_validation_error(node.value)
    with pytest.raises(ActorError) as ours:
        build_capability(message_type="DENM", publisher_id="NL00001", publication_id="denm-demo",
                         protocol_version="DENM:1.3.1", area=Tiles(("1202021",)), application=application)
    assert node_message.replace("capabilities.0.", "") in str(ours.value)


def test_an_area_that_is_not_one() -> None:
    with pytest.raises(ActorError, match="latitude"):
        build_capability(message_type="DENM", publisher_id="NL00001", publication_id="d", protocol_version="1",
                         area=Circle(91.0, 4.0, 10))
    with pytest.raises(ActorError, match="only the digits 0-3"):
        message_properties(message_type="DENM", publisher_id="NL00001", area=Tiles(("1204",)))
    with pytest.raises(ActorError, match="unknown message type"):
        message_properties(message_type="TIM", publisher_id="NL00001", area=Tiles(("1202",)))


# ------------------------------------------------------------------------------------- selectors
@pytest.mark.parametrize("text", REFUSED_BY_THE_JAVA_ENGINES)
def test_a_refused_selector_gets_the_nodes_not_valid_message(text: str) -> None:
    _, node_says = compile_selector(text)  # the II's NOT_VALID errorMessage
    problem = check_selector(text)
    assert problem is not None and node_says is not None
    assert problem.message == node_says
    caret_line = problem.pointer().splitlines()[-1]
    assert caret_line.index("^") == problem.position - (text.rfind("\n", 0, problem.position) + 1)


@pytest.mark.parametrize("selector", SELECTORS)
def test_overlap_is_the_iis_matching(selector: str) -> None:
    capabilities = [Capability.model_validate(c) for c in demo_capabilities()]
    result = overlap(selector, capabilities)
    for verdict, capability in zip(result.verdicts, capabilities):
        app = capability.application
        assert verdict.matches == CapabilityMatcher(selector).matches(app, capability.metadata), verdict.describe()
        assert verdict.matches == (not verdict.reasons)
    assert result.any == any(v.matches for v in result.verdicts)
    assert ("NO_OVERLAP" in result.summary()) == (not result.any)


def test_overlap_says_why_nothing_matches() -> None:
    capabilities = [Capability.model_validate(c) for c in demo_capabilities()]
    result = overlap("messageType = 'DENM' AND causeCode = 2 AND quadTree LIKE '%,1202%'", capabilities)
    denm_verdict, ivim_verdict = result.verdicts
    assert denm_verdict.reasons == ("causeCode = 2 is false for all its messages (it has causeCode [1, 94])",)
    # an IVIM capability says nothing of causeCode: that part could be true, the messageType cannot
    assert ivim_verdict.reasons == ("messageType = 'DENM' is false for all its messages (it has messageType 'IVIM')",)
    whole = overlap("messageType = 'CAM' OR publisherId = 'SE00001'", capabilities)
    assert not whole.any and all("messageType = 'CAM' OR publisherId = 'SE00001'" in v.reasons[0]
                                 for v in whole.verdicts)


# -------------------------------------------------------------------------------------- settings
def test_settings_from_toml_and_json(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('node = "a.interchange.test"\nii_url = "https://127.0.0.1:8443/"\n'
                                     'cert_chain = "id/chain.pem"\nkey = "/abs/key.pem"\ntrust_bundle = "trust.pem"\n')
    settings = load_settings(tmp_path / "a.toml")
    assert settings.ii_url == "https://127.0.0.1:8443" and settings.cert_chain == tmp_path / "id" / "chain.pem"
    assert settings.key == Path("/abs/key.pem")
    assert load_settings(tmp_path / "a.toml", node="b.interchange.test").node == "b.interchange.test"
    (tmp_path / "b.json").write_text(json.dumps({**json.loads(settings.model_dump_json()), "ii_url": None,
                                                 "discovery": {"domain": "interchange.test", "dns_port": 5353}}))
    assert load_settings(tmp_path / "b.json").discovery is not None
    assert load_settings(tmp_path / "a.toml").to_toml() == load_settings(tmp_path / "a.toml").model_copy().to_toml()
    written = tmp_path / "c.toml"
    written.write_text(settings.to_toml())
    assert load_settings(written) == settings


@pytest.mark.parametrize("text, expected", [
    (None, "cannot read the settings"),
    ("node = ", "not valid TOML"),
    ('node = "a"\ncert_chain = "c"\nkey = "k"\ntrust_bundle = "t"\n', "give either ii_url or [discovery]"),
    ('node = "a"\nii_url = "http://x:1"\ncert_chain = "c"\nkey = "k"\ntrust_bundle = "t"\n', "ii_url"),
    ('node = "a"\nii_url = "https://x:1"\n', "cert_chain"),
    ('node = "a"\nii_url = "https://x:1"\ncert_chain = "c"\nkey = "k"\ntrust_bundle = "t"\nbogus = 1\n', "bogus"),
])
def test_bad_settings_are_one_line(tmp_path: Path, text: str | None, expected: str) -> None:
    path = tmp_path / "actor.toml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ActorError) as info:
        load_settings(path)
    assert expected in str(info.value) and "\n" not in str(info.value)


# ----------------------------------------------------------------------------- the command line
def test_check_selector_needs_no_network(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["actor", "check-selector", "causeCode IN (1, 2)", "--against", "none"]) == 1
    out = capsys.readouterr().out
    assert compile_selector("causeCode IN (1, 2)")[1] in out and "              ^" in out and "NOT_VALID" in out
    (tmp_path / "caps.json").write_text(json.dumps(demo_capabilities()))
    assert main(["actor", "check-selector", "messageType = 'CAM'", "--capabilities", str(tmp_path / "caps.json")]) == 1
    out = capsys.readouterr().out
    assert "matches none of 2 capabilities" in out and "it has messageType 'DENM'" in out
    assert main(["actor", "check-selector", "messageType = 'IVIM'", "--capabilities", str(tmp_path / "caps.json")]) == 0
    assert "matches 1 of 2 capabilities: NL00001:ivim-demo" in capsys.readouterr().out


def test_publish_dry_run_prints_the_checked_message(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "props.json").write_text(json.dumps({"messageType": "DENM", "publisherId": "NL00001",
                                                     "protocolVersion": "DENM:1.3.1", "causeCode": 1,
                                                     "subCauseCode": 0}))
    assert main(["actor", "publish", "--properties", str(tmp_path / "props.json"), "--position", "51.4449,4.9238",
                 "--publication-id", "d1", "--property", "custom-nl-lane=2", "--body", "x", "--dry-run"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["properties"]["quadTree"] == f",{quadtree.from_latlon(*HAZELDONK, 18)},"
    assert printed["properties"]["custom-nl-lane"] == 2 and printed["ttl_ms"] == 648_000 and printed["durable"]


@pytest.mark.parametrize("argv, expected", [
    (["publish", "--type", "DENM", "--publisher-id", "NL99999", "--body", "x", "--dry-run"], "publisherId: must be"),
    (["publish", "--type", "DENM", "--publisher-id", "NL00001", "--dry-run"], "no body"),
    (["publish", "--type", "DENM", "--publisher-id", "NL00001", "--position", "x", "--body", "b", "--dry-run"],
     "write LAT,LON"),
    (["publish", "--type", "DENM", "--publisher-id", "NL00001", "--property", "x", "--body", "b", "--dry-run"],
     "write NAME=VALUE"),
    (["publish", "--type", "CAM", "--publisher-id", "NL00001", "--protocol-version", "CAM:2", "--position", "51.4,4.9",
      "--property", "stationType=5", "--repeat", "0.2", "--body", "b", "--dry-run"], "IP_124"),
    (["whoami", "--config", "/nonexistent/actor.toml"], "cannot read the settings"),
    (["capabilities", "add", "--type", "DENM", "--publisher-id", "NL00001", "--publication-id", "x",
      "--protocol-version", "1"], "no area"),
    (["capabilities", "add", "--type", "DENM", "--publisher-id", "NL00001", "--publication-id", "x",
      "--protocol-version", "1", "--tiles", "12", "--point", "51,4"], "--point and --tiles both describe the area"),
    (["capabilities", "add", "--type", "DENM", "--publisher-id", "NL00001", "--publication-id", "x",
      "--protocol-version", "1", "--tiles", "12", "--config", "/nonexistent.toml"], "cannot read the settings"),
])
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    assert main(["actor", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and "\n" not in err and "Traceback" not in err, err


def test_a_progress_line_on_long_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from interchange.actor import output
    now = [100.0]
    monkeypatch.setattr(output.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    progress = output.Progress(10.0, out)
    progress.tick(5)
    assert out.getvalue() == ""  # a short run says nothing
    now[0] = 112.0
    progress.tick(60)
    assert out.getvalue() == "... 60 messages in 12 s (5.0/s)\n"
    now[0] = 115.0
    progress.tick(61)
    assert out.getvalue().count("\n") == 1  # at most one line every 10 s


def test_messages_the_selector_engine_would_deliver_pick_the_delivery() -> None:
    """``delivery_for`` chooses by the delivery's selector, evaluated as the broker evaluates it."""
    assert jms_selectors.compile("publisherId = 'NL00001'").matches(denm())
