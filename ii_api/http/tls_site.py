"""The II's HTTPS listener with the Basic Interface's TLS diagnostics (chapter 5, IP_009).

asyncio's own TLS (``create_server(ssl=...)``, what ``aiohttp.web.TCPSite`` uses) drops a refused
handshake without writing the alert OpenSSL produced and reports the reason nowhere (an
``ssl.SSLError`` is an ``OSError``: asyncio logs it only in debug mode). Here the TLS session is
:class:`~interchange.broker.tls_stream.TlsSession`, the sans-I/O one the BI uses, so both
interfaces behave alike: a refused handshake gets its alert and a ``tls_refused`` record (with
``interface: ii`` and the reason), a handshake that does not finish in time is dropped and logged,
and, with ``tls.max_certificate_days``, a client certificate valid for longer is refused (IP_051).
The context is the node's source of the current one (``ReloadingTls.current``): each accepted
connection's session is made from the context current at that moment, so a TLS reload applies to new
connections.
Once the handshake is done, a :class:`~ii_api.http.request_clock.RequestClock` times each request's headers
(the first from the arrival of the client's last handshake flight) and body (the request handlers tell it
their progress through ``get_extra_info("request_clock")``; it is told of plaintext with the time its
ciphertext arrived on the socket, also when that input waited for a handshake step, so a request's head is
timed from its arrival, not from when it was decrypted); a request that does not arrive in time is answered
408 with a JSON body and closed, and logged as ``request_timeout``. One timer per connection follows the
current deadline (the handshake's, then the request clock's).
Handshake steps wait their turn in a :class:`~interchange.broker.handshake_queue.HandshakeQueue`
(the node passes the BI server's, so both interfaces share its low-priority worker and its pace): a
burst of arriving connections does not hold up the established ones of either interface. While a
step is out on the worker the session is the worker's: input waits, and a deadline or a close marks
the connection so that the step's outcome is dropped.

:class:`TlsServerProtocol` owns the socket: ciphertext in and out. Once the handshake completes it
starts aiohttp's request handler on a :class:`TlsTransport`, which looks to aiohttp like asyncio's
TLS transport (``ssl_object``, ``peercert`` and ``sslcontext`` in ``get_extra_info``; write,
close with close_notify, flow control by the socket's transport).
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from certs.tls import certificate_lifetime_problem
from ii_api.http.request_clock import RequestClock, timeout_response
from interchange.broker.handshake_queue import HandshakeQueue
from interchange.broker.deadlines import came_in_time
from interchange.broker.tls_stream import HANDSHAKE_TIMEOUT, ContextSource, TlsSession, TlsStep, step_error

log = logging.getLogger(__name__)

EventSink = Callable[[str, str, dict], None]  #: (level, event, fields)
HANDSHAKE_TIMEOUT_S = 10.0
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 10.0


class TlsTransport(asyncio.Transport):
    """Plaintext side of one TLS connection, as the inner protocol (aiohttp) sees it."""

    def __init__(self, raw: asyncio.Transport, session: TlsSession, clock: RequestClock | None = None) -> None:
        super().__init__()
        self._raw, self._session, self._clock = raw, session, clock
        self._protocol: asyncio.BaseProtocol | None = None
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        match name:
            case "ssl_object":
                return self._session.ssl_object
            case "peercert":
                return self._session.ssl_object.getpeercert()
            case "sslcontext":
                return self._session.ssl_object.context
            case "cipher":
                return self._session.ssl_object.cipher()
            case "request_clock":
                return self._clock
            case _:
                return self._raw.get_extra_info(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        records = self._session.send(bytes(data))
        if records:
            self._raw.write(records)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(bytes(d) for d in list_of_data))

    def can_write_eof(self) -> bool:
        return False  # TLS has close_notify, not a half close

    def write_eof(self) -> None:
        raise NotImplementedError("TLS connections cannot half-close")

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        notify = self._session.close()
        if notify and not self._raw.is_closing():
            self._raw.write(notify)
        self._raw.close()

    def abort(self) -> None:
        self._closing = True
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._closing or self._raw.is_closing()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol


class TlsServerProtocol(asyncio.Protocol):
    """One accepted socket: the TLS session, then the inner (HTTP) protocol over plaintext."""

    def __init__(self, inner: Callable[[], asyncio.Protocol], context: ContextSource,
                 event: EventSink, max_certificate_days: int | None, timeouts: tuple[float, float, float],
                 handshakes: HandshakeQueue) -> None:
        self._inner_factory, self._event, self._handshakes = inner, event, handshakes
        self._context, self._max_days, self._timeouts = context, max_certificate_days, timeouts
        self._session: TlsSession | None = None
        self._clock: RequestClock | None = None
        self._raw: asyncio.Transport | None = None
        self._inner: asyncio.Protocol | None = None
        self._tls_transport: TlsTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._peer = "?"
        #: handshake input waiting for its turn in the HandshakeQueue (None: not queued)
        self._handshake_input: bytearray | None = None
        self._input_at = 0.0  #: when the last of the waiting handshake input arrived
        self._step_at = 0.0  #: when the last of the input in the step that is out arrived
        self._step_out = False  #: a handshake step is on the worker: the session is not ours meanwhile
        self._dropped = False  #: refused or closed while a step was out: its outcome is dropped
        #: the handshake's deadline passed while input that came before it waited for its step: no timer
        #: until the step is back (the deadline then moves by the node's time with that input)
        self._overdue = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._session = TlsSession(self._context, _now(), self._timeouts[0])
        self._arm()

    def _refuse(self, reason: str, **fields: Any) -> None:
        self._cancel_timer()
        self._event("warning", "tls_refused", {"interface": "ii", "peer": self._peer, **fields, "reason": reason})
        if self._raw is not None:
            self._raw.close()  # after the alert already written: close, not abort

    # deadlines: the handshake's, then the request clock's ------------------------------
    def _arm(self) -> None:
        deadline = self._clock.deadline if self._clock is not None else (
            self._session.deadline if self._session is not None and not self._overdue else None)
        at = deadline.at if deadline is not None else None
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = asyncio.get_running_loop().call_at(at, self._deadline_passed) if at is not None else None

    def _deadline_passed(self) -> None:
        self._timer, self._timer_at = None, None
        now = _now()
        if self._clock is None:
            waiting = self._step_at if self._step_out else (
                self._input_at if self._handshake_input is not None else None)
            if came_in_time(self._session.deadline if self._session is not None else None, waiting):
                # the node is late, not the client: its step decides
                self._overdue = True
                return
            if self._step_out:  # the session is the worker's: refused now, the step's outcome dropped
                self._dropped = True
                self._refuse(HANDSHAKE_TIMEOUT)
                return
            if self._session is not None and self._session.on_timer(now) is not None:
                self._refuse(HANDSHAKE_TIMEOUT)
                return
        else:
            timeout = self._clock.on_timer(now)
            if timeout is not None:
                self._event("warning", "request_timeout", {"interface": "ii", "peer": self._peer,
                                                           "stage": timeout.stage, "timeout_s": timeout.timeout_s,
                                                           "reason": timeout.reason})
                if timeout.respond and self._tls_transport is not None:
                    self._tls_transport.write(timeout_response(timeout))
                if self._tls_transport is not None:
                    self._tls_transport.close()
                return
        self._arm()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, None

    def data_received(self, data: bytes) -> None:
        session = self._session
        assert session is not None
        if self._step_out or not session.established:  # a handshake step: in the queue's turn
            self._input_at = _now()  # its records' plaintext is timed from here, not from the step
            if self._handshake_input is None:
                self._handshake_input = bytearray(data)
                if not self._step_out:  # else submitted again when the step comes back
                    self._handshakes.submit(self)
            else:
                self._handshake_input += data
            return
        self._received(data, _now())

    def handshake_work(self) -> Callable[[], ssl.SSLError | None] | None:
        """The waiting handshake input fed to the session, and its OpenSSL call as the step for the
        :class:`HandshakeQueue` (None: closing)."""
        data, raw, session = self._handshake_input, self._raw, self._session
        if data is None or raw is None or session is None or raw.is_closing():
            return None  # closed meanwhile (its deadline, the peer): nothing more to do for it
        self._handshake_input, self._step_out, self._step_at = None, True, self._input_at
        session.feed(bytes(data))
        return session.handshake

    def handshake_done(self, outcome: ssl.SSLError | BaseException | None) -> None:
        """A handshake step's outcome, back on the loop: applied unless the connection was closed meanwhile."""
        self._step_out = False
        raw, session = self._raw, self._session
        assert raw is not None and session is not None
        if self._dropped or raw.is_closing():
            self._handshake_input = None
            return
        try:
            failure = step_error(outcome)
            if failure is not None:
                raise failure
            step = session.handshook(outcome if isinstance(outcome, ssl.SSLError) else None)
            session.postpone(_now() - self._step_at)  # the node's time with the peer's input is not the peer's
            self._overdue = False
            self._step(step, self._step_at)
            self._arm()
            more = self._handshake_input
            if more is not None and session.established and not raw.is_closing():
                self._handshake_input = None  # the rest is records (a request): read here
                self._received(bytes(more), self._input_at)
            elif more is not None:
                self._handshakes.submit(self)  # closing meanwhile: the queue skips it
        except Exception:  # as asyncio does for data_received: logged, this connection dropped
            log.exception("II connection from %s: its input failed", self._peer)
            self._handshake_input = None
            raw.abort()

    def _received(self, data: bytes, at: float) -> None:
        session = self._session
        assert session is not None
        self._step(session.receive(data), at)

    def _step(self, step: TlsStep, at: float) -> None:
        """Apply a session step; ``at``: when the ciphertext it read arrived."""
        raw = self._raw
        assert raw is not None
        if step.send:
            raw.write(step.send)
        if step.error is not None:
            if self._inner is None:
                self._refuse(step.error)
            else:
                self._event("warning", "tls_error", {"interface": "ii", "peer": self._peer, "reason": step.error})
                raw.close()
            return
        if step.established and not self._established(at):
            return
        if step.data and self._inner is not None:
            if self._clock is not None:
                self._clock.received(at, step.data)
            self._inner.data_received(step.data)
            self._arm()
        if step.closed and self._inner is not None and not self._inner.eof_received():
            raw.close()

    def _established(self, at: float) -> bool:
        """Start the inner protocol, unless the client certificate is refused (IP_051); the first request's
        headers are timed from ``at``, when the client's last handshake flight arrived, not from this turn."""
        assert self._raw is not None and self._session is not None
        self._cancel_timer()
        problem = (certificate_lifetime_problem(self._session.ssl_object, self._max_days)
                   if self._max_days is not None else None)
        if problem is not None:
            self._refuse(problem)
            return False
        inner = self._inner_factory()
        self._clock = RequestClock(at, self._timeouts[1], self._timeouts[2])
        self._clock.on_change = self._arm
        transport = TlsTransport(self._raw, self._session, self._clock)
        transport.set_protocol(inner)
        self._inner, self._tls_transport = inner, transport
        inner.connection_made(transport)
        self._arm()
        return True

    def eof_received(self) -> bool | None:
        if self._inner is not None:
            self._inner.eof_received()
        return None  # the socket closes: a TLS peer that sent EOF is gone

    def connection_lost(self, exc: Exception | None) -> None:
        self._dropped = self._dropped or self._step_out
        self._cancel_timer()
        # the inner protocol, its transport and the request clock's callback held this one in cycles that only
        # a full collection would free: dropped here, the connection goes with its reference count
        inner, self._inner, self._tls_transport = self._inner, None, None
        if self._clock is not None:
            self._clock.on_change = None
        if inner is not None:
            inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()


class TlsSite(web.BaseSite):
    """``aiohttp.web.TCPSite`` with :class:`TlsServerProtocol` in place of asyncio's TLS."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, context: ContextSource, *,
                 event: EventSink, max_certificate_days: int | None = None,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S, header_timeout_s: float = HEADER_TIMEOUT_S,
                 body_timeout_s: float = BODY_TIMEOUT_S, handshakes: HandshakeQueue | None = None) -> None:
        super().__init__(runner)
        #: shared with the BI server in a node; a site of its own gets its own queue
        self._own_queue = handshakes is None
        self._handshakes = handshakes if handshakes is not None else HandshakeQueue()
        self._host, self._port, self._context = host, port, context
        self._event, self._max_days = event, max_certificate_days
        self._timeouts = (handshake_timeout_s, header_timeout_s, body_timeout_s)

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None

        def protocol() -> TlsServerProtocol:
            return TlsServerProtocol(server, self._context, self._event, self._max_days, self._timeouts,
                                     self._handshakes)

        self._server = await asyncio.get_running_loop().create_server(protocol, self._host, self._port,
                                                                       reuse_address=True)

    async def stop(self) -> None:
        await super().stop()
        if self._own_queue:  # a node's queue is the BI server's: it closes it
            self._handshakes.close()


def _now() -> float:
    """The clock of the deadlines: the event loop's (monotonic)."""
    return asyncio.get_running_loop().time()


__all__ = ["BODY_TIMEOUT_S", "HANDSHAKE_TIMEOUT_S", "HEADER_TIMEOUT_S", "TlsServerProtocol", "TlsSite",
           "TlsTransport"]
