"""A TLEX streaming service with its controllers, written from TLEX-BROKER-SYSTEM v1.1.1 and the UDAP
TLC interface (not from the bridge's code), for the bridge's tests.

What it does, by the spec's sections:

- 5.1/5.2.1.1: ``POST <base>/sessions`` with ``X-Authorization``, a Broker session of protocol
  ``TCPStreaming_Multiplex`` whose details give ``securityMode`` and ``tlcIdentifiers``; the answer
  carries the token, the listener (host, port, expiration 5 s later), keepAliveTimeout and the
  limits as ISO 8601 durations. 5.2.1.4: ``PUT <base>/sessions/<token>`` replaces the identifiers.
  What a request breaks is recorded in :attr:`Counterpart.problems` (and answered 400/401).
- 6.1: TLS 1.2 only, cipher suite TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, server authentication.
- 6.2/6.3: the client's first byte is the protocol version 0x01, then frames ``AA BB`` + 2-byte
  big-endian size + datagram; the first datagram is Token (0x01) with the session's token; the
  service answers with its own 0x01.
- 6.3.4: it sends Payload with TLC identifier (0x05: type 0x05, 8 ASCII bytes, payload type byte,
  8-byte origin timestamp, payload) for each controller of the session, a Timestamps request (0x06)
  every ``timestamps_every`` seconds, and records Timestamps responses (0x07), KeepAlive (0x00),
  Bye (0x02) and the client's payloads (the SREMs).

The controllers are its own (as a service's "TLC" sessions would feed it): each has type bytes of
its choosing (the spec leaves types below 0xF0 to the application), sends its MAPEM, then SPATEMs
at ``hz``, as UPER messages with a real ItsPduHeader (:mod:`.its`), and answers a payload that
comes with its SREM type byte with an SSEM. :class:`Behaviour` holds the broken variants the
tests use as mutants.
"""
from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import ssl
import struct
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from aiohttp import web

from tlex_counterpart import its

PREFIX = b"\xaa\xbb"
VERSION = 0x01
KEEP_ALIVE, TOKEN, BYE, RECONNECT, PAYLOAD, PAYLOAD_TLC, TS_REQUEST, TS_RESPONSE = range(8)
TLC_ID = re.compile(r"^[\x20-\x7e]{8}$")


@dataclass(frozen=True)
class Behaviour:
    """How the service's controllers behave (the defaults are a well-behaved service)."""

    types: dict[str, int] = field(default_factory=lambda: {"SPATEM": 0x01, "MAPEM": 0x02, "SREM": 0x03, "SSEM": 0x04})
    srem_type: int | None = None  #: the type byte the controllers take an SREM with (default types["SREM"])
    mapem_after_s: float = 0.0  #: SPATEMs only, this long, before the first MAPEM
    header: bool = True  #: payloads are UPER messages with an ItsPduHeader; False: bytes without one
    unknown_type: int | None = None  #: every payload with this type byte instead
    mapem_filler: int = 200  #: bytes of stand-in body in a MAPEM
    timestamps_every: float | None = 0.5  #: Timestamps requests (None: none)
    hz: float = 20.0


@dataclass
class Sent:
    tlc: str
    kind: str
    type_byte: int
    payload: bytes


@dataclass
class Counterpart:
    """The service (see the module docstring); start() then the bridge connects to it."""

    tls_cert: Path
    tls_key: Path
    authorization: str
    controllers: dict[str, str]  #: TLC identifier -> intersection (as "region-id")
    behaviour: Behaviour = field(default_factory=Behaviour)
    host: str = "127.0.0.1"
    problems: list[str] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    opened: list[str] = field(default_factory=list)  #: tokens of streams opened as 6.2/6.3.4.2 say
    sent: list[Sent] = field(default_factory=list)
    received: list[tuple[str, int, bytes]] = field(default_factory=list)  #: (TLC, type byte, payload) from the bridge
    #: Timestamps responses: (t0 is one the service sent, t0, t1, t2)
    timestamps: list[tuple[bool, int, int, int]] = field(default_factory=list)
    go: asyncio.Event = field(default_factory=asyncio.Event)  #: the controllers send once it is set
    _asked: set[int] = field(default_factory=set)
    _runner: web.AppRunner | None = None
    _server: asyncio.AbstractServer | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    api_port: int = 0
    stream_port: int = 0

    @property
    def api_url(self) -> str:
        return f"https://{self.host}:{self.api_port}/api/v1"

    def _tls(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers("ECDHE-RSA-AES128-GCM-SHA256")
        context.load_cert_chain(self.tls_cert, self.tls_key)
        return context

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/v1/sessions", self._create)
        app.router.add_put("/api/v1/sessions/{token}", self._update)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0, ssl_context=self._tls())
        await site.start()
        self.api_port = int(self._runner.addresses[0][1])
        self._server = await asyncio.start_server(self._stream, self.host, 0, ssl=self._tls())
        self.stream_port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- REST (5.2.1)
    def _refuse(self, status: int, problem: str) -> web.Response:
        self.problems.append(problem)
        return web.json_response({"error": problem}, status=status)

    async def _create(self, request: web.Request) -> web.Response:
        if request.headers.get("X-Authorization") != self.authorization:
            return self._refuse(401, "POST /sessions without the Broker system's X-Authorization (5.1)")
        body = await request.json()
        self.requests.append(body)
        details = body.get("details") if isinstance(body, dict) else None
        if body.get("type") != "Broker" or body.get("protocol") != "TCPStreaming_Multiplex" \
                or not isinstance(body.get("domain"), str) or not isinstance(details, dict):
            return self._refuse(400, f"not a Broker TCPStreaming_Multiplex session request (5.2.1.1.3): {body}")
        identifiers = details.get("tlcIdentifiers")
        if details.get("securityMode") != "TLSv1.2" or not isinstance(identifiers, list) or not identifiers \
                or not all(isinstance(i, str) and TLC_ID.match(i) for i in identifiers):
            return self._refuse(400, f"session details break 5.2.1.1.3.1: {details}")
        token = secrets.token_urlsafe(32)
        expiration = datetime.now(timezone.utc) + timedelta(seconds=5)
        session = {"token": token, "domain": body["domain"], "type": "Broker", "protocol": "TCPStreaming_Multiplex",
                   "details": {"securityMode": "TLSv1.2", "tlcIdentifiers": identifiers,
                               "listener": {"host": self.host, "port": self.stream_port,
                                            "expiration": expiration.strftime("%Y-%m-%dT%H:%M:%SZ")},
                               "keepAliveTimeout": "PT5S", "clockDiffLimit": "PT3S", "clockDiffLimitDuration": "PT60S",
                               "payloadRateLimit": 1200, "payloadRateLimitDuration": "PT5S",
                               "payloadThroughputLimit": 120, "payloadThroughputLimitDuration": "PT5S"}}
        self.sessions[token] = session
        return web.json_response(session)

    async def _update(self, request: web.Request) -> web.Response:
        session = self.sessions.get(request.match_info["token"])
        if session is None or request.headers.get("X-Authorization") != self.authorization:
            return self._refuse(404, "PUT /sessions/<token> for no active session of this account (5.2.1.4)")
        details = await request.json()
        session["details"]["tlcIdentifiers"] = details.get("tlcIdentifiers")
        return web.json_response(session)

    # ---- TCPStreaming (6.2, 6.3)
    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if await reader.readexactly(1) != bytes([VERSION]):
                self.problems.append("the stream does not start with protocol version 0x01 (6.2)")
                return
            first = await _read_datagram(reader)
            token = first[1:].decode("ascii", "replace")
            if first[0] != TOKEN or token not in self.sessions:
                self.problems.append(f"the first datagram is not the Token of a session (6.3.4.2): {first[:20]!r}")
                return
            self.opened.append(token)
            writer.write(bytes([VERSION]))
            tlcs = [t for t in self.sessions[token]["details"]["tlcIdentifiers"] if t in self.controllers]
            self._spawn(self._play(writer, tlcs))
            if self.behaviour.timestamps_every is not None:
                self._spawn(self._ask_timestamps(writer, self.behaviour.timestamps_every))
            await self._read(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        except asyncio.CancelledError:  # closing: asyncio's stream callback would log a cancelled handler
            writer.transport.abort()
        finally:
            self._tasks.discard(task)
            writer.close()

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            datagram = await _read_datagram(reader)
            kind = datagram[0]
            if kind == TS_RESPONSE and len(datagram) == 25:
                t0, t1, t2 = struct.unpack(">QQQ", datagram[1:])
                self.timestamps.append((t0 in self._asked, t0, t1, t2))
            elif kind == PAYLOAD_TLC and len(datagram) >= 18:
                tlc, type_byte = datagram[1:9].decode("ascii"), datagram[9]
                self.received.append((tlc, type_byte, bytes(datagram[18:])))
                self._answer(writer, tlc, type_byte)
            elif kind == BYE:
                return
            elif kind != KEEP_ALIVE:
                self.problems.append(f"unexpected datagram 0x{kind:02x} from a Broker session (6.3.4)")

    def _answer(self, writer: asyncio.StreamWriter, tlc: str, type_byte: int) -> None:
        """A controller takes an SREM only with its SREM type byte; it answers with an SSEM."""
        srem = self.behaviour.srem_type if self.behaviour.srem_type is not None else self.behaviour.types["SREM"]
        if tlc in self.controllers and type_byte == srem:
            self._send(writer, tlc, "SSEM", 1)

    async def _ask_timestamps(self, writer: asyncio.StreamWriter, every: float) -> None:
        while not writer.is_closing():
            t0 = time.time_ns() // 1_000_000
            self._asked.add(t0)
            writer.write(_frame(struct.pack(">BQ", TS_REQUEST, t0)))
            await asyncio.sleep(every)

    async def _play(self, writer: asyncio.StreamWriter, tlcs: list[str]) -> None:
        await self.go.wait()
        behaviour, started, sequence = self.behaviour, time.monotonic(), 0
        mapped = {tlc: False for tlc in tlcs}
        while not writer.is_closing():
            sequence += 1
            for tlc in tlcs:
                if not mapped[tlc] and time.monotonic() - started >= behaviour.mapem_after_s:
                    self._send(writer, tlc, "MAPEM", sequence)
                    mapped[tlc] = True
                self._send(writer, tlc, "SPATEM", sequence)
            await asyncio.sleep(1 / behaviour.hz)

    def _send(self, writer: asyncio.StreamWriter, tlc: str, kind: str, sequence: int) -> None:
        behaviour = self.behaviour
        station = int.from_bytes(tlc.encode("ascii")[-4:], "big")
        if behaviour.header:
            payload = its.message(kind, station, self.controllers[tlc], sequence,
                                  filler=behaviour.mapem_filler if kind == "MAPEM" else 40)
        else:
            payload = f"<{kind} tlc='{tlc}' seq='{sequence}'/>".encode("ascii")
        type_byte = behaviour.unknown_type if behaviour.unknown_type is not None else behaviour.types[kind]
        origin = time.time_ns() // 1_000_000
        writer.write(_frame(struct.pack(">B8sBQ", PAYLOAD_TLC, tlc.encode("ascii"), type_byte, origin) + payload))
        self.sent.append(Sent(tlc, kind, type_byte, payload))


def _frame(datagram: bytes) -> bytes:
    return PREFIX + struct.pack(">H", len(datagram)) + datagram


async def _read_datagram(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(4)
    if head[:2] != PREFIX:
        raise ConnectionError(f"frame prefix {head[:2].hex()} (6.3.2)")
    size = struct.unpack(">H", head[2:])[0]
    if size == 0:
        raise ConnectionError("empty frame (6.3.2)")
    return await reader.readexactly(size)
