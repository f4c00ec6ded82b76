"""A streaming-service simulator (TLEX / UDAP side): REST API + TCPStreaming listeners on loopback.

- REST (aiohttp, HTTPS) under ``/api/v1`` (TLEX 5.2, UDAP 2.2), errors JSON ``{"error": ...}``;
- TCPStreaming (TLEX 6): a listener per security mode (``TLSv1.2``, ``NONE``), each connection a
  :class:`~.session.ServiceStream`, tokens checked and payloads routed by
  :class:`~.service.ServiceRegistry`;
- operator hooks for tests and demos (reconnect, say_bye, inject, mute, closes), watch_brokers,
  and controllers the service plays itself (:meth:`StreamingServiceSimulator.play`).

Endpoints, status codes and hooks: docs/tlex-bridge.md ("The streaming-service simulator").
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable, Protocol

from aiohttp import web
from pydantic import ValidationError

from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.models import RequestDetails, SessionRequest, dump
from interchange.bridges.tlex.service import Account, Limits, Refusal, Route, ServiceRegistry
from interchange.bridges.tlex.session import Action, Authenticate, Close, Deliver, Send, ServiceStream, SessionClosed
from interchange.bridges.tlex.stream import Pump, read_now

API_PREFIX = "/api/v1"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@dataclass
class ClosedConnection:
    token: str | None
    close: Close


@dataclass
class _Connection:
    stream: ServiceStream
    pump: Pump | None = None
    token: str | None = None
    muted: bool = False  #: operator hook: the service stops sending on this connection (a hung node)


class ControllerPlayer(Protocol):
    """Controllers the service plays itself (:meth:`StreamingServiceSimulator.play`)."""

    def received(self, payload: Payload) -> None:
        """A Broker payload for one of them (``payload.tlc``)."""


@dataclass
class SimulatorStats:
    connections: int = 0
    routed: int = 0
    received: int = 0


class StreamingServiceSimulator:
    """The service side of both specs, for tests, demos and operators without TLEX access."""

    def __init__(self, registry: ServiceRegistry, *, host: str = "127.0.0.1",
                 stream_tls: ssl.SSLContext | None = None, api_tls: ssl.SSLContext | None = None,
                 timestamps_interval: float = 15.0, offer_plain: bool = True) -> None:
        self.registry, self.host = registry, host
        self._stream_tls, self._api_tls = stream_tls, api_tls
        self.timestamps_interval = timestamps_interval
        self._offer_plain = offer_plain
        self.connections: dict[str, _Connection] = {}
        self.closes: list[ClosedConnection] = []
        self.stats = SimulatorStats()
        self._servers: list[asyncio.Server] = []
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task] = set()
        self.api_port = 0
        self.player: ControllerPlayer | None = None  #: the controllers the service plays itself, if any
        self._broker_watchers: list[Callable[[frozenset[str]], None]] = []

    @property
    def api_url(self) -> str:
        scheme = "https" if self._api_tls is not None else "http"
        return f"{scheme}://{self.host}:{self.api_port}{API_PREFIX}"

    async def start(self, api_port: int = 0, tls_port: int = 0, plain_port: int = 0) -> None:
        listeners: dict[str, tuple[str, int]] = {}
        if self._stream_tls is not None:
            listeners["TLSv1.2"] = (self.host, await self._listen(tls_port, "TLSv1.2", self._stream_tls))
        if self._offer_plain:
            listeners["NONE"] = (self.host, await self._listen(plain_port, "NONE", None))
        self.registry.listeners = listeners
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, api_port, ssl_context=self._api_tls)
        await site.start()
        self.api_port = int(self._runner.addresses[0][1])  # (host, port, ...) of the socket the site listens on

    async def _listen(self, port: int, security_mode: str, context: ssl.SSLContext | None) -> int:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                await self._serve(reader, writer, security_mode)
            except asyncio.CancelledError:
                writer.transport.abort()  # shutting down; asyncio's stream callback would log a cancelled handler
            finally:
                self._tasks.discard(task)

        server = await asyncio.start_server(handle, self.host, port, ssl=context)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        for connection in list(self.connections.values()):
            if connection.pump is not None:
                connection.pump.execute(connection.stream.close("service shutting down", read_now()))
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._runner is not None:
            await self._runner.cleanup()

    # --- TCPStreaming -----------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, security_mode: str) -> None:
        self.stats.connections += 1
        connection = _Connection(ServiceStream(self.registry.limits.keepalive_timeout, read_now()))
        connection.pump = Pump(connection.stream, reader, writer,
                               lambda action: self._on_action(connection, security_mode, action),
                               muted=lambda: connection.muted)
        try:
            close = await connection.pump.run([])
        finally:
            if connection.token is not None:
                self.connections.pop(connection.token, None)
                self.registry.disconnect(connection.token)
        self.closes.append(ClosedConnection(connection.token, close))

    def _on_action(self, connection: _Connection, security_mode: str, action: Action) -> list[Action]:
        now = read_now()
        match action:
            case Authenticate(token=token):
                try:
                    record = self.registry.connect(token, security_mode, now.mono)
                except Refusal as refusal:
                    return connection.stream.refuse(refusal.message, now)
                connection.token = token
                self.connections[token] = connection
                if record.mode == "broker":
                    self._tell_watchers(record.scope)
                return connection.stream.accept(record.session.grant(self.timestamps_interval), now)
            case Deliver(payload=payload) if connection.token is not None:
                self.stats.received += 1
                self._route(connection.token, payload, now.utc_ms)
        return []

    def _route(self, token: str, payload: Payload, utc_ms: int) -> None:
        self._deliver(self.registry.route(token, payload, utc_ms))

    def _deliver(self, routes: list[Route]) -> None:
        now = read_now()
        for route in routes:
            if route.token is None:
                if self.player is not None:
                    self.player.received(route.payload)
                continue
            target = self.connections.get(route.token)
            if target is None or target.pump is None:
                continue
            with contextlib.suppress(SessionClosed):
                target.pump.execute(target.stream.send_payload(route.payload, now))
                self.stats.routed += 1

    def play(self, player: ControllerPlayer, domain: str, identifiers: list[str]) -> Callable[[Payload], None]:
        """The service plays these controllers itself: returns the function ``player`` sends their
        payloads with (``payload.tlc`` set), routed as if each had its own TLC session; Broker payloads
        for them go to ``player.received``."""
        self.player = player
        self.registry.play(domain, identifiers)

        def send(payload: Payload) -> None:
            assert payload.tlc is not None
            self.stats.received += 1
            self._deliver(self.registry.route_from_controller(domain, payload.tlc, payload, payload.origin_ms))
        return send

    def watch_brokers(self, watcher: Callable[[frozenset[str]], None]) -> None:
        """Call ``watcher`` with the TLC identifiers a Broker session takes from now on."""
        self._broker_watchers.append(watcher)

    def _tell_watchers(self, tlcs: frozenset[str]) -> None:
        """On the next loop turn: the session's preamble goes out first (accept's actions)."""
        if tlcs and self._broker_watchers:
            loop = asyncio.get_running_loop()
            for watcher in self._broker_watchers:
                loop.call_soon(watcher, tlcs)

    def reconnect(self, token: str | None = None) -> int:
        """Send Reconnect (6.3.4.4) on one connection (or all); returns how many got it."""
        return self._each(token, lambda c: c.stream.reconnect(read_now()))

    def say_bye(self, reason: str, token: str | None = None) -> int:
        """Send Bye and close one connection (or all)."""
        return self._each(token, lambda c: c.stream.close(reason, read_now()))

    def inject(self, data: bytes, token: str | None = None) -> int:
        """Write raw bytes on one connection (or all), e.g. a broken frame to test the client."""
        return self._each(token, lambda c: [Send(data)])

    def mute(self, token: str | None = None) -> int:
        """Stop sending anything on one connection (or all): the client's keep-alive timeout must act."""
        chosen = [c for t, c in self.connections.items() if token is None or t == token]
        for connection in chosen:
            connection.muted = True
        return len(chosen)

    def _each(self, token: str | None, actions: Callable[[_Connection], list[Action]]) -> int:
        chosen = [c for t, c in self.connections.items() if token is None or t == token]
        for connection in chosen:
            if connection.pump is not None and connection.stream.closed is None:
                connection.pump.execute(actions(connection))
        return len(chosen)

    def sessions_of(self, account: Account) -> list[str]:
        return [t for t, r in self.registry.sessions.items() if r.account == account]

    # --- REST -------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors])
        app.router.add_post(f"{API_PREFIX}/sessions", self._create)
        app.router.add_get(f"{API_PREFIX}/sessions", self._list)
        app.router.add_get(f"{API_PREFIX}/sessions/{{token}}", self._get)
        app.router.add_put(f"{API_PREFIX}/sessions/{{token}}", self._update)
        app.router.add_get(f"{API_PREFIX}/tlcs", self._tlcs)
        app.router.add_get(f"{API_PREFIX}/tlcs/{{uuid}}", self._tlc)
        return app

    @web.middleware
    async def _errors(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            return await handler(request)
        except Refusal as refusal:
            return _error(refusal.status, refusal.message)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            return _error(400, f"invalid request body: {problems}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "request body is not JSON")
        except web.HTTPException as exc:
            return _error(exc.status, exc.reason)

    def _account(self, request: web.Request) -> Account:
        return self.registry.authenticate(request.headers.get("X-Authorization"))

    async def _create(self, request: web.Request) -> web.Response:
        account = self._account(request)
        body = SessionRequest.model_validate(await request.json())
        session = self.registry.create(account, body, read_now().mono, datetime.now(timezone.utc))
        return web.json_response(dump(session))

    async def _list(self, request: web.Request) -> web.Response:
        account = self._account(request)
        return web.json_response([dump(s) for s in self.registry.sessions_of(account, read_now().mono)])

    async def _get(self, request: web.Request) -> web.Response:
        record = self.registry.session_of(self._account(request), request.match_info["token"], read_now().mono)
        return web.json_response(dump(record.session))

    async def _update(self, request: web.Request) -> web.Response:
        account = self._account(request)
        details = RequestDetails.model_validate(await request.json())
        token = request.match_info["token"]
        before = self.registry.session_of(account, token, read_now().mono).scope
        session = self.registry.update(account, token, details, read_now().mono)
        connection = self.connections.get(token)
        if connection is not None and connection.stream.grant is not None:
            connection.stream.grant = session.grant(self.timestamps_interval)
            if connection.stream.grant.mode == "broker":
                self._tell_watchers(frozenset(session.details.identifiers()) - before)
        return web.json_response(dump(session))

    async def _tlcs(self, request: web.Request) -> web.Response:
        return web.json_response([dump(t) for t in self.registry.tlcs_of(self._account(request))])

    async def _tlc(self, request: web.Request) -> web.Response:
        account = self._account(request)
        found = [t for t in self.registry.tlcs_of(account) if t.uuid == request.match_info["uuid"]]
        if not found:
            raise Refusal(404, "no TLC registration with this uuid")
        return web.json_response(dump(found[0]))


__all__ = ["API_PREFIX", "ClosedConnection", "Limits", "StreamingServiceSimulator"]
