"""The HTTPS server of the Improved Interface and the local actor API (aiohttp, IP_069/090).

One listener, TLS 1.3 only, client certificate required (:func:`certs.tls.server_context` through
:class:`certs.tls.ReloadingTls`); the caller's identity is its certificate's Common Name.

Interchanges (their CN is the target of a discovered SRV record, IP_126; the ``name`` in their
JSON must be that CN too):

    POST   <base>/capabilities                 IP_105/094   CapabilitiesMessage -> ours
    POST   <base>/subscriptions                IP_106/097   SubscriptionRequest -> 202 SubscriptionResponse
    GET    <base>/{name}/subscriptions         IP_107       their subscriptions (name = their CN)
    GET    <base>/{name}/subscriptions/{id}    IP_108/110   SubscriptionPollResponse
    DELETE <base>/{name}/subscriptions/{id}    IP_107       204

C-ITS actors (IP_068/077; everything under ``/{actorCommonName}/``, which must be the CN):
``capabilities``, ``deliveries`` and ``subscriptions`` (POST and GET; GET and DELETE by id) and
``network/capabilities?selector=``. ``GET/DELETE /{name}/subscriptions[/{id}]`` serve both: an
interchange gets its II subscriptions, an actor its local ones. ``GET <base>/whoami`` answers any
certificate of the trust chain with the identity the node sees: its CN, whether it is a neighbour
or an actor, and what the actor policy lets it do.

``GET <base>/openapi.json`` describes every endpoint. Every error is JSON
``{"error": "...", "field"?: "..."}``: 400 for malformed JSON or wrong types (naming the field),
403, 404, 405, 409, 413, 500.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from certs.errors import PeerIdentityError
from certs.tls import peer_common_name
from ii_api.decisions.actor_policy import ActorPolicy, ActorRule, Refusal
from ii_api.http.doors import IIOperations
from ii_api.http.openapi import Operation, openapi_document
from ii_api.http.request_clock import RequestClock
from ii_api.http.tls_site import TlsSite
from ii_api.settings.config import RequestLimits
from ii_api.wire.errors import Forbidden, IIError, NotFound, TooLarge, validation_error_body
from ii_api.wire.models import (
    ActorPermissions,
    CapabilitiesMessage,
    DeliveriesRequest,
    DeliveriesResponse,
    Delivery,
    LocalCapabilitiesRequest,
    LocalCapabilitiesResponse,
    LocalCapability,
    LocalSubscription,
    LocalSubscriptionsRequest,
    LocalSubscriptionsResponse,
    NetworkCapabilitiesResponse,
    SubscriptionPollResponse,
    SubscriptionRequest,
    SubscriptionResponse,
    WhoAmIResponse,
    WireModel,
)
from interchange.broker.handshake_queue import HandshakeQueue
from interchange.broker.tls_stream import ContextSource

log = logging.getLogger(__name__)

__all__ = ["IIServer", "OPERATIONS", "build_app"]

II, ACTOR, META = "interchange (II)", "local actor API", "meta"
_DUAL = ("For an interchange (its CN is a discovered SRV target): its II subscriptions here (IP_107/108). "
         "For a C-ITS actor: its local subscriptions.")

OPERATIONS: tuple[Operation, ...] = (
    Operation("POST", "/capabilities", "post_capabilities", "Capability exchange (IP_105, IP_093/094)", II,
              body=CapabilitiesMessage, response=(CapabilitiesMessage,),
              description="Replaces the sender's capabilities; answers with ours. `name` must be the CN."),
    Operation("POST", "/subscriptions", "post_subscriptions", "Subscription request (IP_106, IP_096/097)", II,
              status=202, body=SubscriptionRequest, response=(SubscriptionResponse,),
              description="Each subscription gets an id, a path and a status: CREATED (with endpoints), "
                          "NOT_VALID, ILLEGAL or NO_OVERLAP (with errorMessage)."),
    Operation("GET", "/{name}/subscriptions", "list_subscriptions", "List subscriptions (IP_107)", II,
              response=(SubscriptionResponse, LocalSubscriptionsResponse), description=_DUAL),
    Operation("GET", "/{name}/subscriptions/{id}", "get_subscription", "Subscription status poll (IP_108/110)", II,
              response=(SubscriptionPollResponse, LocalSubscription), errors=(400, 403, 404), description=_DUAL),
    Operation("DELETE", "/{name}/subscriptions/{id}", "delete_subscription", "Terminate a subscription (IP_107)",
              II, status=204, errors=(403, 404), description=_DUAL),
    Operation("POST", "/{name}/capabilities", "post_actor_capabilities", "Register capabilities (IP_077)", ACTOR,
              body=LocalCapabilitiesRequest, response=(LocalCapabilitiesResponse,), errors=(400, 403, 409),
              extra_responses={409: "a publicationId is already in use in the network"}),
    Operation("GET", "/{name}/capabilities", "list_actor_capabilities", "List the actor's capabilities", ACTOR,
              response=(LocalCapabilitiesResponse,), errors=(403,)),
    Operation("GET", "/{name}/capabilities/{id}", "get_actor_capability", "One capability", ACTOR,
              response=(LocalCapability,), errors=(403, 404)),
    Operation("DELETE", "/{name}/capabilities/{id}", "delete_actor_capability", "Withdraw a capability", ACTOR,
              status=204, errors=(403, 404)),
    Operation("POST", "/{name}/deliveries", "post_deliveries", "Ask where to publish", ACTOR,
              body=DeliveriesRequest, response=(DeliveriesResponse,),
              description="CREATED with an endpoint {host, port, target} when the selector covers some of the "
                          "actor's capabilities (the target accepts only messages fitting them), NO_OVERLAP "
                          "otherwise, NOT_VALID with errorMessage for an invalid selector."),
    Operation("GET", "/{name}/deliveries", "list_deliveries", "List the actor's deliveries", ACTOR,
              response=(DeliveriesResponse,), errors=(403,)),
    Operation("GET", "/{name}/deliveries/{id}", "get_delivery", "One delivery", ACTOR,
              response=(Delivery,), errors=(403, 404)),
    Operation("DELETE", "/{name}/deliveries/{id}", "delete_delivery", "Remove a delivery", ACTOR,
              status=204, errors=(403, 404)),
    Operation("POST", "/{name}/subscriptions", "post_local_subscriptions", "Subscribe (IP_079/081)", ACTOR,
              body=LocalSubscriptionsRequest, response=(LocalSubscriptionsResponse,),
              description="CREATED with a local endpoint {host, port, source}; with consumerCommonName = the "
                          "actor's CN (a redirect) the endpoints of the neighbours' sources are added as they "
                          "come. NOT_VALID / ILLEGAL with errorMessage."),
    Operation("GET", "/{name}/network/capabilities", "network_capabilities",
              "Capabilities anywhere in the federation matching a selector", ACTOR,
              response=(NetworkCapabilitiesResponse,), query=(("selector", "JMS selector (optional)"),)),
    Operation("GET", "/whoami", "whoami", "The identity this node sees in the client certificate", ACTOR,
              response=(WhoAmIResponse,), errors=(403,),
              description="Its common name, whether it is an interchange (a discovered neighbour) or a local "
                          "actor, whether it may use its API here, and what the actor policy lets an actor "
                          "publish and subscribe to (IP_068)."),
    Operation("GET", "/openapi.json", "openapi", "This document", META, errors=()),
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SERVER_KEY: web.AppKey["IIServer"] = web.AppKey("ii_server")
SHUTDOWN_GRACE_S = 1.0  #: how long a stopping node lets running requests finish
#: An idle keep-alive connection is closed after this (aiohttp's default is an hour; clients such as
#: aiohttp's give theirs up after 15 s, so they never reuse one the server is closing)
KEEPALIVE_S = 75.0


def _encode(model: WireModel) -> bytes:
    if isinstance(model, CapabilitiesMessage):
        return model.json_bytes()  # each capability's text encoded once
    return json.dumps(model.to_json(), separators=(",", ":")).encode()


async def _json(model: WireModel, status: int = 200) -> web.Response:
    """The JSON answer, encoded off the event loop (thousands of capabilities take a good part of a
    second to encode)."""
    body = await asyncio.to_thread(_encode, model)
    return web.Response(body=body, status=status, content_type="application/json")


def _error(status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return web.json_response(body, status=status, headers=headers)


class _BadBody(Exception):
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body


def _clock(request: web.Request) -> RequestClock | None:
    """The connection's request clock (:mod:`ii_api.http.request_clock`), when it has one (over TlsSite)."""
    transport = request.transport
    clock = transport.get_extra_info("request_clock") if transport is not None else None
    return clock if isinstance(clock, RequestClock) else None


@web.middleware
async def _request_clock(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tell the connection's clock the request's progress: its headers are in (a body still to come keeps
    the deadline that started when the head arrived; one already in has none), and when it is answered
    (the next request's headers may start)."""
    clock = _clock(request)
    if clock is None:
        return await handler(request)
    loop = asyncio.get_running_loop()
    clock.head_complete(loop.time(), request.body_exists and not request.content.is_eof())
    try:
        return await handler(request)
    finally:
        clock.response_done(loop.time())


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error answer is a JSON body."""
    try:
        return await handler(request)
    except IIError as exc:
        return _error(exc.status, exc.message, exc.field)
    except _BadBody as exc:
        return web.json_response(exc.body, status=400)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return _error(exc.status, exc.reason or "error", headers=headers)
    except ConnectionResetError:  # the client is gone (it hung up, or its request timed out): nobody to answer
        return _error(400, "connection lost")
    except Exception:  # the client gets JSON, the log the traceback
        log.exception("ii: %s %s failed", request.method, request.path)
        return _error(500, "internal error")


class IIServer:
    """The request handlers: identity checks, body parsing, one service call each."""

    def __init__(self, service: IIOperations, *, limits: RequestLimits = RequestLimits()) -> None:
        self.service = service
        self.limits = limits
        self._openapi: dict[str, Any] | None = None

    # ---- identity
    @staticmethod
    def peer_cn(request: web.Request) -> str:
        """The verified client certificate's Common Name (IP_050/069)."""
        transport = request.transport
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        try:
            return peer_common_name(ssl_object)
        except PeerIdentityError as exc:
            raise Forbidden(str(exc)) from None

    def _actor(self, request: web.Request) -> str:
        """The local actor calling: the path name must be its CN; interchanges are refused, and
        actors the actor policy does not name (IP_068)."""
        cn = self.peer_cn(request)
        name = request.match_info["name"]
        if name != cn:
            raise Forbidden(f"the path names {name!r} but the client certificate is {cn!r}")
        if self.service.is_neighbour(cn):
            raise Forbidden(f"{cn!r} is an interchange: use the II endpoints")
        self._authorize(request, cn, lambda policy: policy.check_actor(cn))
        return cn

    def _authorize(self, request: web.Request, cn: str, check: Callable[[ActorPolicy], Refusal | None]) -> None:
        """403 (and a log entry) when the actor policy refuses; no policy configured: allowed."""
        policy = self.service.config.actors
        refusal = check(policy) if policy is not None else None
        if refusal is not None:
            self.service.event("warning", "ii_actor_refused", {"actor": cn, "operation": f"{request.method} "
                               f"{request.path}", "reason": refusal.reason, "field": refusal.field})
            raise Forbidden(refusal.reason, refusal.field)

    def _caller(self, request: web.Request) -> tuple[str, bool]:
        """(CN, is an interchange) for the endpoints serving both; the path name must be the CN."""
        cn = self.peer_cn(request)
        name = request.match_info["name"]
        interchange = self.service.is_neighbour(cn)
        same = name.casefold() == cn.casefold() if interchange else name == cn
        if not same:
            raise Forbidden(f"the path names {name!r} but the client certificate is {cn!r}; "
                            "only the owner may see or delete a subscription")
        return cn, interchange

    @staticmethod
    def _id(request: web.Request) -> int:
        text = request.match_info["id"]
        if not (text.isascii() and text.isdigit()) or len(text) > 18:  # isdigit alone takes superscripts
            raise NotFound(f"no item {text!r}")
        return int(text)

    async def _body(self, request: web.Request, model: type[Any], *, max_bytes: int | None = None) -> Any:
        """The body as ``model``: 413 beyond ``max_bytes`` (the limit of the operation; before the
        body is read when Content-Length says so), 400 naming the field when invalid. Parsed off
        the event loop."""
        limit = self.limits.body_bytes if max_bytes is None else max_bytes
        if request.content_length is not None and request.content_length > limit:
            raise TooLarge(f"request body of {request.content_length} bytes: this operation accepts at most {limit}")
        data = await request.read()
        clock = _clock(request)
        if clock is not None:
            clock.body_complete(asyncio.get_running_loop().time())
        if len(data) > limit:
            raise TooLarge(f"request body of {len(data)} bytes: this operation accepts at most {limit}")
        try:
            return await asyncio.to_thread(model.model_validate_json, data)
        except ValidationError as exc:
            raise _BadBody(validation_error_body(exc)) from None

    @staticmethod
    def _count(items: list[Any], field: str, most: int) -> None:
        """413 for a request with more than ``most`` items."""
        if len(items) > most:
            raise TooLarge(f"{len(items)} {field} in one request: this interchange accepts at most {most}", field)

    async def _capabilities_body(self, request: web.Request, model: type[Any]) -> Any:
        body = await self._body(request, model, max_bytes=self.limits.capabilities_body_bytes)
        self._count(body.capabilities, "capabilities", self.limits.capabilities_per_request)
        return body

    @staticmethod
    def _check_body_name(name: str | None, cn: str) -> None:
        if name is not None and name != cn:
            raise Forbidden(f"the name in the body ({name!r}) is not the certificate's common name ({cn!r})", "name")

    # ---- interchanges (II)
    async def post_capabilities(self, request: web.Request) -> web.Response:
        cn = self.peer_cn(request)
        self.service.require_neighbour(cn)  # IP_126 before reading the body
        message = await self._capabilities_body(request, CapabilitiesMessage)
        return await _json(await self.service.receive_capabilities(cn, message))

    async def post_subscriptions(self, request: web.Request) -> web.Response:
        cn = self.peer_cn(request)
        self.service.require_neighbour(cn)
        body = await self._body(request, SubscriptionRequest)
        self._count(body.subscriptions, "subscriptions", self.limits.subscriptions_per_request)
        return await _json(await self.service.incoming.receive_subscriptions(cn, body), status=202)

    async def list_subscriptions(self, request: web.Request) -> web.Response:
        cn, interchange = self._caller(request)
        if interchange:
            return await _json(await self.service.incoming.list_incoming(cn))
        return await _json(await self.service.actor_subscriptions.list_local_subscriptions(cn))

    async def get_subscription(self, request: web.Request) -> web.Response:
        cn, interchange = self._caller(request)
        if interchange:
            return await _json(await self.service.incoming.get_incoming(cn, self._id(request)))
        return await _json(await self.service.actor_subscriptions.get_local_subscription(cn, self._id(request)))

    async def delete_subscription(self, request: web.Request) -> web.Response:
        cn, interchange = self._caller(request)
        if interchange:
            await self.service.incoming.delete_incoming(cn, self._id(request))
        else:
            await self.service.actor_subscriptions.delete_local_subscription(cn, self._id(request))
        return web.Response(status=204)

    # ---- local actors
    async def post_actor_capabilities(self, request: web.Request) -> web.Response:
        actor = self._actor(request)
        body = await self._capabilities_body(request, LocalCapabilitiesRequest)
        self._check_body_name(body.name, actor)
        self._authorize(request, actor, lambda policy: policy.check_capabilities(actor, body.capabilities))
        return await _json(await self.service.actor_capabilities.add_capabilities(actor, body))

    async def list_actor_capabilities(self, request: web.Request) -> web.Response:
        return await _json(await self.service.actor_capabilities.list_capabilities(self._actor(request)))

    async def get_actor_capability(self, request: web.Request) -> web.Response:
        return await _json(await self.service.actor_capabilities.get_capability(self._actor(request), self._id(request)))

    async def delete_actor_capability(self, request: web.Request) -> web.Response:
        await self.service.actor_capabilities.delete_capability(self._actor(request), self._id(request))
        return web.Response(status=204)

    async def post_deliveries(self, request: web.Request) -> web.Response:
        actor = self._actor(request)
        body = await self._body(request, DeliveriesRequest)
        self._check_body_name(body.name, actor)
        self._count(body.deliveries, "deliveries", self.limits.subscriptions_per_request)
        self._authorize(request, actor, lambda policy: policy.check_publisher(actor))
        return await _json(await self.service.deliveries.add_deliveries(actor, body))

    async def list_deliveries(self, request: web.Request) -> web.Response:
        return await _json(await self.service.deliveries.list_deliveries(self._actor(request)))

    async def get_delivery(self, request: web.Request) -> web.Response:
        return await _json(await self.service.deliveries.get_delivery(self._actor(request), self._id(request)))

    async def delete_delivery(self, request: web.Request) -> web.Response:
        await self.service.deliveries.delete_delivery(self._actor(request), self._id(request))
        return web.Response(status=204)

    async def post_local_subscriptions(self, request: web.Request) -> web.Response:
        actor = self._actor(request)
        body = await self._body(request, LocalSubscriptionsRequest)
        self._check_body_name(body.name, actor)
        self._count(body.subscriptions, "subscriptions", self.limits.subscriptions_per_request)
        selectors = [item.selector for item in body.subscriptions]
        self._authorize(request, actor, lambda policy: policy.check_subscriptions(actor, selectors))
        return await _json(await self.service.actor_subscriptions.add_local_subscriptions(actor, body))

    async def network_capabilities(self, request: web.Request) -> web.Response:
        actor = self._actor(request)
        return await _json(await self.service.network_capabilities(actor, request.query.get("selector")))

    async def whoami(self, request: web.Request) -> web.Response:
        """The identity the node sees: any certificate of the trust chain may ask."""
        cn = self.peer_cn(request)
        service, policy = self.service, self.service.config.actors
        configured = policy is not None
        if service.is_neighbour(cn):
            return await _json(WhoAmIResponse(name=cn, interchange=service.name, role="interchange", allowed=True,
                                              policyConfigured=configured,
                                              reason="a discovered interchange: the II endpoints are yours, the "
                                                     "local actor API is not"))
        rule = policy.rule(cn) if policy is not None else ActorRule(
            cn=cn, publish_message_types=("*",), publisher_ids=("*",), subscribe_message_types=("*",))
        if rule is None:
            refusal = policy.check_actor(cn) if policy is not None else None
            return await _json(WhoAmIResponse(name=cn, interchange=service.name, role="actor", allowed=False,
                                              policyConfigured=configured,
                                              reason=refusal.reason if refusal is not None else None))
        permissions = ActorPermissions(publishMessageTypes=list(rule.publish_message_types),
                                       publisherIds=list(rule.publisher_ids),
                                       subscribeMessageTypes=list(rule.subscribe_message_types))
        return await _json(WhoAmIResponse(name=cn, interchange=service.name, role="actor", allowed=True,
                                          policyConfigured=configured, path=f"{service.base}/{cn}",
                                          permissions=permissions))

    # ---- meta
    async def openapi(self, request: web.Request) -> web.Response:
        self.peer_cn(request)
        if self._openapi is None:
            self._openapi = openapi_document(
                OPERATIONS, base_path=self.service.base, title="C-Roads interchange: Improved Interface and local "
                "actor API", version="1.2",
                description="Capabilities version 2.0, subscriptions version 1.2 (C-Roads IP Based Interface "
                            "Profile, chapter 4, appendices C and D). Mutual TLS 1.3.")
        return web.json_response(self._openapi)


def build_app(service: IIOperations, *, limits: RequestLimits = RequestLimits()) -> web.Application:
    """The aiohttp application: every route of :data:`OPERATIONS` under the service's base path."""
    server = IIServer(service, limits=limits)
    app = web.Application(middlewares=[_request_clock, _errors],
                          client_max_size=max(limits.capabilities_body_bytes, limits.body_bytes))
    for operation in OPERATIONS:
        app.router.add_route(operation.method, f"{service.base}{operation.path}", getattr(server, operation.handler))
    app[SERVER_KEY] = server
    return app


async def start_server(service: IIOperations, host: str, port: int, context: ContextSource, *,
                       limits: RequestLimits = RequestLimits(),
                       max_certificate_days: int | None = None,
                       handshakes: HandshakeQueue | None = None) -> tuple[web.AppRunner, int]:
    """Listen on ``host:port`` (0: any free port) with ``context``; return the runner and the port.
    TLS is the BI's (:mod:`ii_api.http.tls_site`): refused handshakes get their alert and a
    ``tls_refused`` record; client certificates valid for over ``max_certificate_days`` are refused.
    Handshake steps run a bounded amount per loop turn in ``handshakes`` (the BI server's, in a node).

    Requests still running when the node stops are cancelled after ``SHUTDOWN_GRACE_S`` (aiohttp
    waits 60 s by default, which kept SIGTERM from stopping the node)."""
    runner = web.AppRunner(build_app(service, limits=limits), access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S,
                           keepalive_timeout=KEEPALIVE_S)
    await runner.setup()
    site = TlsSite(runner, host, port, context, event=service.event, max_certificate_days=max_certificate_days,
                   handshake_timeout_s=limits.handshake_timeout_s, header_timeout_s=limits.header_timeout_s,
                   body_timeout_s=limits.body_timeout_s, handshakes=handshakes)
    await site.start()
    bound = runner.addresses[0][1]  # (host, port, ...) of the socket the site listens on
    return runner, int(bound)
