"""HTTPS client of the Improved Interface: this interchange calling a neighbour (IP_090).

Mutual TLS 1.3 with the node's interchange certificate (:func:`certs.tls.client_context`); the
request goes to the address and port found by discovery, and the neighbour's certificate must
name the neighbour (``server_hostname`` = its SRV target, IP_125). Bodies in and out are the
pydantic models of :mod:`ii_api.wire.models`; a non-2xx answer or a body that does not fit raises
:class:`IIClientError` with the HTTP status (None when no answer came).
"""
from __future__ import annotations

import asyncio
import json
import ssl
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

import aiohttp
from pydantic import ValidationError

from certs.tls import certificate_lifetime_problem
from ii_api.peers.doors import ClientContext
from ii_api.wire.errors import describe_validation_error
from ii_api.wire.models import (
    CapabilitiesMessage,
    SubscriptionPollResponse,
    SubscriptionRequest,
    SubscriptionResponse,
    WireModel,
)

__all__ = ["IIClient", "IIClientError", "Peer", "join_path"]

M = TypeVar("M", bound=WireModel)


class Peer(Protocol):
    """A neighbour to call: its name (= certificate CN), address and control-channel port (read only)."""

    @property
    def name(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class IIClientError(Exception):
    """A request to a neighbour failed; ``status`` is the HTTP status if it answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def join_path(base_path: str, path: str) -> str:
    """The request path for ``path``: an absolute path or URL is used as is (its path part);
    anything else is relative to the II base path."""
    if path.startswith(("https://", "http://")):
        parts = urlsplit(path)
        return parts.path + (f"?{parts.query}" if parts.query else "")
    if path.startswith("/"):
        return path
    return f"{base_path.rstrip('/')}/{path}"


def _same_capabilities(last: WireModel, body: WireModel) -> bool:
    """Whether two capabilities messages hold the very same capability objects (kept alive by the
    cache, so identity means equality) and the same other properties."""
    if not (isinstance(last, CapabilitiesMessage) and isinstance(body, CapabilitiesMessage)):
        return False
    return ((last.name, last.version, last.model_extra) == (body.name, body.version, body.model_extra)
            and len(last.capabilities) == len(body.capabilities)
            and all(a is b for a, b in zip(last.capabilities, body.capabilities)))


def _encode(body: WireModel) -> bytes:
    if isinstance(body, CapabilitiesMessage):
        return body.json_bytes()
    return json.dumps(body.to_json(), separators=(",", ":")).encode()


class IIClient:
    """Calls neighbours' II endpoints. One connection pool, reused across requests."""

    def __init__(self, context: ClientContext, *, base_path: str = "",
                 timeout_s: float = 10.0, max_certificate_days: int | None = None) -> None:
        self._context = context
        self._max_days = max_certificate_days  #: IP_051: neighbours' certificates valid longer are refused
        self._base = base_path.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._last: tuple[WireModel, bytes] | None = None  #: the last capabilities message sent, encoded

    async def _encoded(self, body: WireModel) -> bytes:
        """``body`` as JSON bytes, encoded off the loop; a capabilities message made of the same
        capability objects as the last one is not encoded again (pushes retried every second to a
        neighbour that is down encoded thousands of capabilities each time)."""
        if self._last is not None and _same_capabilities(self._last[0], body):
            return self._last[1]
        payload = await asyncio.to_thread(_encode, body)
        if isinstance(body, CapabilitiesMessage):
            self._last = (body, payload)
        return payload

    def _url(self, peer: Peer, path: str) -> str:
        host = f"[{peer.host}]" if ":" in peer.host else peer.host
        return f"https://{host}:{peer.port}{join_path(self._base, path)}"

    async def _request(self, method: str, peer: Peer, path: str, body: WireModel | None,
                       model: type[M] | None) -> M | None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        url = self._url(peer, path)
        try:
            # Encoding thousands of capabilities takes a good part of a second: off the loop.
            payload = None if body is None else await self._encoded(body)
            headers = None if payload is None else {"Content-Type": "application/json"}
            async with self._session.request(method, url, data=payload, headers=headers,
                                             ssl=self._context(), server_hostname=peer.name) as response:
                self._check_lifetime(method, url, response)
                data = await response.read()
                if not 200 <= response.status < 300:
                    raise IIClientError(f"{method} {url}: HTTP {response.status}: {_error_text(data)}",
                                        response.status)
                if model is None:
                    return None
                try:
                    return await asyncio.to_thread(model.model_validate_json, data)
                except ValidationError as exc:
                    message, _ = describe_validation_error(exc)
                    raise IIClientError(f"{method} {url}: unexpected answer: {message}", response.status) from None
        except (aiohttp.ClientError, ssl.SSLError, OSError, asyncio.TimeoutError) as exc:
            raise IIClientError(f"{method} {url}: {type(exc).__name__}: {exc}") from None

    def _check_lifetime(self, method: str, url: str, response: aiohttp.ClientResponse) -> None:
        """IP_051 with ``tls.max_certificate_days``: a neighbour whose server certificate is valid for
        longer is refused (its answer is not read, the connection not reused)."""
        if self._max_days is None:
            return
        # A short answer's connection is released to the pool before ``request`` returns
        # (response.connection is None then); the response keeps the connection's protocol.
        connection = response.connection or getattr(response, "_protocol", None)
        transport = connection.transport if connection is not None else None
        problem = certificate_lifetime_problem(transport.get_extra_info("ssl_object") if transport else None,
                                               self._max_days)
        if problem is not None:
            response.close()
            raise IIClientError(f"{method} {url}: neighbour certificate refused: {problem}")

    async def post_capabilities(self, peer: Peer, message: CapabilitiesMessage) -> CapabilitiesMessage:
        """IP_105/093: POST <base>/capabilities; the answer holds the neighbour's (IP_094)."""
        result = await self._request("POST", peer, f"{self._base}/capabilities", message, CapabilitiesMessage)
        assert result is not None
        return result

    async def post_subscriptions(self, peer: Peer, request: SubscriptionRequest) -> SubscriptionResponse:
        """IP_106/096: POST <base>/subscriptions; answered 202 with ids, paths and statuses (IP_097)."""
        result = await self._request("POST", peer, f"{self._base}/subscriptions", request, SubscriptionResponse)
        assert result is not None
        return result

    async def poll_subscription(self, peer: Peer, path: str) -> SubscriptionPollResponse:
        """IP_110/108: GET the subscription's path."""
        result = await self._request("GET", peer, path, None, SubscriptionPollResponse)
        assert result is not None
        return result

    async def list_subscriptions(self, peer: Peer, own_name: str) -> SubscriptionResponse:
        """IP_107: GET <base>/<our name>/subscriptions."""
        result = await self._request("GET", peer, f"{self._base}/{own_name}/subscriptions", None, SubscriptionResponse)
        assert result is not None
        return result

    async def delete_subscription(self, peer: Peer, path: str) -> None:
        """IP_107: DELETE the subscription's path."""
        await self._request("DELETE", peer, path, None, None)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _error_text(data: bytes) -> str:
    try:
        parsed = json.loads(data)
    except ValueError:
        return data[:200].decode("utf-8", "replace") or "(no body)"
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        return parsed["error"]
    return data[:200].decode("utf-8", "replace")
