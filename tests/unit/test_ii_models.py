"""II and local actor API JSON bodies (ii_api.wire.models, ii_api.wire.errors)."""
from __future__ import annotations

import copy
import json
import re

import pytest
from pydantic import ValidationError

from ii_api.wire.errors import describe_validation_error, validation_error_body
from interchange.testing.paths import REPO_ROOT
from ii_api.wire.models import (
    CamApplication,
    CapabilitiesMessage,
    Capability,
    DeliveriesRequest,
    DeliveriesResponse,
    Delivery,
    DeliveryEndpoint,
    DeliveryStatus,
    DenmApplication,
    IvimApplication,
    LocalCapabilitiesRequest,
    LocalCapabilitiesResponse,
    LocalCapability,
    LocalSubscription,
    LocalSubscriptionsRequest,
    LocalSubscriptionsResponse,
    MessageType,
    Metadata,
    NetworkCapabilitiesResponse,
    OtherApplication,
    RedirectPolicy,
    SpatemApplication,
    SubscriptionListResponse,
    SubscriptionPollResponse,
    SubscriptionRequest,
    SubscriptionResponse,
    SubscriptionStatus,
    is_custom_property,
)

# ------------------------------------------------------------------ appendix C and D examples
# Transcribed from the spec, OCR damage fixed: "NO012345" -> "NO12345" (the publicationId
# prefix), tile "91230122" -> "01230122" (9 is no quadtree digit), "DENMOSL0O125" ->
# "DENMOSLO125", "a.citsinterchange.eu" -> "a.c-its-interchange.eu", "clientl" -> "client1".
APPENDIX_C = {
    "version": "2.0",
    "name": "a.c-its-interchange.eu",
    "capabilities": [
        {
            "application": {
                "messageType": "DENM",
                "publisherId": "SE12345",
                "publicationId": "SE12345:DENMSTCKHLM345",
                "originatingCountry": "SE",
                "protocolVersion": "DENM:1.2.2",
                "quadTree": ["01220111", "01200132"],
                "causeCode": [6, 4, 5],
            },
            "metadata": {
                "infoURL": "https://trafikverket.se/denm/",
                "shardCount": 2,
                "redirectPolicy": "OPTIONAL",
                "maxBandwidth": 350000,
                "maxMessageRate": 35,
                "repetitionInterval": 60000,
            },
        },
        {
            "application": {
                "messageType": "DENM",
                "publisherId": "NO12345",
                "publicationId": "NO12345:DENMOSLO125",
                "originatingCountry": "NO",
                "protocolVersion": "DENM:1.2.2",
                "quadTree": ["01230122", "01230123"],
                "causeCode": [3, 4, 5],
            },
            "metadata": {
                "infoURL": "https://vegvesen.no/denminf/",
                "redirectPolicy": "OPTIONAL",
                "maxBandwidth": 550000,
                "maxMessageRate": 55,
                "repetitionInterval": 45000,
            },
        },
    ],
}

SELECTOR_SE = "messageType='DENM' AND originatingCountry='SE'"
SELECTOR_NO = "messageType='DENM' AND originatingCountry='NO'"

APPENDIX_D_REQUEST = {
    "version": "1.2",
    "name": "a.c-its-interchange.eu",
    "subscriptions": [
        {"selector": SELECTOR_SE},
        {"selector": SELECTOR_NO, "consumerCommonName": "c-its-company-client1"},
    ],
}

APPENDIX_D_RESPONSE = {
    "version": "1.2",
    "name": "a.c-its-interchange.eu",
    "subscriptions": [
        {
            "id": "{id1}",
            "selector": SELECTOR_SE,
            "path": "/subscription/{id1}",
            "consumerCommonName": "a.c-its-interchange.eu",
            "status": "REQUESTED",
        },
        {
            "id": "{id2}",
            "selector": SELECTOR_NO,
            "path": "/subscription/{id2}",
            "consumerCommonName": "client1",
            "status": "REQUESTED",
        },
    ],
}

APPENDIX_D_STATUS = {
    "id": "{id2}",
    "selector": SELECTOR_NO,
    "path": "/subscription/{id2}",
    "consumerCommonName": "client1",
    "endpoints": [
        {"source": "OQPjabpeFgQSIPFrHJ3BM567nQwcD", "host": "b.c-its-interchange.eu", "port": 5671},
        {"source": "OQPjabpeFgQSIPFrHJI3dfghsfdgQwcD", "host": "b2.c-its-interchange.eu", "port": 5671},
    ],
    "status": "CREATED",
}


def _application(**overrides):
    body = {
        "messageType": "DENM",
        "publisherId": "SE12345",
        "publicationId": "SE12345:X",
        "originatingCountry": "SE",
        "protocolVersion": "DENM:1.2.2",
        "quadTree": ["1202"],
        "causeCode": [6],
    }
    body.update(overrides)
    return body


def _capabilities(application=None, metadata=None) -> dict:
    capability = {"application": application or _application()}
    if metadata is not None:
        capability["metadata"] = metadata
    return {"version": "2.0", "name": "a", "capabilities": [capability]}


def _error(model, body) -> tuple[str, str | None]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    return describe_validation_error(caught.value)


# ------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize(
    ("model", "body"),
    [
        (CapabilitiesMessage, APPENDIX_C),
        (SubscriptionRequest, APPENDIX_D_REQUEST),
        (SubscriptionResponse, APPENDIX_D_RESPONSE),
        (SubscriptionPollResponse, APPENDIX_D_STATUS),
    ],
    ids=["appendix-C", "appendix-D-request", "appendix-D-response", "appendix-D-status"],
)
def test_appendix_examples_round_trip(model, body):
    parsed = model.model_validate(body)
    assert parsed.to_json() == body
    assert model.model_validate_json(json.dumps(body)).to_json() == body


def test_appendix_c_parses_to_typed_objects():
    message = CapabilitiesMessage.model_validate(APPENDIX_C)
    first, second = message.capabilities
    assert isinstance(first.application, DenmApplication)
    assert first.application.causeCode == [6, 4, 5]
    assert first.application.quadTree == ["01220111", "01200132"]
    assert first.metadata.shardCount == 2
    assert first.metadata.redirectPolicy is RedirectPolicy.OPTIONAL
    assert second.metadata.shardCount is None
    assert second.metadata.infoURL == "https://vegvesen.no/denminf/"


def test_appendix_d_status_parses_endpoints():
    status = SubscriptionPollResponse.model_validate(APPENDIX_D_STATUS)
    assert status.status is SubscriptionStatus.CREATED
    assert [(e.host, e.port) for e in status.endpoints] == [
        ("b.c-its-interchange.eu", 5671),
        ("b2.c-its-interchange.eu", 5671),
    ]
    assert status.lastUpdatedTimestamp is None  # Table 15 mandatory, but absent in appendix D


def test_poll_response_emits_timestamp_and_empty_endpoints():
    status = SubscriptionPollResponse(
        id="1", selector="a = 1", path="/subscriptions/1", status=SubscriptionStatus.REQUESTED,
        lastUpdatedTimestamp=1_700_000_000_123,
    )
    assert status.to_json() == {
        "id": "1", "selector": "a = 1", "path": "/subscriptions/1", "status": "REQUESTED",
        "endpoints": [], "lastUpdatedTimestamp": 1_700_000_000_123,
    }


@pytest.mark.parametrize("kind", [m.value for m in MessageType])
def test_every_message_type_round_trips(kind):
    body = _application(messageType=kind)
    if kind != "DENM":
        del body["causeCode"]
    capability = Capability.model_validate({"application": body, "metadata": {}})
    assert capability.application.messageType == kind
    assert not isinstance(capability.application, OtherApplication)
    assert capability.to_json() == {"application": body, "metadata": {}}


def test_message_types_include_cpm_and_poim_pa():
    assert {m.value for m in MessageType} == {
        "DENM", "IVIM", "SPATEM", "MAPEM", "SREM", "SSEM", "CAM", "CPM", "POIM-PA",
    }


def test_denm_cause_code_null_is_kept():
    body = _application(causeCode=None)
    application = Capability.model_validate({"application": body}).application
    assert application.causeCode is None
    assert application.to_json()["causeCode"] is None  # Table 11: mandatory, null if unknown
    missing = _application()
    del missing["causeCode"]
    assert Capability.model_validate({"application": missing}).to_json()["application"]["causeCode"] is None


def test_type_specific_extension_fields():
    ivim = Capability.model_validate(
        {"application": _application(messageType="IVIM", causeCode=None, iviType=[0, 1], pictogramCategoryCode=[557])}
    ).application
    assert isinstance(ivim, IvimApplication)
    assert (ivim.iviType, ivim.pictogramCategoryCode) == ([0, 1], [557])
    assert "causeCode" not in ivim.to_json()  # not an IVIM property: dropped
    spatem = Capability.model_validate({"application": _application(messageType="SPATEM", ids=["5-57"])}).application
    assert isinstance(spatem, SpatemApplication) and spatem.ids == ["5-57"]
    cam = Capability.model_validate({"application": _application(messageType="CAM", stationTypes=[15])}).application
    assert isinstance(cam, CamApplication)
    assert cam.to_json()["stationType"] == [15]


def test_metadata_is_optional_and_defaults_to_empty():
    capability = Capability.model_validate({"application": _application()})
    assert capability.metadata == Metadata()
    assert capability.metadata.effective_redirect_policy is RedirectPolicy.OPTIONAL
    assert capability.to_json()["metadata"] == {}


# --------------------------------------------------------------------------- NordicWay variants
def test_nordicway_info_url_spelling_is_read_and_emitted_as_info_url():
    metadata = Metadata.model_validate({"infoUrl": "https://example.org/x", "shardCount": 1})
    assert metadata.infoURL == "https://example.org/x"
    assert metadata.to_json() == {"infoURL": "https://example.org/x", "shardCount": 1}


def test_subscription_version_2_0_is_accepted_and_answered_as_1_2():
    request = SubscriptionRequest.model_validate({**APPENDIX_D_REQUEST, "version": "2.0"})
    assert request.version == "1.2"
    assert request.to_json()["version"] == "1.2"
    response = SubscriptionResponse.model_validate({**APPENDIX_D_RESPONSE, "version": "2.0"})
    assert response.to_json() == APPENDIX_D_RESPONSE


def test_other_subscription_versions_are_refused():
    message, field = _error(SubscriptionRequest, {**APPENDIX_D_REQUEST, "version": "3.0"})
    assert field == "version"


def test_foreign_message_type_is_kept_as_other_application():
    body = copy.deepcopy(APPENDIX_C)
    datex = _application(messageType="DATEX_2", publicationType="SituationPublication")
    del datex["causeCode"]
    body["capabilities"].append({"application": datex, "metadata": {"infoUrl": "https://x"}})
    message = CapabilitiesMessage.model_validate(body)
    other = message.capabilities[-1].application
    assert isinstance(other, OtherApplication) and other.messageType == "DATEX_2"
    assert "publicationType" not in other.to_json()


def test_redirect_policy_values():
    assert {p.value for p in RedirectPolicy} == {"OPTIONAL", "MANDATORY", "NOT_AVAILABLE"}
    assert Metadata.model_validate({"redirectPolicy": "NOT_ALLOWED"}).redirectPolicy is RedirectPolicy.NOT_AVAILABLE
    _message, field = _error(Metadata, {"redirectPolicy": "SOMETIMES"})
    assert field == "redirectPolicy"


def test_nordicway_local_subscription_timestamp_spelling():
    subscription = LocalSubscription.model_validate(
        {"id": "1", "path": "/a/subscriptions/1", "selector": "", "status": "REQUESTED", "lastUpdatedTimeStamp": 5}
    )
    assert subscription.lastUpdatedTimestamp == 5
    assert subscription.to_json()["lastUpdatedTimestamp"] == 5


# ------------------------------------------------------------------ unknown and custom keys
def test_custom_properties_are_preserved_on_every_capability_object():
    body = copy.deepcopy(APPENDIX_C)
    body["custom-se-operator"] = "Trafikverket"
    body["capabilities"][0]["custom-se-priority"] = 3
    body["capabilities"][0]["application"]["custom-nw-roadNumbers"] = ["E4", "E6"]
    body["capabilities"][0]["metadata"]["custom-c-roads.fr-contract"] = {"id": 7, "until": None}
    message = CapabilitiesMessage.model_validate(body)
    assert message.to_json() == body
    assert message.capabilities[0].application.custom_properties == {"custom-nw-roadNumbers": ["E4", "E6"]}


def test_unknown_properties_are_dropped():
    body = copy.deepcopy(APPENDIX_C)
    body["future"] = 1
    body["capabilities"][0]["id"] = "abc"  # Table 10 has no id
    body["capabilities"][0]["application"]["serviceType"] = ",HLN-RLX,"
    body["capabilities"][0]["metadata"]["custom"] = 1
    body["capabilities"][0]["metadata"]["custom-nonamespace"] = 1
    body["capabilities"][0]["metadata"]["Custom-nw-x"] = 1
    assert CapabilitiesMessage.model_validate(body).to_json() == APPENDIX_C
    request = SubscriptionRequest.model_validate(
        {**APPENDIX_D_REQUEST, "extra": True, "subscriptions": [{"selector": "a = 1", "priority": 1}]}
    )
    assert request.to_json() == {
        "version": "1.2", "name": APPENDIX_D_REQUEST["name"], "subscriptions": [{"selector": "a = 1"}],
    }


@pytest.mark.parametrize(
    ("key", "custom"),
    [
        ("custom-nw-foo", True),
        ("custom-c-roads_se-x-y", True),
        ("custom-nw-", False),
        ("custom--foo", False),
        ("custom-nw", False),
        ("xcustom-nw-foo", False),
        ("CUSTOM-nw-foo", False),
        (5, False),
    ],
)
def test_is_custom_property(key, custom):
    assert is_custom_property(key) is custom


# ------------------------------------------------------------------------- wrong types / errors
@pytest.mark.parametrize(
    ("model", "body", "field"),
    [
        (SubscriptionRequest, {"version": "1.2", "name": "a", "subscriptions": [{}]}, "subscriptions.0.selector"),
        (SubscriptionRequest, {"version": "1.2", "name": "a", "subscriptions": [{"selector": 5}]},
         "subscriptions.0.selector"),
        (SubscriptionRequest, {"version": "1.2", "name": "a", "subscriptions": []}, "subscriptions"),
        (SubscriptionRequest, {"version": "1.2", "subscriptions": [{"selector": ""}]}, "name"),
        (CapabilitiesMessage, {"version": "2.0", "name": "a"}, "capabilities"),
        (CapabilitiesMessage, _capabilities(_application(causeCode=["6"])),
         "capabilities.0.application.causeCode.0"),
        (CapabilitiesMessage, _capabilities(_application(causeCode=[True])),
         "capabilities.0.application.causeCode.0"),
        (CapabilitiesMessage, _capabilities(_application(quadTree=["0124"])),
         "capabilities.0.application.quadTree.0"),
        (CapabilitiesMessage, _capabilities(_application(quadTree="1202")),
         "capabilities.0.application.quadTree"),
        (CapabilitiesMessage, _capabilities(_application(publisherId=None)),
         "capabilities.0.application.publisherId"),
        (CapabilitiesMessage, _capabilities(metadata={"shardCount": 0}),
         "capabilities.0.metadata.shardCount"),
        (CapabilitiesMessage, _capabilities(metadata={"maxBandwidth": 1.5}),
         "capabilities.0.metadata.maxBandwidth"),
        (SubscriptionPollResponse, {**APPENDIX_D_STATUS, "status": "DONE"}, "status"),
        (SubscriptionPollResponse, {**APPENDIX_D_STATUS, "endpoints": [{"host": "h", "port": 70000, "source": "s"}]},
         "endpoints.0.port"),
        (SubscriptionPollResponse, {**APPENDIX_D_STATUS, "endpoints": [{"host": "h", "port": 5671}]}, "endpoints"),
        (SubscriptionPollResponse, {**APPENDIX_D_STATUS, "lastUpdatedTimestamp": "yesterday"}, "lastUpdatedTimestamp"),
        (DeliveriesRequest, {"deliveries": [{"selector": None}]}, "deliveries.0.selector"),
    ],
)
def test_wrong_types_name_the_field(model, body, field):
    message, reported = _error(model, body)
    assert reported == field
    assert message.startswith(f"{field}: ")


@pytest.mark.parametrize(("change", "field", "reason"), [
    ({"publisherId": "XX99999"}, "publisherId", "0-16383"),
    ({"publisherId": "se12345"}, "publisherId", "2 uppercase letters"),
    ({"publisherId": "SE"}, "publisherId", "2 uppercase letters"),
    ({"originatingCountry": "Sweden"}, "originatingCountry", "ISO 3166-1 alpha-2"),
    ({"originatingCountry": "se"}, "originatingCountry", "ISO 3166-1 alpha-2"),
    ({"publicationId": "DENMSTCKHLM345"}, "publicationId", "'<publisherId>:<id>'"),
    ({"publicationId": "NO12345:DENMSTCKHLM345"}, "publicationId", "must start with the publisherId 'SE12345'"),
    ({"publicationId": "SE12345:"}, "publicationId", "'<publisherId>:<id>'"),
    ({"causeCode": [6, 256]}, "causeCode.1", "0 to 255"),
    ({"causeCode": [-2]}, "causeCode.0", "0 to 255"),
])
def test_capability_values_follow_the_message_rules(change, field, reason):
    """A capability is refused (NOT_VALID/400, naming the field) for values its messages
    would be rejected for (tables 1-7, 11)."""
    message, reported = _error(CapabilitiesMessage, _capabilities(_application(**change)))
    assert reported == f"capabilities.0.application.{field}"
    assert reason in message


def test_cam_station_types_follow_the_message_rules():
    body = _capabilities(_application(messageType="CAM", causeCode=None, stationTypes=[5, 300]))
    message, reported = _error(CapabilitiesMessage, body)
    assert reported == "capabilities.0.application.stationTypes.1" and "0 to 255" in message  # the name sent


def test_missing_message_type_is_reported_on_the_application():
    application = _application()
    del application["messageType"]
    _message, field = _error(CapabilitiesMessage, _capabilities(application))
    assert field == "capabilities.0.application.messageType"


def test_error_body_shape():
    with pytest.raises(ValidationError) as caught:
        SubscriptionRequest.model_validate({"version": "1.2", "name": "a", "subscriptions": [{}]})
    assert validation_error_body(caught.value) == {
        "error": "subscriptions.0.selector: Field required",
        "field": "subscriptions.0.selector",
    }


def test_error_body_counts_further_errors():
    with pytest.raises(ValidationError) as caught:
        SubscriptionRequest.model_validate({"subscriptions": [{}, {}]})
    body = validation_error_body(caught.value)
    assert body["field"] == "name"
    assert body["error"].endswith("(+2 more)")


@pytest.mark.parametrize("raw", ['{"version": ', "[1, 2]", "null", "\"text\""])
def test_malformed_json_and_non_objects_have_no_field(raw):
    with pytest.raises(ValidationError) as caught:
        SubscriptionRequest.model_validate_json(raw)
    body = validation_error_body(caught.value)
    assert set(body) == {"error"}
    assert body["error"]


# ----------------------------------------------------------------------------------- statuses
SEVEN = ["REQUESTED", "CREATED", "ILLEGAL", "NOT_VALID", "NO_OVERLAP", "RESUBSCRIBE", "ERROR"]


def test_subscription_statuses_are_exactly_the_seven_of_table_14():
    assert [s.value for s in SubscriptionStatus] == SEVEN


def test_delivery_statuses():
    assert [s.value for s in DeliveryStatus] == ["REQUESTED", "CREATED", "ILLEGAL", "NOT_VALID", "NO_OVERLAP", "ERROR"]


#: Tables 14 and 15's status property, quoted from the profile (tests/data/spec/).
_SPEC = (REPO_ROOT / "tests") / "data" / "spec" / "subscription_statuses.txt"


def test_statuses_agree_with_the_spec_text():
    text = _SPEC.read_text(encoding="utf-8")
    tables = (r"Table 14:+ Interchange Subscription Response(.*?)Table 15:", r"Table 15:(.*)")
    for table in tables:
        found = re.search(table, text, re.DOTALL)
        assert found is not None
        quoted = re.findall(r"[\u201c\"]([A-Z_]+)[\u201d\"]", found.group(1))
        assert list(dict.fromkeys(quoted)) == SEVEN  # ERROR is quoted again under errorMessage


@pytest.mark.parametrize("status", SEVEN)
def test_every_status_round_trips(status):
    body = {**APPENDIX_D_STATUS, "status": status, "lastUpdatedTimestamp": 1}
    if status == "ERROR":
        body["errorMessage"] = "endpoint b answered ILLEGAL"
    assert SubscriptionPollResponse.model_validate(body).to_json() == body


def test_incomplete_endpoints_are_fine_before_created():
    body = {**APPENDIX_D_STATUS, "status": "REQUESTED", "endpoints": [{"host": "b.c-its-interchange.eu"}]}
    assert SubscriptionPollResponse.model_validate(body).to_json() == body


def test_list_response_is_the_table_14_shape_and_may_be_empty():
    assert SubscriptionListResponse is SubscriptionResponse
    empty = {"version": "1.2", "name": "b.c-its-interchange.eu", "subscriptions": []}
    assert SubscriptionListResponse.model_validate(empty).to_json() == empty
    listed = copy.deepcopy(APPENDIX_D_RESPONSE)
    listed["subscriptions"][1].update(
        status="CREATED", lastUpdatedTimestamp=42,
        endpoints=[{"host": "b", "port": 5671, "source": "q", "maxBandwidth": 10, "maxMessageRate": 2}],
    )
    assert SubscriptionListResponse.model_validate(listed).to_json() == listed


# ------------------------------------------------------------------------------ local actor API
def test_local_capabilities_request_accepts_object_or_bare_list():
    capability = APPENDIX_C["capabilities"][0]
    wrapped = LocalCapabilitiesRequest.model_validate(
        {"name": "actor-1", "version": "1.0", "capabilities": [capability]}
    )
    bare = LocalCapabilitiesRequest.model_validate([capability])
    assert wrapped.capabilities == bare.capabilities
    assert bare.name is None
    assert bare.capabilities[0].to_json() == capability


def test_local_capabilities_request_refuses_foreign_message_types():
    application = _application(messageType="DATEX_2")
    _message, field = _error(LocalCapabilitiesRequest, [{"application": application}])
    assert field == "capabilities"
    _message, field = _error(LocalCapabilitiesRequest, {"capabilities": []})
    assert field == "capabilities"


def test_local_capabilities_response_round_trip():
    body = {
        "name": "actor-1",
        "version": "1.0",
        "capabilities": [{"id": "c1", "path": "/actor-1/capabilities/c1", "definition": APPENDIX_C["capabilities"][1]}],
    }
    response = LocalCapabilitiesResponse.model_validate(body)
    assert isinstance(response.capabilities[0], LocalCapability)
    assert response.to_json() == body


def test_deliveries_round_trip():
    request = DeliveriesRequest.model_validate({"name": "actor-1", "deliveries": [{"selector": SELECTOR_SE}]})
    assert request.to_json() == {"name": "actor-1", "version": "1.0", "deliveries": [{"selector": SELECTOR_SE}]}
    body = {
        "name": "actor-1",
        "version": "1.0",
        "deliveries": [
            {"id": "d1", "path": "/actor-1/deliveries/d1", "selector": SELECTOR_SE, "status": "CREATED",
             "endpoints": [{"host": "a.c-its-interchange.eu", "port": 5671, "target": "delivery-d1"}],
             "lastUpdatedTimestamp": 1700000000000},
            {"id": "d2", "path": "/actor-1/deliveries/d2", "selector": "x = ", "status": "NOT_VALID",
             "endpoints": [], "lastUpdatedTimestamp": 1700000000001, "errorMessage": "unexpected end"},
        ],
    }
    response = DeliveriesResponse.model_validate(body)
    expected = DeliveryEndpoint(host="a.c-its-interchange.eu", port=5671, target="delivery-d1")
    assert response.deliveries[0].endpoints[0] == expected
    assert response.to_json() == body
    assert Delivery.model_validate(body["deliveries"][1]).status is DeliveryStatus.NOT_VALID
    _message, field = _error(Delivery, {**body["deliveries"][0], "status": "RESUBSCRIBE"})
    assert field == "status"


def test_local_subscriptions_round_trip():
    request = LocalSubscriptionsRequest.model_validate(
        {"subscriptions": [{"selector": SELECTOR_NO, "consumerCommonName": "actor-1"}]}
    )
    assert request.subscriptions[0].consumerCommonName == "actor-1"
    body = {
        "name": "actor-1",
        "version": "1.0",
        "subscriptions": [
            {"id": "s1", "path": "/actor-1/subscriptions/s1", "selector": SELECTOR_NO, "status": "CREATED",
             "endpoints": [{"host": "a.c-its-interchange.eu", "port": 5671, "source": "sub-s1"}],
             "lastUpdatedTimestamp": 7},
        ],
    }
    assert LocalSubscriptionsResponse.model_validate(body).to_json() == body
    incomplete = {**body["subscriptions"][0], "endpoints": [{"host": "h", "port": 1}]}
    _message, field = _error(LocalSubscriptionsResponse, {**body, "subscriptions": [incomplete]})
    assert field == "subscriptions.0.endpoints.0.source"


def test_network_capabilities_response_round_trip():
    body = {"name": "actor-1", "selector": SELECTOR_SE, "version": "1.0", "capabilities": APPENDIX_C["capabilities"]}
    assert NetworkCapabilitiesResponse.model_validate(body).to_json() == body


def test_capabilities_message_bytes_are_its_json():
    """The message is joined from each capability's cached text; the same JSON as to_json()."""
    capability = {"application": {"messageType": "DENM", "publisherId": "NO00001", "publicationId": "NO00001:d",
                                  "originatingCountry": "NO", "protocolVersion": "DENM:1.3.1", "quadTree": ["12"],
                                  "causeCode": None, "custom-nw-lane": 2}, "metadata": {"infoURL": "https://x.no"}}
    for body in ({"name": "a.x", "capabilities": []},
                 {"name": "a.x", "capabilities": [capability, {**capability, "custom-nw-op": "NPRA"}],
                  "custom-croadsix-multihop": {"hopLimit": 3}}):
        message = CapabilitiesMessage.model_validate(body)
        assert json.loads(message.json_bytes()) == message.to_json()
