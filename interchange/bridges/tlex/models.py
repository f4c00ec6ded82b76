"""JSON bodies of the TLEX/UDAP REST APIs (TLEX 5.2, UDAP 2.2), validated with pydantic at the boundary.

Session kinds (type, protocol) give the communication modes of TLEX 6.3.3 / UDAP 3.3.3: Broker,
TLC singleplex and multiplex, Monitor (the "Monitor" session type is our assumption: the specs
name it only in the TLEX-BROKER-ADMIN document, which we do not have). Durations are ISO 8601
(``PT5S``), the listener expiration an ISO 8601 date-time. The table: docs/tlex-bridge.md
("REST bodies").
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from interchange.bridges.tlex.codec import TLC_ID_SIZE
from interchange.bridges.tlex.session import Grant, Mode

SessionType = Literal["Broker", "TLC", "Monitor"]
Protocol = Literal["TCPStreaming_Singleplex", "TCPStreaming_Multiplex", "VLOG"]
SecurityMode = Literal["NONE", "TLSv1.2"]
TlcId = str  #: 8 ASCII characters on the wire (6.3.4.5.3)

MODES: dict[tuple[str, str], Mode] = {
    ("Broker", "TCPStreaming_Multiplex"): "broker",
    ("TLC", "TCPStreaming_Singleplex"): "singleplex",
    ("TLC", "TCPStreaming_Multiplex"): "multiplex",
    ("Monitor", "TCPStreaming_Multiplex"): "monitor",
}


def mode_of(session_type: str, protocol: str) -> Mode:
    """The communication mode of a session kind; ValueError for kinds without TCPStreaming (VLOG)."""
    mode = MODES.get((session_type, protocol))
    if mode is None:
        raise ValueError(f"no TCPStreaming mode for session type {session_type!r} with protocol {protocol!r}")
    return mode


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)  # services may add fields


class RequestDetails(_Body):
    """``details`` of a create request and the body of an update (PUT)."""

    security_mode: SecurityMode = Field(alias="securityMode")
    tlc_identifiers: list[TlcId] | None = Field(default=None, alias="tlcIdentifiers")
    tlc_identifier: TlcId | None = Field(default=None, alias="tlcIdentifier")

    @model_validator(mode="after")
    def _one_scope(self) -> "RequestDetails":
        if (self.tlc_identifiers is None) == (self.tlc_identifier is None):
            raise ValueError("give exactly one of tlcIdentifiers (multiplex) and tlcIdentifier (singleplex)")
        for tlc in self.identifiers():
            if len(tlc) != TLC_ID_SIZE or not tlc.isascii():
                raise ValueError(f"TLC identifier {tlc!r} is not {TLC_ID_SIZE} ASCII characters")
        return self

    def identifiers(self) -> list[TlcId]:
        return [self.tlc_identifier] if self.tlc_identifier is not None else list(self.tlc_identifiers or [])


class SessionRequest(_Body):
    domain: str = Field(min_length=1)
    type: SessionType
    protocol: Protocol
    details: RequestDetails

    def mode(self) -> Mode:
        return mode_of(self.type, self.protocol)


class Listener(_Body):
    host: str
    port: int = Field(ge=1, le=65535)
    expiration: datetime


class SessionDetails(RequestDetails):
    """``details`` of a session answered by the service (TLEX 5.2.1.1.3.2)."""

    listener: Listener
    keep_alive_timeout: timedelta = Field(alias="keepAliveTimeout")
    clock_diff_limit: timedelta = Field(alias="clockDiffLimit")
    clock_diff_limit_duration: timedelta = Field(alias="clockDiffLimitDuration")
    payload_rate_limit: float = Field(alias="payloadRateLimit", gt=0)
    payload_rate_limit_duration: timedelta = Field(alias="payloadRateLimitDuration")
    payload_throughput_limit: float = Field(alias="payloadThroughputLimit", gt=0)
    payload_throughput_limit_duration: timedelta = Field(alias="payloadThroughputLimitDuration")


class Session(_Body):
    token: str = Field(min_length=1)
    domain: str
    type: SessionType
    protocol: Protocol
    details: SessionDetails

    def mode(self) -> Mode:
        return mode_of(self.type, self.protocol)

    def grant(self, timestamps_interval: float = 15.0) -> Grant:
        """The rules the streaming service applies to this session's connection."""
        d = self.details
        return Grant(self.mode(), frozenset(d.identifiers()), d.keep_alive_timeout.total_seconds(),
                     int(d.clock_diff_limit.total_seconds() * 1000), d.clock_diff_limit_duration.total_seconds(),
                     d.payload_rate_limit, d.payload_rate_limit_duration.total_seconds(),
                     d.payload_throughput_limit, d.payload_throughput_limit_duration.total_seconds(),
                     timestamps_interval)


class TlcRegistration(_Body):
    """One entry of GET /tlcs (TLEX 5.2.2.1)."""

    uuid: str
    identifier: TlcId
    type: Literal["TCPStreaming", "VLOG"]
    domain: str
    account: str


def dump(model: BaseModel) -> dict:
    """JSON-ready dict with the spec's field names."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)
