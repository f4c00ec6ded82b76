"""The ``[tlex]`` section of the node config: one streaming service, the Broker account, and the
controllers bridged into C-Roads.

- payload type bytes (TLEX 6.3.4.5) <-> message types, per service and per controller;
  ``identify`` = ``header`` (ITS PDU header first) or ``type``;
- IP_113: ``quadTree`` = the zoom-18 tile of the controller's position (IP_038) and the zoom-14
  tiles of a circle of ``area_radius_m`` around it (default 300 m, per type or per controller);
- IP_033: TTL = repetition interval x 1.2, at least 1 s (SPATEM/SSEM 100 ms, MAPEM 540 s,
  IP_048); ``mapem_min_interval_ms`` skips identical MAPEM copies (IP_049);
- protocol versions default to "<TYPE>:2.1.1" (ETSI TS 103 301 V2.1.1).

The example block and every key: docs/tlex-bridge.md ("The ``[tlex]`` section").
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from interchange.bridges.tlex.codec import TLC_ID_SIZE
from interchange.bridges.tlex.payloads import (
    DEFAULT_ITS_PROTOCOL_VERSIONS,
    MESSAGE_IDS,
    Identification,
    PayloadTypes,
    mapping_problem,
)
from interchange.broker.validation import check_property_value
from interchange.ground.profile import MESSAGE_TYPES, MessageType
from quadtree.tiles import check_latitude, check_longitude

SPATEM, MAPEM, SREM, SSEM = MessageType.SPATEM.value, MessageType.MAPEM.value, MessageType.SREM.value, MessageType.SSEM.value
BRIDGED_KINDS = (SPATEM, MAPEM, SSEM)  #: published into C-Roads; SREM goes the other way
#: the controllers send SPATEM and SSEM at 10 Hz; a MAPEM is repeated as IP_048 asks (9 min)
DEFAULT_REPETITION_MS = {SPATEM: 100, MAPEM: MESSAGE_TYPES[MessageType.MAPEM].repetition.interval_ms,
                         SSEM: 100, SREM: 100}
DEFAULT_PROTOCOL_VERSIONS = {kind: f"{kind}:2.1.1" for kind in (SPATEM, MAPEM, SREM, SSEM)}
#: IP_113: the destination area around a controller, by message type (a crossing and its approaches)
DEFAULT_AREA_RADIUS_M = {SPATEM: 300.0, MAPEM: 300.0, SSEM: 300.0}
MAX_AREA_RADIUS_M = 10_000.0  #: IP_113 speaks of up to 1 km (9 tiles of zoom 14); 10 km is ~100 tiles
AreaRadius = Annotated[float, Field(ge=0, le=MAX_AREA_RADIUS_M)]


def _profile_rule(name: str) -> Callable[[str], str]:
    """A config value that goes into the ``name`` property of every message: the profile's rule for it."""
    def check(value: str) -> str:
        problem = check_property_value(name, value)
        if problem is not None:
            raise ValueError(problem)
        return value
    return check


class ControllerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tlc_id: str
    intersections: list[str] = Field(min_length=1)
    latitude: float
    longitude: float
    shard_id: int | None = Field(default=None, ge=1)
    names: list[str] = Field(default_factory=list, description="Table 4 name values, if any")
    payload_types: dict[str, int] = Field(default_factory=dict, description=(
        "this controller's type bytes by message type, over the service's (tlex.payload_types)"))
    area_radius_m: AreaRadius | None = Field(default=None, description=(
        "radius (m) of this controller's destination area for every message type (IP_113), over tlex.area_radius_m"))

    @field_validator("tlc_id")
    @classmethod
    def _tlc(cls, value: str) -> str:
        if len(value) != TLC_ID_SIZE or not value.isascii():
            raise ValueError(f"a TLC identifier is {TLC_ID_SIZE} ASCII characters")
        return value

    @field_validator("intersections")
    @classmethod
    def _ids(cls, value: list[str]) -> list[str]:
        for item in value:
            region, _, ident = item.partition("-")
            if not (region.isdigit() and ident.isdigit()):
                raise ValueError(f"intersection id {item!r} is not region-id, e.g. 5-57")
        return value

    @model_validator(mode="after")
    def _position(self) -> "ControllerConfig":
        check_latitude(self.latitude)
        check_longitude(self.longitude)
        return self


class TlexBridgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    api_url: str = Field(pattern=r"^https?://")
    authorization: str | None = None
    authorization_file: Path | None = None
    server_name: str | None = None
    trust_bundle: Path | None = None
    domain: str = Field(min_length=1)
    security_mode: Literal["NONE", "TLSv1.2"] = "TLSv1.2"
    actor: Path = Field(description="identity directory of the bridge's client certificate at this node")
    publisher_id: Annotated[str, AfterValidator(_profile_rule("publisherId"))]
    originating_country: Annotated[str, AfterValidator(_profile_rule("originatingCountry"))]
    shard_count: int | None = Field(default=None, ge=1)
    repetition_ms: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_REPETITION_MS))
    mapem_min_interval_ms: int = Field(default=0, ge=0, description=(
        "identical MAPEMs from a controller closer than this are not published (IP_049); 0: all are"))
    protocol_versions: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_PROTOCOL_VERSIONS))
    identify: Identification = Field(default="header", description=(
        "header: a payload's message type from its ITS PDU header, else its type byte; type: its type byte only"))
    payload_types: dict[str, int] = Field(default_factory=lambda: dict(MESSAGE_IDS), description=(
        "the service's payload type bytes by message type (default: the ETSI messageIDs, SPATEM 4, MAPEM 5, "
        "SREM 9, SSEM 10)"))
    area_radius_m: dict[str, AreaRadius] = Field(default_factory=lambda: dict(DEFAULT_AREA_RADIUS_M), description=(
        "radius (m) of the destination area around a controller by message type (IP_113: zoom-14 tiles cover it)"))
    its_protocol_versions: list[int] = Field(default_factory=lambda: list(DEFAULT_ITS_PROTOCOL_VERSIONS), min_length=1,
                                             description="protocolVersion values read as an ITS PDU header")
    mapem_store_interval_s: float = Field(default=30.0, ge=0, description=(
        "a controller's MAPEM is written to the store (IP_049: repeated after a restart) at most this often; "
        "the newest copy is written at stop; 0: every copy"))
    bi_door: Literal["in-process", "amqps"] = Field(default="in-process", description=(
        "how the bridge publishes into the node's broker: through its in-process door (the same identity, "
        "authorization, records and outcomes as an AMQPS link, without the TLS hop inside the process), or "
        "over AMQPS as an actor in another process would"))
    backoff_initial: float = Field(default=0.5, gt=0)
    backoff_max: float = Field(default=30.0, gt=0)
    controllers: list[ControllerConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> "TlexBridgeConfig":
        if (self.authorization is None) == (self.authorization_file is None):
            raise ValueError("give exactly one of authorization and authorization_file")
        ids = [c.tlc_id for c in self.controllers]
        if len(set(ids)) != len(ids):
            raise ValueError("a TLC identifier appears twice in tlex.controllers")
        intersections = [i for c in self.controllers for i in c.intersections]
        if len(set(intersections)) != len(intersections):
            raise ValueError("an intersection id belongs to two controllers: SREM routing would be ambiguous")
        for controller in self.controllers:
            if self.shard_count is not None and (controller.shard_id is None or controller.shard_id > self.shard_count):
                raise ValueError(f"controller {controller.tlc_id}: shard_id 1..{self.shard_count} needed (IP_130)")
            if self.shard_count is None and controller.shard_id is not None:
                raise ValueError(f"controller {controller.tlc_id}: shard_id without tlex.shard_count")
        self.repetition_ms = {**DEFAULT_REPETITION_MS, **self.repetition_ms}
        self.protocol_versions = {**DEFAULT_PROTOCOL_VERSIONS, **self.protocol_versions}
        self.payload_types = {**MESSAGE_IDS, **self.payload_types}
        unknown = sorted(set(self.area_radius_m) - set(BRIDGED_KINDS))
        if unknown:
            raise ValueError(f"tlex.area_radius_m: {', '.join(unknown)}: the bridge publishes {', '.join(BRIDGED_KINDS)}")
        self.area_radius_m = {**DEFAULT_AREA_RADIUS_M, **self.area_radius_m}
        for where, mapping in [("tlex.payload_types", self.payload_types)] + [
                (f"controller {c.tlc_id}: payload_types", {**self.payload_types, **c.payload_types})
                for c in self.controllers if c.payload_types]:
            problem = mapping_problem(mapping)
            if problem is not None:
                raise ValueError(f"{where}: {problem}")
        return self

    def radius_of(self, controller: ControllerConfig, kind: str) -> float:
        """The radius (m) of the controller's destination area for ``kind`` (IP_113)."""
        return controller.area_radius_m if controller.area_radius_m is not None else self.area_radius_m[kind]

    def types_of(self, controller: ControllerConfig) -> PayloadTypes:
        """The controller's type bytes both ways: its own over the service's."""
        return PayloadTypes({**self.payload_types, **controller.payload_types})

    def resolve(self, base: Path) -> "TlexBridgeConfig":
        def fix(path: Path | None) -> Path | None:
            return path if path is None or path.is_absolute() else base / path

        return self.model_copy(update={"authorization_file": fix(self.authorization_file),
                                       "trust_bundle": fix(self.trust_bundle), "actor": fix(self.actor)})

    def token(self) -> str:
        if self.authorization is not None:
            return self.authorization
        assert self.authorization_file is not None
        return self.authorization_file.read_text(encoding="utf-8").strip()
