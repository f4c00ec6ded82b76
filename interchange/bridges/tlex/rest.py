"""REST client of a streaming service (TLEX 5, UDAP 2): sessions and TLC registrations over HTTPS.

Every request carries the ``X-Authorization`` token (TLEX 5.1). Answers are validated with the
models of :mod:`.models`; an error answered by the service is raised as :class:`ServiceError`
with its HTTP status and body, an unreachable service as :class:`ServiceUnreachable`. The same
client serves every session kind (Broker, TLC singleplex/multiplex, Monitor): the bridge uses the
Broker kind, the simulator's fake controllers the TLC kinds.

There is no "close session" call in either spec: a session ends when its TCP connection ends
(say Bye, then close), or when its listener expires unused.
"""
from __future__ import annotations

import asyncio
import ssl
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
from pydantic import TypeAdapter, ValidationError

from interchange.bridges.tlex.models import MODES, RequestDetails, Session, SessionRequest, TlcRegistration, dump

M = TypeVar("M")


class ServiceError(Exception):
    """The service answered with an error status (or an answer that is not what the spec says)."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.method, self.path, self.status, self.body = method, path, status, body


class ServiceUnreachable(Exception):
    """No HTTP answer at all (connection refused, TLS failure, timeout)."""


class StreamingServiceClient:
    """``async with StreamingServiceClient(url, token) as api: await api.create_session(...)``."""

    def __init__(self, base_url: str, authorization: str, *, ssl_context: ssl.SSLContext | None = None,
                 timeout: float = 10.0, server_hostname: str | None = None) -> None:
        self.server_hostname = server_hostname  #: name checked in the service's certificate when base_url has an address
        self.base_url = base_url.rstrip("/")
        self._headers = {"X-Authorization": authorization, "Content-Type": "application/json"}
        self._ssl = ssl_context
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._http: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> StreamingServiceClient:
        self._http = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _call(self, method: str, path: str, answer: TypeAdapter[M], body: dict | None = None) -> M:
        if self._http is None:
            raise RuntimeError("use the client as an async context manager")
        try:
            async with self._http.request(method, self.base_url + path, json=body, ssl=self._ssl or True,
                                          server_hostname=self.server_hostname) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, asyncio.TimeoutError, ssl.SSLError, OSError) as exc:
            raise ServiceUnreachable(f"{method} {self.base_url}{path}: {exc or type(exc).__name__}") from exc
        if status != 200:
            raise ServiceError(method, path, status, text)
        try:
            return answer.validate_json(text)
        except ValidationError as exc:
            raise ServiceError(method, path, status, f"answer does not match the spec: {exc.errors()[:3]}; {text}") from None

    async def create_session(self, request: SessionRequest) -> Session:
        """POST /sessions (TLEX 5.2.1.1): the answer carries the single-use token and the listener."""
        return await self._call("POST", "/sessions", _SESSION, dump(request))

    async def list_sessions(self) -> list[Session]:
        return await self._call("GET", "/sessions", _SESSIONS)

    async def get_session(self, token: str) -> Session:
        return await self._call("GET", f"/sessions/{quote(token, safe='')}", _SESSION)

    async def update_session(self, token: str, details: RequestDetails) -> Session:
        """PUT /sessions/<token> (5.2.1.4): new TLC identifiers for a multiplex session."""
        return await self._call("PUT", f"/sessions/{quote(token, safe='')}", _SESSION, dump(details))

    async def list_tlcs(self) -> list[TlcRegistration]:
        return await self._call("GET", "/tlcs", _TLCS)

    async def get_tlc(self, uuid: str) -> TlcRegistration:
        return await self._call("GET", f"/tlcs/{quote(uuid, safe='')}", _TLC)


_SESSION = TypeAdapter(Session)
_SESSIONS = TypeAdapter(list[Session])
_TLC = TypeAdapter(TlcRegistration)
_TLCS = TypeAdapter(list[TlcRegistration])


def session_request(domain: str, mode: str, tlc_ids: list[str], security: str = "TLSv1.2") -> SessionRequest:
    """The create-session body for a communication mode (see :data:`.models.MODES`)."""
    kinds = {mode: kind for kind, mode in MODES.items()}
    if mode not in kinds:
        raise ValueError(f"unknown mode {mode!r}: one of {', '.join(kinds)}")
    session_type, protocol = kinds[mode]
    scope: dict[str, Any] = {"tlcIdentifier": tlc_ids[0]} if mode == "singleplex" else {"tlcIdentifiers": tlc_ids}
    if mode == "singleplex" and len(tlc_ids) != 1:
        raise ValueError("a singleplex session is for exactly one TLC identifier")
    return SessionRequest.model_validate({"domain": domain, "type": session_type, "protocol": protocol,
                                          "details": {"securityMode": security, **scope}})


__all__ = ["ServiceError", "ServiceUnreachable", "StreamingServiceClient", "session_request"]
