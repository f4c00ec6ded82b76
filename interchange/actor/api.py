"""The local actor API of one interchange, over HTTPS with the actor's certificate (IP_068/077/079).

Mutual TLS 1.3 (:meth:`ActorSettings.ssl_context`); the node's certificate must name the node
(``server_hostname`` = the node's name, IP_125) whatever address the II URL or DNS (IP_086: the
SRV record whose target is the node) gives. Bodies in and out are the II's own pydantic models
(:mod:`ii_api.wire.models`). Every failure is an :class:`ActorError` saying what to do: the node's
status and its JSON ``error`` (and ``field``), or why it could not be reached.

Waiting for a status: :meth:`ActorApi.wait_subscription` / :meth:`ActorApi.wait_delivery` poll
until the status is final (CREATED, or a refusal with its reason) and report each change.
"""
from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
from cryptography import x509
from pydantic import ValidationError

from certs.tls import peer_common_name
from ii_api.peers.discovery import Discovery, DiscoveryConfig
from ii_api.wire.models import (
    Capability,
    DeliveriesRequest,
    DeliveriesResponse,
    Delivery,
    DeliveryRequestItem,
    LocalCapabilitiesRequest,
    LocalCapabilitiesResponse,
    LocalCapability,
    LocalSubscription,
    LocalSubscriptionsRequest,
    LocalSubscriptionsResponse,
    NetworkCapabilitiesResponse,
    SubscriptionRequestItem,
    WhoAmIResponse,
    WireModel,
)
from interchange.actor.errors import ActorError
from interchange.actor.settings import ActorSettings

__all__ = ["FINAL_STATUSES", "ActorApi", "own_common_name"]

M = TypeVar("M", bound=WireModel)
#: Statuses after which waiting ends: CREATED, or the node's refusal (with errorMessage).
FINAL_STATUSES = frozenset({"CREATED", "NOT_VALID", "ILLEGAL", "NO_OVERLAP", "ERROR"})
#: Answers larger than this are parsed in a thread (~0.5 s for 6,000 capabilities).
_PARSE_OFF_LOOP_BYTES = 256 * 1024
_HINTS = {
    400: "the node refused the request body: fix the field it names",
    403: "this certificate may not do that here: `interchange actor whoami` shows what the node lets it do; "
         "the node's operator grants more ([ii.actors])",
    404: "no such item: list them first",
    409: "a publicationId must be unique in the whole federation: choose another",
    413: "too much in one request: send fewer items",
}


def own_common_name(settings: ActorSettings) -> str:
    """The CN of the actor's own certificate (the first of ``cert_chain``): the name the node sees."""
    try:
        return peer_common_name(x509.load_pem_x509_certificate(settings.cert_chain.read_bytes()))
    except OSError as exc:
        raise ActorError(f"cannot read the certificate {settings.cert_chain}: {exc.strerror or exc}",
                         "check cert_chain in the settings") from None
    except ValueError as exc:
        raise ActorError(f"{settings.cert_chain}: not a PEM certificate with one common name ({exc})") from None


def _error_text(data: bytes) -> tuple[str, str | None]:
    try:
        parsed = json.loads(data)
    except ValueError:
        return data[:200].decode("utf-8", "replace") or "(no body)", None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
        field = parsed.get("field")
        return parsed["error"], field if isinstance(field, str) else None
    return data[:200].decode("utf-8", "replace"), None


class ActorApi:
    """One actor's client of one interchange's local actor API (``<ii>/<actor CN>/...``)."""

    def __init__(self, settings: ActorSettings) -> None:
        self.settings = settings
        self.cn = own_common_name(settings)
        self._context: ssl.SSLContext | None = None
        self._base: str | None = settings.ii_url
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ActorApi:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ---- where the II is
    async def base_url(self) -> str:
        """The II's URL: configured, or found in DNS (the SRV record whose target is the node)."""
        if self._base is None:
            self._base = await self._discover()
        return self._base

    async def _discover(self) -> str:
        discovery = self.settings.discovery
        assert discovery is not None  # the settings hold one way to the II
        config = DiscoveryConfig(dns_server=discovery.dns_server, dns_port=discovery.dns_port,
                                 domains=(discovery.domain,), timeout_s=min(self.settings.timeout_s, 60.0))
        result = await Discovery(config).run_once()
        for neighbour in result.neighbours:
            if neighbour.name == self.settings.node.lower():
                host = f"[{neighbour.host}]" if ":" in neighbour.host else neighbour.host
                return f"https://{host}:{neighbour.port}{discovery.base_path.rstrip('/')}"
        found = ", ".join(n.name for n in result.neighbours) or "none"
        errors = f" ({'; '.join(result.errors)})" if result.errors else ""
        raise ActorError(f"DNS names no interchange {self.settings.node} in {discovery.domain} "
                         f"(found: {found}){errors}", "check node and [discovery] in the settings, or give ii_url")

    # ---- requests
    async def _request(self, method: str, path: str, model: type[M] | None, body: WireModel | None = None,
                       params: dict[str, str] | None = None) -> M | None:
        if self._context is None:
            self._context = self.settings.ssl_context()
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.settings.timeout_s))
        url = f"{await self.base_url()}{path}"
        kwargs: dict[str, Any] = {"ssl": self._context, "server_hostname": self.settings.node, "params": params}
        if body is not None:
            kwargs["json"] = body.to_json()
        try:
            async with self._session.request(method, url, **kwargs) as response:
                data = await response.read()
                status = response.status
        except aiohttp.ClientConnectorCertificateError as exc:
            raise ActorError(f"{method} {url}: the node's certificate was refused: {exc.certificate_error}",
                             f"it must name {self.settings.node} and chain to trust_bundle") from None
        except (aiohttp.ClientSSLError, ssl.SSLError) as exc:
            raise ActorError(f"{method} {url}: TLS handshake failed: {exc}",
                             "your certificate must be of the node's trust chain, valid and not revoked") from None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise ActorError(f"{method} {url}: cannot reach the node: {type(exc).__name__}: {exc}".rstrip(": "),
                             "is the node running? check ii_url (or [discovery]) in the settings") from None
        if status >= 300:
            error, field = _error_text(data)
            raise ActorError(f"{method} {path}: HTTP {status}: {error}", _HINTS.get(status), status=status, field=field)
        if model is None:
            return None
        try:
            if len(data) > _PARSE_OFF_LOOP_BYTES:  # thousands of capabilities: not on the event loop
                return await asyncio.to_thread(model.model_validate_json, data)
            return model.model_validate_json(data)
        except ValidationError as exc:
            raise ActorError(f"{method} {path}: the node's answer is not what the local actor API says: "
                             f"{exc.errors()[0]['msg']}") from None

    async def _get(self, path: str, model: type[M], params: dict[str, str] | None = None) -> M:
        answer = await self._request("GET", path, model, params=params)
        assert answer is not None
        return answer

    async def _post(self, path: str, model: type[M], body: WireModel) -> M:
        answer = await self._request("POST", path, model, body)
        assert answer is not None
        return answer

    def _mine(self, kind: str, item_id: str | None = None) -> str:
        return f"/{self.cn}/{kind}" + (f"/{item_id}" if item_id is not None else "")

    # ---- identity
    async def whoami(self) -> WhoAmIResponse:
        """The identity the node sees, and what its actor policy lets it do."""
        return await self._get("/whoami", WhoAmIResponse)

    # ---- capabilities
    async def capabilities(self) -> list[LocalCapability]:
        return (await self._get(self._mine("capabilities"), LocalCapabilitiesResponse)).capabilities

    async def add_capabilities(self, capabilities: list[Capability]) -> list[LocalCapability]:
        body = LocalCapabilitiesRequest(name=self.cn, capabilities=capabilities)
        return (await self._post(self._mine("capabilities"), LocalCapabilitiesResponse, body)).capabilities

    async def delete_capability(self, capability_id: str) -> None:
        await self._request("DELETE", self._mine("capabilities", capability_id), None)

    async def network_capabilities(self, selector: str | None = None) -> list[Capability]:
        """Capabilities anywhere in the federation (those ``selector`` matches, by the node)."""
        params = {"selector": selector} if selector else None
        return (await self._get(self._mine("network/capabilities"), NetworkCapabilitiesResponse, params)).capabilities

    # ---- deliveries
    async def deliveries(self) -> list[Delivery]:
        return (await self._get(self._mine("deliveries"), DeliveriesResponse)).deliveries

    async def delivery(self, delivery_id: str) -> Delivery:
        return await self._get(self._mine("deliveries", delivery_id), Delivery)

    async def create_delivery(self, selector: str) -> Delivery:
        body = DeliveriesRequest(name=self.cn, deliveries=[DeliveryRequestItem(selector=selector)])
        return (await self._post(self._mine("deliveries"), DeliveriesResponse, body)).deliveries[0]

    async def delete_delivery(self, delivery_id: str) -> None:
        await self._request("DELETE", self._mine("deliveries", delivery_id), None)

    # ---- subscriptions
    async def subscriptions(self) -> list[LocalSubscription]:
        return (await self._get(self._mine("subscriptions"), LocalSubscriptionsResponse)).subscriptions

    async def subscription(self, subscription_id: str) -> LocalSubscription:
        return await self._get(self._mine("subscriptions", subscription_id), LocalSubscription)

    async def create_subscription(self, selector: str, *, redirect: bool = False) -> LocalSubscription:
        return (await self.create_subscriptions([selector], redirect=redirect))[0]

    async def create_subscriptions(self, selectors: list[str], *, redirect: bool = False) -> list[LocalSubscription]:
        """Several subscriptions in one request (at most the node's ``subscriptions_per_request``:
        413 beyond), in the order of ``selectors``."""
        items = [SubscriptionRequestItem(selector=selector, consumerCommonName=self.cn if redirect else None)
                 for selector in selectors]
        body = LocalSubscriptionsRequest(name=self.cn, subscriptions=items)
        return (await self._post(self._mine("subscriptions"), LocalSubscriptionsResponse, body)).subscriptions

    async def delete_subscription(self, subscription_id: str) -> None:
        await self._request("DELETE", self._mine("subscriptions", subscription_id), None)

    # ---- waiting
    async def wait_subscription(self, subscription: LocalSubscription, *, timeout_s: float = 30.0,
                                on_change: Callable[[LocalSubscription], None] | None = None) -> LocalSubscription:
        """Poll until the status is final (:data:`FINAL_STATUSES`); each new status is reported."""
        return await _wait(subscription, lambda: self.subscription(subscription.id), timeout_s, on_change)

    async def wait_delivery(self, delivery: Delivery, *, timeout_s: float = 30.0,
                            on_change: Callable[[Delivery], None] | None = None) -> Delivery:
        return await _wait(delivery, lambda: self.delivery(delivery.id), timeout_s, on_change)


S = TypeVar("S", LocalSubscription, Delivery)


async def _wait(item: S, poll: Callable[[], Any], timeout_s: float, on_change: Callable[[S], None] | None) -> S:
    deadline = time.monotonic() + timeout_s
    if on_change is not None:
        on_change(item)
    delay = 0.1
    while item.status.value not in FINAL_STATUSES:
        if time.monotonic() > deadline:
            raise ActorError(f"{type(item).__name__.lower()} {item.id} still {item.status.value} after {timeout_s:g} s",
                             "the node may be waiting for a neighbour: list it again later")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
        latest: S = await poll()
        if latest.status != item.status and on_change is not None:
            on_change(latest)
        item = latest
    return item
