"""asyncio around the TCPStreaming state machines: moves bytes and time, nothing else.

- :class:`Pump` runs one :mod:`.session` stream over a connection: received bytes and timer
  ticks go in, the actions come out and are executed (write, answer timestamps first with t2
  stamped at write time, close); actions the pump does not own (Deliver, Authenticate) go to
  the owner's handler, which may answer with more actions.
- :class:`SessionSupervisor` keeps one client session up (TLEX 5.2.1.1, 6.3.4.3/6.3.4.4): create
  the session over REST, connect to its listener (TLS 1.2 when the session says so), send the
  token, stream; when the stream ends (Bye, Reconnect, dropped, keep-alive, framing error) it
  creates a new session, at once after a Reconnect, otherwise after an exponential back-off.
  Payloads handed to :meth:`SessionSupervisor.send` wait in a bounded outbox while no session
  is up and are written when the next one is: nothing accepted is lost to a reconnect.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.models import Session, SessionRequest
from interchange.bridges.tlex.rest import ServiceError, ServiceUnreachable, StreamingServiceClient
from interchange.bridges.tlex.session import (
    Action,
    AnswerTimestamps,
    ClientStream,
    Close,
    CloseCause,
    Deliver,
    Now,
    Send,
    SessionClosed,
)
from interchange.ground.timing import backoff_s

_log = logging.getLogger(__name__)
READ_SIZE = 64 * 1024


def read_now() -> Now:
    return Now(time.monotonic(), time.time_ns() // 1_000_000)


class StreamMachine(Protocol):
    closed: Close | None

    def receive(self, data: bytes, now: Now) -> list[Action]: ...
    def tick(self, now: Now) -> list[Action]: ...
    def next_deadline(self) -> float: ...
    def connection_lost(self, reason: str = ...) -> list[Action]: ...


Handler = Callable[[Action], list[Action]]


class Pump:
    """One stream machine over one asyncio connection."""

    def __init__(self, machine: StreamMachine, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 handler: Handler, muted: Callable[[], bool] = lambda: False) -> None:
        self.machine, self._reader, self._writer, self._handler = machine, reader, writer, handler
        self._muted = muted  #: the simulator's "hung service": nothing is written while it says so
        self.closed: Close | None = None

    def execute(self, actions: list[Action]) -> None:
        """Carry out actions (also those produced outside, e.g. by send_payload)."""
        pending = deque(actions)
        while pending:
            action = pending.popleft()
            match action:
                case AnswerTimestamps():
                    self._writer.write(action.frame(read_now().utc_ms))  # t2 as late as possible
                case Send(data=data) if not self._muted():
                    self._writer.write(data)
                case Send():
                    pass
                case Close():
                    self.closed = action
                    self._writer.close()
                    return
                case _:
                    pending.extendleft(reversed(self._handler(action)))

    async def run(self, opening: list[Action]) -> Close:
        """Until the stream closes; returns why."""
        self.execute(opening)
        while self.closed is None:
            timeout = max(0.0, self.machine.next_deadline() - time.monotonic())
            try:
                async with asyncio.timeout(timeout):
                    data = await self._reader.read(READ_SIZE)
            except TimeoutError:
                self.execute(self.machine.tick(read_now()))
                continue
            except (ConnectionError, OSError, ssl.SSLError) as exc:
                self.execute(self.machine.connection_lost(f"connection error: {exc}"))
                break
            if not data:
                self.execute(self.machine.connection_lost())
                break
            now = read_now()
            self.execute(self.machine.receive(data, now) + self.machine.tick(now))
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.drain()
        with contextlib.suppress(ConnectionError, OSError, ssl.SSLError):
            await self._writer.wait_closed()
        assert self.closed is not None or self.machine.closed is not None
        return self.closed or self.machine.closed  # type: ignore[return-value]


@dataclass
class Backoff:
    """Exponential back-off with jitter between session attempts."""

    initial: float = 0.5
    maximum: float = 30.0
    attempt: int = 0

    def next_delay(self) -> float:
        self.attempt += 1
        delay = backoff_s(self.attempt, self.initial, self.maximum)  # the shared formula: no float overflow
        return delay * random.uniform(0.8, 1.0)  # noqa: S311 - jitter, not security

    def reset(self) -> None:
        self.attempt = 0


@dataclass
class SupervisorStats:
    sessions: int = 0  #: sessions created
    connected: bool = False
    reconnects: int = 0  #: streams that ended and were replaced
    closes: dict[str, int] = field(default_factory=dict)  #: by CloseCause value
    outbox_dropped: int = 0
    last_error: str | None = None


class SessionSupervisor:
    """Keeps one client session of ``request``'s kind up (see the module docstring)."""

    def __init__(self, api: StreamingServiceClient, request: SessionRequest, *,
                 stream_ssl: ssl.SSLContext | None, on_payload: Callable[[Payload], None],
                 on_event: Callable[[str, dict], None] | None = None, backoff: Backoff | None = None,
                 outbox_limit: int = 10_000, connect_timeout: float = 5.0,
                 server_hostname: str | None = None) -> None:
        self._server_hostname = server_hostname  #: certificate name when the listener is an address
        self._api, self.request = api, request
        self._stream_ssl, self._on_payload = stream_ssl, on_payload
        self._on_event = on_event or (lambda _name, _fields: None)
        self._backoff = backoff or Backoff()
        self._outbox: deque[Payload] = deque()
        self._outbox_limit = outbox_limit
        self._connect_timeout = connect_timeout
        self._pump: Pump | None = None
        self._stream: ClientStream | None = None
        self.session: Session | None = None
        self.stats = SupervisorStats()
        self.connected = asyncio.Event()

    def send(self, payload: Payload) -> str | None:
        """Accept a payload for the service: written now if a stream is up, else when one is. The
        reason when it can never be sent (outside the session's identifiers, too large to frame)."""
        if self._stream is not None and self._pump is not None and self._pump.closed is None:
            try:
                self._pump.execute(self._stream.send_payload(payload, read_now()))
                return None
            except SessionClosed:
                pass
            except ValueError as exc:
                return str(exc)
        if len(self._outbox) >= self._outbox_limit:
            self._outbox.popleft()
            self.stats.outbox_dropped += 1
        self._outbox.append(payload)
        return None

    def _flush(self) -> None:
        assert self._stream is not None and self._pump is not None
        while self._outbox and self._pump.closed is None:
            payload = self._outbox[0]
            try:
                actions = self._stream.send_payload(payload, read_now())
            except SessionClosed:
                return
            except ValueError as exc:  # out of scope after an update: it can never be sent
                self._on_event("payload_refused", {"tlc": payload.tlc, "reason": str(exc)})
                actions = []
            self._outbox.popleft()
            self._pump.execute(actions)

    async def run(self) -> None:
        """Create, connect, stream, repeat, until cancelled."""
        while True:
            cause = await self._one_session()
            if cause is CloseCause.RECONNECT:
                continue  # "reconnect as soon as possible" (6.3.4.4)
            await asyncio.sleep(self._backoff.next_delay())

    async def _one_session(self) -> CloseCause | None:
        try:
            session = await self._api.create_session(self.request)
        except (ServiceError, ServiceUnreachable) as exc:
            self.stats.last_error = str(exc)
            self._on_event("session_refused", {"error": str(exc), "status": getattr(exc, "status", None)})
            return None
        self.session = session
        self.stats.sessions += 1
        try:
            reader, writer = await self._connect(session)
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            self.stats.last_error = f"connect {session.details.listener.host}:{session.details.listener.port}: {exc}"
            self._on_event("stream_connect_failed", {"error": self.stats.last_error})
            return None
        return await self._stream_on(session, reader, writer)

    async def _connect(self, session: Session) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        listener = session.details.listener
        secure = session.details.security_mode == "TLSv1.2"
        if secure and self._stream_ssl is None:
            raise ssl.SSLError("the session wants TLSv1.2 but no TLS context is configured")
        async with asyncio.timeout(self._connect_timeout):
            if not secure:
                return await asyncio.open_connection(listener.host, listener.port)
            return await asyncio.open_connection(listener.host, listener.port, ssl=self._stream_ssl,
                                                 server_hostname=self._server_hostname or listener.host)

    async def _stream_on(self, session: Session, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> CloseCause:
        now = read_now()
        stream = ClientStream(session.token, session.mode(), frozenset(session.details.identifiers()),
                              session.details.keep_alive_timeout.total_seconds(), now)
        pump = Pump(stream, reader, writer, self._deliver)
        self._stream, self._pump = stream, pump
        opening = stream.start(now)
        self.stats.connected = True
        self.connected.set()
        self._on_event("stream_connected", {"session": _short(session.token), "tlcs": sorted(stream.tlc_ids)})
        try:
            pump.execute(opening)
            self._flush()
            self._backoff.reset()
            close = await pump.run([])
        finally:
            self.stats.connected = False
            self.connected.clear()
            self._stream = self._pump = None
        self.stats.reconnects += 1
        self.stats.closes[close.cause.value] = self.stats.closes.get(close.cause.value, 0) + 1
        self._on_event("stream_closed", {"session": _short(session.token), "cause": close.cause.value,
                                         "reason": close.reason, "clock_diff_ms": stream.clock_diff_ms,
                                         "payloads_in": stream.counters.payloads_in,
                                         "payloads_out": stream.counters.payloads_out})
        return close.cause

    def _deliver(self, action: Action) -> list[Action]:
        if isinstance(action, Deliver):
            self._on_payload(action.payload)
        return []

    @property
    def stream(self) -> ClientStream | None:
        return self._stream

    async def update_request(self, request: SessionRequest) -> str:
        """New TLC identifiers (5.2.1.4, meant for multiplex sessions): the next sessions are created
        with ``request``; a live one is updated with PUT /sessions/<token> ("updated"), or, when the
        service refuses that, ended so that a new session with the new scope follows ("new_session").
        "next_session" when no session is live."""
        self.request = request
        stream, session = self._stream, self.session
        if stream is None or session is None:
            return "next_session"
        try:
            updated = await self._api.update_session(session.token, request.details)
        except (ServiceError, ServiceUnreachable) as exc:
            self._on_event("session_update_refused", {"error": str(exc), "status": getattr(exc, "status", None)})
            self.close_stream("the session's TLC identifiers changed")
            return "new_session"
        if self._stream is stream:  # (the stream may have ended while the PUT was under way)
            stream.update_scope(frozenset(updated.details.identifiers()))
        self.session = updated
        return "updated"

    def close_stream(self, reason: str) -> None:
        """Say Bye on the current stream (the supervisor then creates a new session)."""
        if self._stream is not None and self._pump is not None:
            self._pump.execute(self._stream.close(reason, read_now()))


def _short(token: str) -> str:
    """Enough of a session token for logs, not enough to use it (it is single use anyway)."""
    return token[:8]
