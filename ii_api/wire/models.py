"""Pydantic v2 models of every JSON body of the Improved Interface (II) and the local actor API.

Attribute names are the JSON property names; :meth:`WireModel.to_json` omits optional ``None``
values (DENM ``causeCode`` excepted, Table 11). Unknown properties are ignored on input
(IP_092/IP_095), except ``custom-<namespace>-<name>`` on capability objects, kept and emitted
again (IP_132). Numbers are JSON integers only, strings JSON strings only. Capabilities
(Tables 9-12, IP_105), subscriptions (Tables 13-15, IP_106-108/110) and the local actor API's
capabilities, deliveries and subscriptions (IP_068); a foreign message type parses as
:class:`OtherApplication` so one capability does not fail a neighbour's exchange (IP_092).
Every body, field by field: docs/ii-wire-format.md.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, ClassVar, Final, Literal, Union

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Strict,
    Tag,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from ii_api.selectors.matching import Domain, Shape, capability_domains
from interchange.broker.validation import check_property_value, check_publication_id
from interchange.ground.profile import CUSTOM_NAMES, MessageType, Pattern, Range, property_named
from interchange.ground.profile import PublisherId as PublisherIdRule
from quadtree.tiles import MAX_ZOOM, check_tile

__all__ = [
    "APPLICATION_TAGS", "LOCAL_API_VERSION", "MESSAGE_TYPES", "AnyApplication", "Application",
    "CamApplication", "CapabilitiesMessage", "CapabilitiesRequest", "CapabilitiesResponse",
    "Capability", "CpmApplication", "DeliveriesRequest", "DeliveriesResponse", "Delivery",
    "DeliveryEndpoint", "DeliveryRequestItem", "DeliveryStatus", "DenmApplication", "Endpoint",
    "Extensible", "IvimApplication", "LocalCapabilitiesRequest", "LocalCapabilitiesResponse",
    "LocalCapability", "LocalEndpoint", "LocalSubscription", "LocalSubscriptionsRequest",
    "LocalSubscriptionsResponse", "MapemApplication", "MessageType", "Metadata",
    "NetworkCapabilitiesResponse", "OtherApplication", "PoimPaApplication", "RedirectPolicy",
    "SpatemApplication", "SremApplication", "SsemApplication", "Subscription",
    "SubscriptionListResponse", "SubscriptionPollResponse", "SubscriptionRequest",
    "SubscriptionRequestItem", "SubscriptionResponse", "SubscriptionStatus", "WireModel",
    "is_custom_property",
]

CAPABILITIES_VERSION = "2.0"  # Table 9
SUBSCRIPTIONS_VERSION: Final = "1.2"  # Tables 13/14 (Final: the Literal["1.2"] of SubscriptionVersion)
LOCAL_API_VERSION = "1.0"  # NordicWay onboard API

_CUSTOM = re.compile(CUSTOM_NAMES.regex, re.DOTALL)


def is_custom_property(key: object) -> bool:
    """IP_131/IP_132: ``custom-<unique_namespace_id>-<property_name>``."""
    return isinstance(key, str) and _CUSTOM.fullmatch(key) is not None


# ------------------------------------------------------------------------------ value types
def _check_quadtree_tile(value: str) -> str:
    if not value:
        raise ValueError("a quadTree tile must not be empty")
    return check_tile(value)


Int = Annotated[int, Strict()]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
PositiveInt = Annotated[int, Strict(), Field(ge=1)]
Port = Annotated[int, Strict(), Field(ge=1, le=65535)]
Timestamp = Annotated[int, Strict(), Field(ge=0)]  # Unix time in milliseconds (Table 15)
Text = Annotated[str, Strict()]
Name = Annotated[str, Strict(), Field(min_length=1)]
#: IP_037: digits 0-3; the pattern is stated in the OpenAPI document, the check is check_tile's
Tile = Annotated[str, Strict(), AfterValidator(_check_quadtree_tile),
                 Field(json_schema_extra={"pattern": f"^[0-3]{{1,{MAX_ZOOM}}}$"})]


def _message_rule(name: str) -> AfterValidator:
    """A capability value obeys the rule a message's property of that name does (tables 1-7)."""
    def check(value: Any) -> Any:
        problem = check_property_value(name, value)
        if problem is not None:
            raise ValueError(problem)
        return value
    return AfterValidator(check)


def _message_schema(name: str) -> Any:
    """The message rule of ``name`` in the OpenAPI document, as far as JSON Schema can state it (a
    publisherId's number is 0-16383: the pattern is wider, the check exact)."""
    prop = property_named(name)
    rule = prop.rule if prop is not None else None
    match rule:
        case PublisherIdRule():
            schema: dict[str, Any] = {"pattern": f"^{rule.regex}$"}
        case Pattern(regex=regex):
            schema = {"pattern": f"^{regex}$"}
        case Range(low=low, high=high, also=also):
            schema = {"minimum": low if also is None else min(low, also), "maximum": high}
        case _:
            schema = {}
    return Field(json_schema_extra=schema)


# The message rules of the capability values (IP_022, IP_026, IP_122), from the profile.
PublisherId = Annotated[str, Strict(), _message_rule("publisherId"), _message_schema("publisherId")]
CountryCode = Annotated[str, Strict(), _message_rule("originatingCountry"), _message_schema("originatingCountry")]
CauseCode = Annotated[int, Strict(), _message_rule("causeCode"), _message_schema("causeCode")]
StationType = Annotated[int, Strict(), _message_rule("stationType"), _message_schema("stationType")]


MESSAGE_TYPES: frozenset[str] = frozenset(m.value for m in MessageType)


class RedirectPolicy(StrEnum):
    """Table 12 ``redirectPolicy``; an omitted policy means OPTIONAL."""

    OPTIONAL = "OPTIONAL"
    MANDATORY = "MANDATORY"
    NOT_AVAILABLE = "NOT_AVAILABLE"


class SubscriptionStatus(StrEnum):
    """Tables 14 and 15: the seven subscription statuses."""

    REQUESTED = "REQUESTED"
    CREATED = "CREATED"
    ILLEGAL = "ILLEGAL"
    NOT_VALID = "NOT_VALID"
    NO_OVERLAP = "NO_OVERLAP"
    RESUBSCRIBE = "RESUBSCRIBE"
    ERROR = "ERROR"


class DeliveryStatus(StrEnum):
    """Local actor API delivery statuses (NordicWay onboard API)."""

    REQUESTED = "REQUESTED"
    CREATED = "CREATED"
    ILLEGAL = "ILLEGAL"
    NOT_VALID = "NOT_VALID"
    NO_OVERLAP = "NO_OVERLAP"
    ERROR = "ERROR"


# ------------------------------------------------------------------------------ base models
class WireModel(BaseModel):
    """A JSON body. IP_092/IP_095: unknown properties are ignored on input.

    On output optional properties that are ``None`` are left out, except those named in
    ``_KEEP_NULL`` (mandatory properties whose value may be ``null``).
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    _KEEP_NULL: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_absent(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name, info in type(self).model_fields.items():
                if name in self._KEEP_NULL or info.is_required():
                    continue
                if name in data and data[name] is None:
                    del data[name]
        return data

    def to_json(self) -> dict[str, Any]:
        """The JSON object (plain dicts/lists) to send."""
        return self.model_dump(mode="json")

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        """JSON property names this model reads: field names and their input aliases."""
        keys: set[str] = set()
        for name, info in cls.model_fields.items():
            keys.add(name)
            alias = info.validation_alias
            if isinstance(alias, str):
                keys.add(alias)
            elif isinstance(alias, AliasChoices):
                keys.update(c for c in alias.choices if isinstance(c, str))
        return frozenset(keys)


class Extensible(WireModel):
    """A capability object: IP_132 ``custom-<ns>-<name>`` properties kept and re-emitted.

    Other unknown properties are dropped (IP_092). The kept ones are in ``model_extra``.
    """

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _keep_only_custom_extras(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = cls.known_keys()
            return {k: v for k, v in data.items() if k in known or is_custom_property(k)}
        return data

    @property
    def custom_properties(self) -> dict[str, Any]:
        """The ``custom-*`` properties received (IP_132)."""
        return dict(self.model_extra or {})


# ------------------------------------------------------------------ capabilities (Tables 9-12)
def _exact_application_schema(schema: dict[str, Any], model: type[Any]) -> None:
    """OpenAPI: the application variants exclude each other (the ``oneOf`` was ambiguous,
    a DENM application also fit the catch-all). ``messageType`` is required in each schema (it is
    in every document, the server routes by it) and the catch-all excludes the known types."""
    properties = schema.get("properties", {})
    if "messageType" not in properties:
        return
    required = schema.setdefault("required", [])
    if "messageType" not in required:
        required.insert(0, "messageType")
    if "const" not in properties["messageType"]:
        properties["messageType"]["not"] = {"enum": sorted(MESSAGE_TYPES)}


class Application(Extensible):
    """Table 11, the properties common to every message type."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_exact_application_schema)

    messageType: Text
    publisherId: PublisherId
    publicationId: Name  # IP: mandatory when the II is used; identifies one capability
    originatingCountry: CountryCode
    protocolVersion: Name
    quadTree: list[Tile]  # coverage of the whole dataset

    @field_validator("publicationId")
    @classmethod
    def _publication_of_the_publisher(cls, value: str, info: ValidationInfo) -> str:
        """IP_022: publicationId is ``<publisherId>:<id>``, as on the capability's messages."""
        problem = check_publication_id(value, info.data.get("publisherId"))  # absent when itself invalid
        if problem is not None:
            raise ValueError(problem)
        return value


class DenmApplication(Application):
    """Table 11 DENM: ``causeCode`` mandatory, ``null`` when unknown; -1 = cancellations."""

    _KEEP_NULL: ClassVar[frozenset[str]] = frozenset({"causeCode"})
    messageType: Literal["DENM"] = "DENM"
    causeCode: list[CauseCode] | None = None


class IvimApplication(Application):
    """IVIM. ``iviType`` / ``pictogramCategoryCode`` (the Table 3 values the dataset holds) are
    optional extensions beyond Table 11, as in earlier NordicWay capability formats."""

    messageType: Literal["IVIM"] = "IVIM"
    iviType: list[Int] | None = None
    pictogramCategoryCode: list[Int] | None = None


class _IntersectionApplication(Application):
    """``ids``: optional extension beyond Table 11, the Table 4/5 ``id`` values the dataset holds."""

    ids: list[Text] | None = None


class SpatemApplication(_IntersectionApplication):
    messageType: Literal["SPATEM"] = "SPATEM"


class MapemApplication(_IntersectionApplication):
    messageType: Literal["MAPEM"] = "MAPEM"


class SremApplication(_IntersectionApplication):
    messageType: Literal["SREM"] = "SREM"


class SsemApplication(_IntersectionApplication):
    messageType: Literal["SSEM"] = "SSEM"


class CamApplication(Application):
    """CAM. ``stationType`` (Table 6 values; NordicWay's ``stationTypes`` read too) is an
    optional extension beyond Table 11."""

    messageType: Literal["CAM"] = "CAM"
    stationType: list[StationType] | None = Field(default=None, validation_alias=AliasChoices("stationType", "stationTypes"))


class CpmApplication(Application):
    messageType: Literal["CPM"] = "CPM"


class PoimPaApplication(Application):
    messageType: Literal["POIM-PA"] = "POIM-PA"


class OtherApplication(Application):
    """A message type outside Table 1 (e.g. NordicWay's ``DATEX_2``); kept, never routed."""

    @field_validator("messageType")
    @classmethod
    def _not_a_known_type(cls, value: str) -> str:
        if value in MESSAGE_TYPES:  # only reached when built directly, not through the union
            raise ValueError(f"{value} has its own application model")
        return value


_OTHER_TAG = "other"
APPLICATION_TAGS: frozenset[str] = MESSAGE_TYPES | {_OTHER_TAG}


def _application_tag(value: Any) -> str:
    kind = value.get("messageType") if isinstance(value, dict) else getattr(value, "messageType", None)
    return kind if isinstance(kind, str) and kind in MESSAGE_TYPES else _OTHER_TAG


AnyApplication = Annotated[
    Union[
        Annotated[DenmApplication, Tag("DENM")],
        Annotated[IvimApplication, Tag("IVIM")],
        Annotated[SpatemApplication, Tag("SPATEM")],
        Annotated[MapemApplication, Tag("MAPEM")],
        Annotated[SremApplication, Tag("SREM")],
        Annotated[SsemApplication, Tag("SSEM")],
        Annotated[CamApplication, Tag("CAM")],
        Annotated[CpmApplication, Tag("CPM")],
        Annotated[PoimPaApplication, Tag("POIM-PA")],
        Annotated[OtherApplication, Tag(_OTHER_TAG)],
    ],
    Discriminator(_application_tag),
]


def _redirect_policy_alias(value: Any) -> Any:
    return RedirectPolicy.NOT_AVAILABLE.value if value == "NOT_ALLOWED" else value


class Metadata(Extensible):
    """Table 12 (all optional). ``infoUrl`` (NordicWay) is read as ``infoURL``."""

    infoURL: Text | None = Field(default=None, validation_alias=AliasChoices("infoURL", "infoUrl"))
    shardCount: PositiveInt | None = None  # appendix G
    redirectPolicy: Annotated[RedirectPolicy | None, BeforeValidator(_redirect_policy_alias)] = None
    maxBandwidth: NonNegativeInt | None = None  # bytes/s over 5 s, per shard
    maxMessageRate: NonNegativeInt | None = None  # messages/s over 5 s, per shard
    repetitionInterval: NonNegativeInt | None = None  # ms

    @property
    def effective_redirect_policy(self) -> RedirectPolicy:
        """Table 12: an omitted policy is OPTIONAL."""
        return self.redirectPolicy or RedirectPolicy.OPTIONAL


class Capability(Extensible):
    """Table 10: one dataset. (The profile gives a capability no ``id``.)"""

    application: AnyApplication
    metadata: Metadata = Field(default_factory=Metadata)

    @cached_property
    def domains(self) -> dict[str, Domain]:
        """The message property values the capability describes, computed once (matching
        thousands of capabilities against hundreds of selectors spent most of its time here)."""
        return capability_domains(self.application, self.metadata)

    @cached_property
    def json_text(self) -> str:
        """Its JSON (compact), encoded once: a capabilities message of tens of thousands is joined
        from these (encoding 40,000 took 2 s, holding the interpreter)."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @cached_property
    def shape(self) -> Shape:
        """Its domains but the publicationId, hashed once (:class:`ii_api.selectors.matching.Shape`)."""
        return Shape(self.domains)


class CapabilitiesMessage(Extensible):
    """Table 9 / appendix C: body of ``POST /capabilities`` and of its answer (IP_093/094)."""

    version: Text = CAPABILITIES_VERSION
    name: Name
    capabilities: list[Capability]  # may be empty

    def json_bytes(self) -> bytes:
        """The same JSON as ``to_json()`` (``capabilities`` last), each capability's text reused
        (:attr:`Capability.json_text`)."""
        head = self.model_copy(update={"capabilities": []}).to_json()
        head.pop("capabilities", None)
        text = json.dumps(head, separators=(",", ":"))[:-1]
        listed = ",".join(c.json_text for c in self.capabilities)
        return f'{text}{"," if head else ""}"capabilities":[{listed}]}}'.encode()


CapabilitiesRequest = CapabilitiesMessage
CapabilitiesResponse = CapabilitiesMessage


# ------------------------------------------------------------------ subscriptions (Tables 13-15)
def _subscription_version(value: Any) -> Any:
    return SUBSCRIPTIONS_VERSION if value == "2.0" else value  # NordicWay sends "2.0"


SubscriptionVersion = Annotated[Literal["1.2"], BeforeValidator(_subscription_version)]


class Endpoint(WireModel):
    """Table 15 endpoint; host, port and source are mandatory when the status is CREATED."""

    host: Name | None = None
    port: Port | None = None
    source: Name | None = None
    maxBandwidth: NonNegativeInt | None = None  # NordicWay extension
    maxMessageRate: NonNegativeInt | None = None  # NordicWay extension

    @property
    def complete(self) -> bool:
        return self.host is not None and self.port is not None and self.source is not None


def _check_created_endpoints(status: SubscriptionStatus | None, endpoints: list[Endpoint] | None) -> None:
    if status is SubscriptionStatus.CREATED:
        for index, endpoint in enumerate(endpoints or ()):
            if not endpoint.complete:
                raise ValueError(f"endpoint {index} needs host, port and source when the status is CREATED")


class SubscriptionRequestItem(WireModel):
    """Table 13: one requested subscription."""

    selector: Text
    consumerCommonName: Name | None = None  # omitted = the requesting interchange (no redirect)


class SubscriptionRequest(WireModel):
    """Table 13 / appendix D: body of ``POST /subscriptions`` (IP_096)."""

    version: SubscriptionVersion = SUBSCRIPTIONS_VERSION
    name: Name
    subscriptions: list[SubscriptionRequestItem] = Field(min_length=1)


class Subscription(WireModel):
    """Table 14: one subscription in the POST answer or the list (IP_097, IP_107)."""

    id: Name
    selector: Text
    consumerCommonName: Name | None = None
    path: Name
    status: SubscriptionStatus
    errorMessage: Text | None = None
    endpoints: list[Endpoint] | None = None  # beyond Table 14: known once CREATED
    lastUpdatedTimestamp: Timestamp | None = None  # beyond Table 14

    @field_validator("endpoints")
    @classmethod
    def _created_endpoints(cls, value: Any, info: ValidationInfo) -> Any:
        _check_created_endpoints(info.data.get("status"), value)
        return value


class SubscriptionResponse(WireModel):
    """Table 14 / appendix D: answer to ``POST /subscriptions`` and ``GET /<name>/subscriptions``."""

    version: SubscriptionVersion = SUBSCRIPTIONS_VERSION
    name: Name
    subscriptions: list[Subscription]


SubscriptionListResponse = SubscriptionResponse


class SubscriptionPollResponse(WireModel):
    """Table 15 / appendix D: answer to ``GET <path>`` (IP_108, IP_110)."""

    id: Name
    selector: Text
    consumerCommonName: Name | None = None
    path: Name
    status: SubscriptionStatus
    endpoints: list[Endpoint] = Field(default_factory=list)
    errorMessage: Text | None = None
    # Table 15 makes it mandatory, yet the appendix D example omits it: read as optional,
    # always set by this node.
    lastUpdatedTimestamp: Timestamp | None = None

    @field_validator("endpoints")
    @classmethod
    def _created_endpoints(cls, value: Any, info: ValidationInfo) -> Any:
        _check_created_endpoints(info.data.get("status"), value)
        return value


# ---------------------------------------------------------------------------- local actor API
def _bare_list_as(key: str) -> Callable[[Any], Any]:
    def wrap(data: Any) -> Any:
        return {key: data} if isinstance(data, list) else data

    return wrap


class LocalCapabilitiesRequest(WireModel):
    """``POST /{actor}/capabilities``: the capabilities the actor will deliver."""

    name: Name | None = None  # if given, must be the actor's CN (checked by the server)
    version: Text = LOCAL_API_VERSION
    capabilities: list[Capability] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _accept_bare_list(cls, data: Any) -> Any:
        return _bare_list_as("capabilities")(data)

    @field_validator("capabilities")
    @classmethod
    def _known_message_types(cls, value: list[Capability]) -> list[Capability]:
        for index, capability in enumerate(value):
            if isinstance(capability.application, OtherApplication):
                raise ValueError(
                    f"capability {index}: messageType {capability.application.messageType!r} is not one of "
                    f"{', '.join(m.value for m in MessageType)}"
                )
        return value


class LocalCapability(WireModel):
    """One stored capability of an actor (NordicWay ``{id, path, definition}``)."""

    id: Name
    path: Name
    definition: Capability


class LocalCapabilitiesResponse(WireModel):
    """Answer to ``POST`` and ``GET /{actor}/capabilities``."""

    name: Name
    version: Text = LOCAL_API_VERSION
    capabilities: list[LocalCapability]


class DeliveryRequestItem(WireModel):
    selector: Text


class DeliveriesRequest(WireModel):
    """``POST /{actor}/deliveries``: where the actor wants to publish."""

    name: Name | None = None
    version: Text = LOCAL_API_VERSION
    deliveries: list[DeliveryRequestItem] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _accept_bare_list(cls, data: Any) -> Any:
        return _bare_list_as("deliveries")(data)


class DeliveryEndpoint(WireModel):
    """An AMQP target the actor publishes to (Basic Interface)."""

    host: Name
    port: Port
    target: Name
    maxBandwidth: NonNegativeInt | None = None
    maxMessageRate: NonNegativeInt | None = None


class Delivery(WireModel):
    id: Name
    path: Name
    selector: Text
    status: DeliveryStatus
    endpoints: list[DeliveryEndpoint] = Field(default_factory=list)
    lastUpdatedTimestamp: Timestamp
    errorMessage: Text | None = None


class DeliveriesResponse(WireModel):
    """Answer to ``POST`` and ``GET /{actor}/deliveries``."""

    name: Name
    version: Text = LOCAL_API_VERSION
    deliveries: list[Delivery]


class LocalSubscriptionsRequest(WireModel):
    """``POST /{actor}/subscriptions``."""

    name: Name | None = None
    version: Text = LOCAL_API_VERSION
    subscriptions: list[SubscriptionRequestItem] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _accept_bare_list(cls, data: Any) -> Any:
        return _bare_list_as("subscriptions")(data)


class LocalEndpoint(WireModel):
    """An AMQP source the actor consumes from (Basic Interface)."""

    host: Name
    port: Port
    source: Name
    maxBandwidth: NonNegativeInt | None = None
    maxMessageRate: NonNegativeInt | None = None


class LocalSubscription(WireModel):
    id: Name
    path: Name
    selector: Text
    consumerCommonName: Name | None = None
    status: SubscriptionStatus
    endpoints: list[LocalEndpoint] = Field(default_factory=list)
    lastUpdatedTimestamp: Timestamp = Field(
        validation_alias=AliasChoices("lastUpdatedTimestamp", "lastUpdatedTimeStamp")
    )
    errorMessage: Text | None = None


class LocalSubscriptionsResponse(WireModel):
    """Answer to ``POST`` and ``GET /{actor}/subscriptions``."""

    name: Name
    version: Text = LOCAL_API_VERSION
    subscriptions: list[LocalSubscription]


class NetworkCapabilitiesResponse(WireModel):
    """Answer to ``GET /{actor}/network/capabilities?selector=``: capabilities the selector matches."""

    name: Name
    selector: Text = ""
    version: Text = LOCAL_API_VERSION
    capabilities: list[Capability]


class ActorPermissions(WireModel):
    """What the node's agreement with an actor lets it do (IP_068, ``[ii.actors]``); ``"*"`` allows
    every value, an empty list none."""

    publishMessageTypes: list[Text]
    publisherIds: list[Text]
    subscribeMessageTypes: list[Text]


class WhoAmIResponse(WireModel):
    """Answer to ``GET <base>/whoami``: the identity this node sees in the client certificate.

    ``role`` is ``interchange`` for a discovered neighbour (IP_126), ``actor`` for anyone else of
    the trust chain. ``allowed`` says whether that identity may use its API here; an actor's
    ``path`` is the root of its local actor API, its ``permissions`` what the actor policy lets it
    do (every ``"*"`` when the node has no policy: ``policyConfigured`` false), ``reason`` why not."""

    name: Name
    interchange: Name
    role: Literal["actor", "interchange"]
    allowed: bool
    policyConfigured: bool
    path: Text | None = None
    permissions: ActorPermissions | None = None
    reason: Text | None = None
