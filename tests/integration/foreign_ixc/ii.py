"""The foreign interchange's Improved Interface: HTTPS with mutual TLS 1.3 (chapter 4.3).

- IP_126: a request whose client certificate CN is not a target of the ``_ixc._tcp`` SRV records
  of the trusted domain (looked up with dnspython at each request) is answered 403.
- IP_105/093/094: ``POST <base>/capabilities`` is answered 200 with this interchange's own
  capabilities: ``{"version": "2.0", "name": <its CN>, "capabilities": [...]}`` (Table 9, appendix C).
- IP_106/097: ``POST <base>/subscriptions`` (Table 13) is answered 202 with one entry per requested
  subscription: id, selector, path, status REQUESTED (Table 14). The decision is made a moment
  later: NOT_VALID for a selector it cannot read, NO_OVERLAP when no capability overlaps it,
  else CREATED with an endpoint (host, port, source) at its BI (Table 15).
- IP_110/108: ``GET <path>`` answers Table 15 (with ``lastUpdatedTimestamp`` in ms);
  IP_107: ``GET <base>/<name>/subscriptions`` lists the caller's subscriptions (Table 14) and
  ``DELETE <path>`` ends one (204; its path answers 404 afterwards).

Only the interchange that made a subscription may read or delete it. :class:`IIFaults` can break
it on purpose (mutants).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import dns.asyncresolver
import dns.exception
from aiohttp import web

from foreign_ixc.bi import Router, peer_cn
from foreign_ixc.selectors import InvalidSelector, Term, overlaps, parse

DECIDE_AFTER_S = 0.1


@dataclass(frozen=True)
class IIFaults:
    any_cn: bool = False  #: serve a CN that is no SRV target
    created_without_endpoints: bool = False


@dataclass
class Subscription:
    id: str
    owner: str
    selector: str
    consumer: str | None
    status: str = "REQUESTED"
    error: str | None = None
    endpoints: list[dict[str, Any]] = field(default_factory=list)
    updated_ms: int = field(default_factory=lambda: int(time.time() * 1000))


@dataclass
class IIState:
    name: str
    domain: str
    dns: tuple[str, int]
    base: str
    bi_port: int
    capabilities: list[dict[str, Any]]
    router: Router
    faults: IIFaults
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def path(self, subscription: Subscription) -> str:
        return f"{self.base}/subscription/{subscription.id}"


STATE = web.AppKey("state", IIState)
CALLER = web.RequestKey("caller", str)  #: the client certificate's CN


def _error(status: int, text: str) -> web.Response:
    return web.json_response({"error": text}, status=status)


async def _srv_targets(state: IIState) -> set[str]:
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers, resolver.port = [state.dns[0]], state.dns[1]
    try:
        answer = await resolver.resolve(f"_ixc._tcp.{state.domain}", "SRV", lifetime=3.0)
    except dns.exception.DNSException:
        return set()
    return {str(record.target).rstrip(".").lower() for record in answer}


@web.middleware
async def _neighbours_only(request: web.Request, handler: Any) -> web.StreamResponse:
    state: IIState = request.app[STATE]
    tls = request.transport.get_extra_info("ssl_object") if request.transport else None
    cn = peer_cn(tls.getpeercert(binary_form=True) if tls else None)
    if cn is None:
        return _error(403, "no client certificate")
    if not state.faults.any_cn and cn.lower() not in await _srv_targets(state):
        return _error(403, f"{cn} is not an interchange of {state.domain}")
    request[CALLER] = cn
    return await handler(request)


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read())
    except ValueError:
        raise web.HTTPBadRequest(text='{"error": "not JSON"}', content_type="application/json") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text='{"error": "expected a JSON object"}', content_type="application/json")
    return body


async def capabilities(request: web.Request) -> web.Response:
    state: IIState = request.app[STATE]
    body = await _json(request)
    if not isinstance(body.get("capabilities"), list) or not isinstance(body.get("name"), str):
        return _error(400, "name and capabilities are mandatory (Table 9)")
    return web.json_response({"version": "2.0", "name": state.name, "capabilities": state.capabilities})


def _decide(state: IIState, subscription: Subscription) -> None:
    try:
        terms: tuple[Term, ...] = parse(subscription.selector)
    except InvalidSelector as exc:
        subscription.status, subscription.error = "NOT_VALID", str(exc)
    else:
        if not any(overlaps(terms, c["application"]) for c in state.capabilities):
            subscription.status, subscription.error = "NO_OVERLAP", "no dataset matches the selector"
        else:
            source = f"foreign-source-{subscription.id}"
            state.router.add_source(source, subscription.consumer or subscription.owner, terms)
            subscription.status = "CREATED"
            if not state.faults.created_without_endpoints:
                subscription.endpoints = [{"host": state.name, "port": state.bi_port, "source": source}]
    subscription.updated_ms = int(time.time() * 1000)


def _entry(state: IIState, subscription: Subscription) -> dict[str, Any]:
    entry = {"id": subscription.id, "selector": subscription.selector, "path": state.path(subscription),
             "status": subscription.status}
    if subscription.consumer is not None:
        entry["consumerCommonName"] = subscription.consumer
    if subscription.error is not None:
        entry["errorMessage"] = subscription.error
    return entry


async def subscribe(request: web.Request) -> web.Response:
    state: IIState = request.app[STATE]
    body = await _json(request)
    items = body.get("subscriptions")
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) and isinstance(i.get("selector"), str)
                                                           for i in items):
        return _error(400, "subscriptions: a list of objects with a selector (Table 13)")
    made = []
    for item in items:
        consumer = item.get("consumerCommonName")
        subscription = Subscription(str(next(state.ids)), request[CALLER], item["selector"],
                                    consumer if isinstance(consumer, str) else None)
        state.subscriptions[subscription.id] = subscription
        asyncio.get_running_loop().call_later(DECIDE_AFTER_S, _decide, state, subscription)
        made.append(_entry(state, subscription))
    return web.json_response({"version": "1.2", "name": state.name, "subscriptions": made}, status=202)


def _own(request: web.Request) -> Subscription:
    state: IIState = request.app[STATE]
    subscription = state.subscriptions.get(request.match_info["id"])
    if subscription is None or subscription.owner != request[CALLER]:
        raise web.HTTPNotFound(text='{"error": "no such subscription"}', content_type="application/json")
    return subscription


async def poll(request: web.Request) -> web.Response:
    state: IIState = request.app[STATE]
    subscription = _own(request)
    return web.json_response({**_entry(state, subscription), "endpoints": subscription.endpoints,
                              "lastUpdatedTimestamp": subscription.updated_ms})


async def delete(request: web.Request) -> web.Response:
    state: IIState = request.app[STATE]
    subscription = _own(request)
    del state.subscriptions[subscription.id]
    state.router.remove_source(f"foreign-source-{subscription.id}")
    return web.Response(status=204)


async def listing(request: web.Request) -> web.Response:
    state: IIState = request.app[STATE]
    if request.match_info["name"] != request[CALLER]:
        return _error(403, "only your own subscriptions")
    mine = [_entry(state, s) for s in state.subscriptions.values() if s.owner == request[CALLER]]
    return web.json_response({"version": "1.2", "name": state.name, "subscriptions": mine})


def build_app(state: IIState) -> web.Application:
    app = web.Application(middlewares=[_neighbours_only])
    app[STATE] = state
    base = state.base
    app.router.add_post(f"{base}/capabilities", capabilities)
    app.router.add_post(f"{base}/subscriptions", subscribe)
    app.router.add_get(f"{base}/subscription/{{id}}", poll)
    app.router.add_delete(f"{base}/subscription/{{id}}", delete)
    app.router.add_get(f"{base}/{{name}}/subscriptions", listing)
    return app
