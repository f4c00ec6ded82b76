"""The streaming service's bookkeeping (simulator): accounts, TLC registrations, sessions and routing.

No I/O and no clock reading: every call gets ``now``. It applies TLEX 5 / 6.3.3 and UDAP 2 / 3.3.3:
authentication and session type by the account's role, the identifiers each account may stream,
409 refusals of identifiers in use, single-use tokens (``expire``), routing by identifier within a
domain (monitors get the 0xF0 wrapping). Errors are :class:`Refusal` with the HTTP status and
message the REST layer answers with. The rules in full: docs/tlex-bridge.md ("The
streaming-service simulator").
"""
from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Literal

from interchange.bridges.tlex.codec import MONITOR_PAYLOAD, MonitorPayload, Payload, encode_monitor_payload
from interchange.bridges.tlex.models import Listener, RequestDetails, Session, SessionDetails, SessionRequest, TlcRegistration
from interchange.bridges.tlex.session import Mode

Role = Literal["BROKER_SYSTEM", "TLC_SYSTEM", "MONITOR"]
ROLE_OF_TYPE: dict[str, Role] = {"Broker": "BROKER_SYSTEM", "TLC": "TLC_SYSTEM", "Monitor": "MONITOR"}
TLC_MODES = ("singleplex", "multiplex")


class Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Account:
    name: str
    authorization: str
    role: Role
    uuid: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass(frozen=True)
class Limits:
    """What every session is given (the simulator's defaults are TLEX's example values)."""

    listener_expiry: float = 5.0
    keepalive_timeout: float = 5.0
    clock_diff_limit: float = 3.0
    clock_diff_duration: float = 60.0
    payload_rate: float = 1200.0
    payload_rate_duration: float = 5.0
    throughput_kb: float = 120.0
    throughput_duration: float = 5.0


@dataclass
class SessionRecord:
    session: Session
    account: Account
    mode: Mode
    expires_mono: float
    connected: bool = False
    ended: bool = False
    _scope: frozenset[str] = field(default=frozenset(), repr=False)
    _scope_of: Session | None = field(default=None, repr=False)

    @property
    def scope(self) -> frozenset[str]:
        """The session's TLC identifiers (kept until its details change: a Broker session may hold thousands)."""
        if self._scope_of is not self.session:
            self._scope, self._scope_of = frozenset(self.session.details.identifiers()), self.session
        return self._scope


@dataclass(frozen=True)
class Route:
    """Deliver ``payload`` on the connection of session ``token``; None: to the controller the service
    plays itself (:meth:`ServiceRegistry.play`)."""

    token: str | None
    payload: Payload


class ServiceRegistry:
    """Accounts, TLC registrations and sessions of one simulated streaming service."""

    def __init__(self, limits: Limits, listeners: dict[str, tuple[str, int]]) -> None:
        self.limits = limits
        self.listeners = listeners  #: security mode ("NONE", "TLSv1.2") -> (host, port)
        self.accounts: dict[str, Account] = {}  # by authorization token
        self.tlcs: dict[str, TlcRegistration] = {}  # by uuid
        self.sessions: dict[str, SessionRecord] = {}  # by session token
        #: connected sessions by (domain, TLC identifier) in their scope: routing looks at these only
        self._holding: dict[tuple[str, str], dict[str, SessionRecord]] = {}
        self._played: set[tuple[str, str]] = set()  #: controllers the service plays itself (domain, TLC)

    def add_account(self, name: str, role: Role, authorization: str | None = None) -> Account:
        account = Account(name, authorization or secrets.token_urlsafe(32), role)
        self.accounts[account.authorization] = account
        return account

    def register_tlc(self, account: Account, identifier: str, domain: str) -> TlcRegistration:
        tlc = TlcRegistration(uuid=str(uuid.uuid4()), identifier=identifier, type="TCPStreaming", domain=domain,
                              account=account.uuid)
        self.tlcs[tlc.uuid] = tlc
        return tlc

    def authenticate(self, authorization: str | None) -> Account:
        account = self.accounts.get(authorization or "")
        if account is None:
            raise Refusal(401, "missing or unknown X-Authorization token")
        return account

    # --- sessions -------------------------------------------------------------------------

    def active(self, now_mono: float) -> list[SessionRecord]:
        self.expire(now_mono)
        return [r for r in self.sessions.values() if not r.ended]

    def expire(self, now_mono: float) -> list[str]:
        """Drop sessions whose listener expired unconnected; their tokens are dead."""
        gone = [t for t, r in self.sessions.items() if not r.connected and now_mono >= r.expires_mono]
        for token in gone:
            del self.sessions[token]
        return gone

    def create(self, account: Account, request: SessionRequest, now_mono: float, now_utc: datetime) -> Session:
        mode = self._mode(request)
        if ROLE_OF_TYPE[request.type] != account.role:
            raise Refusal(403, f"a {account.role} account cannot create {request.type} sessions")
        self._check_scope(account, mode, request.domain, request.details, exclude=None, now_mono=now_mono)
        host, port = self._listener(request.details.security_mode)
        limits = self.limits
        details = SessionDetails.model_validate({
            **request.details.model_dump(by_alias=True, exclude_none=True),
            "listener": Listener(host=host, port=port,
                                 expiration=now_utc.astimezone(timezone.utc) + timedelta(seconds=limits.listener_expiry)),
            "keepAliveTimeout": timedelta(seconds=limits.keepalive_timeout),
            "clockDiffLimit": timedelta(seconds=limits.clock_diff_limit),
            "clockDiffLimitDuration": timedelta(seconds=limits.clock_diff_duration),
            "payloadRateLimit": limits.payload_rate,
            "payloadRateLimitDuration": timedelta(seconds=limits.payload_rate_duration),
            "payloadThroughputLimit": limits.throughput_kb,
            "payloadThroughputLimitDuration": timedelta(seconds=limits.throughput_duration)})
        session = Session(token=secrets.token_urlsafe(32), domain=request.domain, type=request.type,
                          protocol=request.protocol, details=details)
        self.sessions[session.token] = SessionRecord(session, account, mode, now_mono + limits.listener_expiry)
        return session

    def _mode(self, request: SessionRequest) -> Mode:
        try:
            mode = request.mode()
        except ValueError as exc:
            raise Refusal(400, str(exc)) from None
        if (mode == "singleplex") != (request.details.tlc_identifier is not None):
            raise Refusal(400, "singleplex sessions give tlcIdentifier, multiplex sessions tlcIdentifiers")
        return mode

    def _listener(self, security_mode: str) -> tuple[str, int]:
        if security_mode not in self.listeners:
            raise Refusal(400, f"security mode {security_mode} is not offered by this service")
        return self.listeners[security_mode]

    def _check_scope(self, account: Account, mode: Mode, domain: str, details: RequestDetails,
                     exclude: str | None, now_mono: float) -> None:
        wanted = set(details.identifiers())
        if not wanted:
            raise Refusal(400, "no TLC identifiers given")
        known = {t.identifier: t for t in self.tlcs.values() if t.domain == domain}
        unknown = sorted(wanted - known.keys())
        if unknown:
            raise Refusal(400, f"TLC identifiers not registered in domain {domain!r}: {', '.join(unknown)}")
        if mode in TLC_MODES:
            foreign = sorted(i for i in wanted if known[i].account != account.uuid)
            if foreign:
                raise Refusal(403, f"TLC identifiers of another account: {', '.join(foreign)}")
        for record in self.active(now_mono):
            if record.session.token == exclude or record.session.domain != domain:
                continue
            if not _conflicts(mode, account, record):
                continue
            clash = sorted(wanted & record.scope)
            if clash:
                raise Refusal(409, f"TLC identifiers already used in another active session: {', '.join(clash)}")

    def sessions_of(self, account: Account, now_mono: float) -> list[Session]:
        return [r.session for r in self.active(now_mono) if r.account == account]

    def session_of(self, account: Account, token: str, now_mono: float) -> SessionRecord:
        record = self.sessions.get(token)
        if record is None or record.ended or record.account != account or not self._alive(record, now_mono):
            raise Refusal(404, "no active session with this token")
        return record

    def _alive(self, record: SessionRecord, now_mono: float) -> bool:
        return record.connected or now_mono < record.expires_mono

    def update(self, account: Account, token: str, details: RequestDetails, now_mono: float) -> Session:
        record = self.session_of(account, token, now_mono)
        if (record.mode == "singleplex") != (details.tlc_identifier is not None):
            raise Refusal(400, "singleplex sessions give tlcIdentifier, multiplex sessions tlcIdentifiers")
        if details.security_mode != record.session.details.security_mode:
            raise Refusal(400, "the security mode of a session cannot change")
        self._check_scope(account, record.mode, record.session.domain, details, exclude=token, now_mono=now_mono)
        new_details = record.session.details.model_copy(update={
            "tlc_identifiers": details.tlc_identifiers, "tlc_identifier": details.tlc_identifier})
        self._index(record, False)
        record.session = record.session.model_copy(update={"details": new_details})
        self._index(record, True)
        return record.session

    def tlcs_of(self, account: Account) -> list[TlcRegistration]:
        if account.role == "TLC_SYSTEM":
            return [t for t in self.tlcs.values() if t.account == account.uuid]
        return list(self.tlcs.values())

    # --- connections ----------------------------------------------------------------------

    def connect(self, token: str, security_mode: str, now_mono: float) -> SessionRecord:
        """A connection presented ``token``: the session, or Refusal (unknown, used, expired, wrong listener)."""
        record = self.sessions.get(token)
        if record is None:
            raise Refusal(401, "unknown or expired session token")
        if record.connected or record.ended:
            raise Refusal(401, "session token already used")
        if now_mono >= record.expires_mono:
            del self.sessions[token]
            raise Refusal(401, "session listener expired")
        if record.session.details.security_mode != security_mode:
            raise Refusal(401, f"session is for security mode {record.session.details.security_mode}")
        record.connected = True
        self._index(record, True)
        return record

    def disconnect(self, token: str) -> None:
        """The connection ended: the session is over (a new one needs a new token)."""
        record = self.sessions.pop(token, None)
        if record is not None:
            self._index(record, False)
            record.ended = True

    def _index(self, record: SessionRecord, add: bool) -> None:
        """File a connected session under each identifier of its scope (or take it out)."""
        if not record.connected or record.ended:
            return
        domain, token = record.session.domain, record.session.token
        for tlc in record.scope:
            if add:
                self._holding.setdefault((domain, tlc), {})[token] = record
            elif (bucket := self._holding.get((domain, tlc))) is not None:
                bucket.pop(token, None)
                if not bucket:
                    del self._holding[(domain, tlc)]

    def play(self, domain: str, identifiers: list[str]) -> None:
        """The service itself plays these controllers (the simulator's virtual ones, no TLC session
        each): Broker payloads for them are routed to ``Route(None, ...)``."""
        self._played.update((domain, tlc) for tlc in identifiers)

    def route(self, token: str, payload: Payload, now_utc_ms: int) -> list[Route]:
        """Where a payload accepted from session ``token`` goes."""
        source = self.sessions.get(token)
        if source is None:
            return []
        tlc = payload.tlc if payload.tlc is not None else next(iter(source.scope))
        routes = self._routes(source.session.domain, tlc, payload, source.mode == "broker", token, now_utc_ms)
        if source.mode == "broker" and (source.session.domain, tlc) in self._played:
            routes.append(Route(None, Payload(payload.payload_type, payload.origin_ms, payload.payload, tlc)))
        return routes

    def route_from_controller(self, domain: str, tlc: str, payload: Payload, now_utc_ms: int) -> list[Route]:
        """Where a payload of a controller the service plays (:meth:`play`) goes, as if its TLC session
        had sent it (its Monitor Payloads name the publisher ``played:<TLC>``)."""
        return self._routes(domain, tlc, payload, False, f"played:{tlc}", now_utc_ms)

    def _routes(self, domain: str, tlc: str, payload: Payload, to_tlc: bool, publisher: str,
                now_utc_ms: int) -> list[Route]:
        routes: list[Route] = []
        for token, record in self._holding.get((domain, tlc), {}).items():
            if token == publisher:
                continue
            if record.mode == "monitor":
                routes.append(Route(token, _monitor(publisher, tlc, payload, now_utc_ms)))
            elif (record.mode in TLC_MODES) == to_tlc:
                routes.append(Route(token, Payload(payload.payload_type, payload.origin_ms, payload.payload, tlc)))
        return routes


def _conflicts(mode: Mode, account: Account, other: SessionRecord) -> bool:
    """Whether an active session ``other`` blocks identifiers for a new session (TLEX 6.3.3 refusals)."""
    if mode in TLC_MODES:
        return other.mode in TLC_MODES
    return other.mode == mode and other.account == account


def _monitor(publisher: str, tlc: str, payload: Payload, now_utc_ms: int) -> Payload:
    wrapped = MonitorPayload(publisher, payload.origin_ms, now_utc_ms, payload.payload_type, payload.payload)
    return Payload(MONITOR_PAYLOAD, now_utc_ms, encode_monitor_payload(wrapped), tlc)
