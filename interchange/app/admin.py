"""Admin HTTP endpoint for operators (loopback by default).

- ``GET /metrics``: Prometheus metrics (IP_137);
- ``GET /log``, ``PUT /log``: read or switch logging at run time (IP_009/010/119/120/138);
- ``GET /sources``: sources with their depth, consumers and drop counters;
- ``GET /federation`` (the node process, 404 elsewhere): :mod:`interchange.app.federation_view`;
- ``POST /tls/reload``: re-read the TLS files as SIGHUP does (200, or 422 with the reason);
- ``GET /debug/heap`` (``[admin] debug = true`` only, 404 otherwise): a full garbage collection, then
  the C heap's bytes in use; the collection holds the event loop (tens of ms, more with a large
  backlog), so it is for tests and investigations, not for scraping.

Errors are JSON: ``{"error": "..."}`` with a 4xx status. Bodies and answers: docs/monitoring.md
("The admin endpoint").
"""
from __future__ import annotations

import ctypes
import gc
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import ValidationError

from certs.node_tls import TlsReloadError
from interchange.broker.message_log import JsonLog
from interchange.broker.metrics import broker_registry
from interchange.broker.router import BrokerCore
from interchange.broker.server import BrokerServer
from interchange.app.federation_view import CSP, render
from interchange.app.node_metrics import FederationCollector
from interchange.ground.logfile import LogSettings


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_reader() -> Callable[[], int] | None:
    """The C heap's bytes in use (glibc's ``mallinfo2``: ``uordblks + hblkhd``, all arenas), or None
    where the C library has none (not glibc, or glibc before 2.33). Unlike the RSS it is not hidden
    by the pools the allocator keeps: what a connection leaves behind (OpenSSL's, proton's, the
    interpreter's larger objects) shows in it byte for byte."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    mallinfo2.argtypes = []

    def read() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return read


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


TlsReloader = Callable[[], Awaitable[dict[str, Any]]]
Handler = Callable[[web.Request], Awaitable[web.Response]]


def _log_switch(log: JsonLog) -> tuple[Handler, Handler]:
    """``GET /log`` and ``PUT /log``: the log's settings, read and switched at run time (a subset of
    the settings in the body; 400 naming the field for a bad one)."""

    async def get_log(_: web.Request) -> web.Response:
        return web.json_response(log.settings.model_dump())

    async def put_log(request: web.Request) -> web.Response:
        try:
            data = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "body must be JSON")
        if not isinstance(data, dict):
            return _error(400, "body must be a JSON object")
        try:
            settings = LogSettings.model_validate({**log.settings.model_dump(), **data})
        except ValidationError as exc:
            first = exc.errors()[0]
            return _error(400, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
        log.update(settings)
        log.event("info", "log_settings_changed", settings.model_dump())
        return web.json_response(settings.model_dump())

    return get_log, put_log


def admin_app(core: BrokerCore, server: BrokerServer, log: JsonLog,
              registry: CollectorRegistry | None = None, reload_tls: TlsReloader | None = None,
              federation: FederationCollector | None = None, debug: bool = False) -> web.Application:
    """``registry``: the node's metrics (the broker's and its bridges'); the broker's alone if None.
    ``reload_tls``: the node's TLS reload (``POST /tls/reload`` answers 404 without one).
    ``federation``: the node process's federation state (in ``registry`` too), refreshed before
    each scrape and each ``GET /federation``. ``debug``: answer ``GET /debug/heap``."""
    registry = registry if registry is not None else broker_registry(core, server, log)
    get_log, put_log = _log_switch(log)

    async def metrics(_: web.Request) -> web.Response:
        if federation is not None:
            await federation.refresh()
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def sources(_: web.Request) -> web.Response:
        return web.json_response([
            {"address": address, "depth": s.depth, "bytes": s.depth_bytes, "consumers": len(s.links),
             "dropped": s.dropped, "expired": s.expired, "delivered": s.delivered, "selector": s.spec.selector}
            for address, s in core.sources.items()])

    async def federation_page(_: web.Request) -> web.Response:
        if federation is None:
            return _error(404, "the federation view is on the node process's admin port (broker process 0)")
        page = render(await federation.refresh())
        return web.Response(text=page, content_type="text/html", charset="utf-8",
                            headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store",
                                     "X-Content-Type-Options": "nosniff"})

    async def tls_reload(_: web.Request) -> web.Response:
        if reload_tls is None:
            return _error(404, "this node has no [tls] section: there is nothing to reload")
        try:
            return web.json_response(await reload_tls())
        except TlsReloadError as exc:
            return _error(422, str(exc))

    read_heap = heap_reader() if debug else None

    async def debug_heap(_: web.Request) -> web.Response:
        if read_heap is None:
            return _error(404, "GET /debug/heap needs [admin] debug = true and glibc's mallinfo2")
        collected = gc.collect()  # garbage in reference cycles would hide what is really held
        return web.json_response({"heap_in_use_bytes": read_heap(), "gc_collected": collected})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/log", get_log)
    app.router.add_put("/log", put_log)
    app.router.add_get("/sources", sources)
    app.router.add_get("/federation", federation_page)
    app.router.add_post("/tls/reload", tls_reload)
    app.router.add_get("/debug/heap", debug_heap)
    return app


async def start_admin(host: str, port: int, core: BrokerCore, server: BrokerServer, log: JsonLog,
                      registry: CollectorRegistry | None = None,
                      reload_tls: TlsReloader | None = None,
                      federation: FederationCollector | None = None, debug: bool = False) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(admin_app(core, server, log, registry, reload_tls, federation, debug), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]  # (host, port, ...) of the socket the site listens on
    return runner, int(bound)
