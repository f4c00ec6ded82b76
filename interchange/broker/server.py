"""asyncio I/O around the sans-I/O broker: TLS sockets in, SASL, proton engine, bytes out.

This layer only moves bytes and time. TLS is terminated per connection by a sans-I/O
:class:`~interchange.broker.tls_stream.TlsSession` with the node's TLS settings (IP_019/053/054:
TLS 1.3 only, client certificate required and checked against the trust bundle and CRLs), so a
refused handshake gets its alert and a ``tls_refused`` log event; the connection's identity is
the peer certificate's CN.
Output is flushed once for every connection that has something to send, after the next loop turn's input
(batching over wake-ups). Arriving connections' handshake steps wait in a queue and run on a
worker thread at a low priority (:mod:`interchange.broker.handshake_queue`), so a burst of them does
not hold up established ones. While a step is out the session is the worker's: input waits, a
deadline refuses the connection and drops the step's outcome, and a peer that left while its last
step was out is heard out when the step comes back (its records once, in order).
"""
from __future__ import annotations

import asyncio
import logging
import ssl
import traceback
from collections.abc import Callable

from certs.errors import PeerIdentityError
from certs.revocation import Revocations
from certs.tls import certificate_lifetime_problem, peer_common_name
from interchange.broker.engine import ConnectionEngine, DeliveryLog, EngineLimits
from interchange.broker.handshake_queue import HandshakeQueue
from interchange.broker.router import BrokerCore
from interchange.broker.sasl import SaslServer
from interchange.broker.deadlines import came_in_time
from interchange.broker.tls_stream import HANDSHAKE_TIMEOUT, ContextSource, TlsSession, TlsStep, step_error
from interchange.ground.timing import now_ms

log = logging.getLogger(__name__)



def _now() -> float:
    """The clock of the stage deadlines: the event loop's (monotonic)."""
    return asyncio.get_running_loop().time()


class AmqpConnection(asyncio.Protocol):
    """One client connection: TCP transport -> TLS session -> SASL -> proton engine."""

    def __init__(self, server: "BrokerServer", plain_identity: str | None,
                 context: ContextSource | None = None) -> None:
        self._server = server
        self._plain_identity = plain_identity
        self._context = context
        self._tls: TlsSession | None = None
        self._transport: asyncio.Transport | None = None
        self._sasl: SaslServer | None = None  #: from the end of the TLS handshake
        #: the timer of the current preamble stage's deadline, and when it fires (None: no deadline left)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._preamble = True  #: until the peer's open: a stage deadline may be pending
        #: handshake input waiting for its turn in the server's HandshakeQueue (None: not queued)
        self._handshake_input: bytearray | None = None
        #: when the last of the waiting handshake input came, and of the input of the step that is out:
        #: the protocol header's deadline runs from the client's last flight, not from its turn
        self._input_at: float | None = None
        self._step_input_at: float | None = None
        self._step_out = False  #: a handshake step is on the worker: the session is not ours meanwhile
        self._dropped = False  #: refused (its deadline, a failed step) while a step was out: its outcome is dropped
        #: the handshake's deadline passed while input that came before it waited for its step: no timer
        #: until the step is back (the deadline then moves by the node's time with that input)
        self._overdue = False
        self._lost: tuple[Exception | None] | None = None  #: connection_lost while a step was out
        #: a step's outcome that came back while the socket was closing: heard out by connection_lost
        self._unheard: TlsStep | None = None
        self.engine: ConnectionEngine | None = None
        self.identity = ""
        self.peer = ""

    # asyncio callbacks ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peername = transport.get_extra_info("peername")
        self.peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        if self._context is not None:
            # The node's context source (ReloadingTls.current) gives the current context (CRL) here.
            self._tls = TlsSession(self._context, _now(), self._server.limits.handshake_timeout_s)
            self._arm()
            return
        self.identity = self._plain_identity or ""
        self._opened(_now())

    def _opened(self, since: float) -> None:
        """The peer is known (TLS established, or a plain listener's identity); ``since``: when the input that
        established it arrived, where the protocol header's stage starts."""
        if not self.identity:
            self._server.event("warning", "connection_refused", {"peer": self.peer, "reason": "no identity"})
            self._close()
            return
        self._sasl = SaslServer(now=since, timeouts=self._server.limits.stage_timeouts)
        self._server.connection_opened(self)
        self._arm()

    # stage deadlines --------------------------------------------------------------
    def _arm(self) -> None:
        """Arm the one timer at the current stage's deadline (TLS, then SASL, then the engine's open)."""
        if not self._preamble:
            return
        layer = self._layer()
        deadline = layer.deadline if layer is not None else None
        at = deadline.at if deadline is not None and not (self._overdue and layer is self._tls) else None
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, at
        if at is None:
            self._preamble = self.engine is None  # the engine's open came: no stage is left
            return
        self._timer = asyncio.get_running_loop().call_at(at, self._deadline_passed)

    def _layer(self) -> TlsSession | SaslServer | ConnectionEngine | None:
        if self._tls is not None and (self._step_out or not self._tls.established):
            return self._tls
        return self.engine if self.engine is not None else self._sasl

    def _deadline_passed(self) -> None:
        self._timer, self._timer_at = None, None
        now, layer = _now(), self._layer()
        if isinstance(layer, TlsSession):
            waiting = self._step_input_at if self._step_out else (
                self._input_at if self._handshake_input is not None else None)
            if came_in_time(layer.deadline, waiting):  # the node is late, not the client: its step decides
                self._overdue = True
                return
            if self._step_out:  # the session is the worker's: refused now, the step's outcome dropped
                self._dropped = True
                self._server.event("warning", "tls_refused", {"peer": self.peer, "reason": HANDSHAKE_TIMEOUT})
                self.abort()
                return
            if layer.on_timer(now) is not None:
                self._server.event("warning", "tls_refused", {"peer": self.peer, "reason": HANDSHAKE_TIMEOUT})
                self.abort()
                return
        elif isinstance(layer, SaslServer):
            deadline = layer.deadline
            step = layer.on_timer(now)
            if step is not None and deadline is not None:
                self._server.event("warning", "preamble_timeout", {
                    "peer": self.peer, "identity": self.identity, "stage": deadline.stage,
                    "timeout_s": deadline.timeout_s, "reason": step.error})
                self._close()
                return
        elif layer is not None:
            layer.on_timer(now)
            self._mark_dirty()
        self._arm()

    def data_received(self, data: bytes) -> None:
        tls = self._tls
        if tls is None:
            self._plain_received(data, _now())
            return
        if self._step_out or not tls.established:  # a handshake step: in the queue's turn
            self._input_at = _now()  # the header's stage starts when the last of the flight arrived
            if self._handshake_input is None:
                self._handshake_input = bytearray(data)
                if not self._step_out:  # else submitted again when the step comes back
                    self._server.handshakes.submit(self)
            else:
                self._handshake_input += data
            return
        self._tls_step(tls, tls.receive(data), _now())

    def handshake_work(self) -> Callable[[], ssl.SSLError | None] | None:
        """The waiting handshake input fed to the session, and its OpenSSL call as the step for the
        server's :class:`HandshakeQueue` (None: closing)."""
        data, tls, transport = self._handshake_input, self._tls, self._transport
        if data is None or tls is None or transport is None or transport.is_closing():
            return None  # closing meanwhile (its deadline, the peer): connection_lost hears the input out
        self._handshake_input, self._step_out = None, True
        self._step_input_at, self._input_at = self._input_at, None
        tls.feed(bytes(data))
        return tls.handshake

    def handshake_done(self, outcome: ssl.SSLError | BaseException | None) -> None:
        """A handshake step's outcome, back on the loop: applied unless the connection was refused meanwhile;
        a peer that left meanwhile is finished now (whatever applying the outcome raised)."""
        self._step_out = False
        failure = step_error(outcome)
        try:
            self._apply_step(outcome)
        except Exception as exc:  # noqa: BLE001 - as asyncio does for data_received: logged, this connection dropped
            failure = exc
        if failure is not None and not self._dropped:
            log.error("connection from %s: its input failed", self.peer, exc_info=failure)
            self._handshake_input, self._dropped = None, True
            self.abort()
        if self._lost is not None:
            self._finish_lost(*self._lost)

    def _apply_step(self, outcome: ssl.SSLError | BaseException | None) -> None:
        tls, transport = self._tls, self._transport
        assert tls is not None
        if self._dropped:  # refused meanwhile (its deadline)
            self._handshake_input = None
            return
        if step_error(outcome) is not None:
            return  # the step failed: handshake_done drops the connection
        step = tls.handshook(outcome if isinstance(outcome, ssl.SSLError) else None)
        if transport is not None and transport.is_closing():
            self._unheard = step  # the peer reset or closed: connection_lost comes next and hears it out
            return
        step_at = self._step_input_at if self._step_input_at is not None else _now()
        tls.postpone(_now() - step_at)  # the node's time with the peer's input is not the peer's
        self._overdue = False
        self._tls_step(tls, step, step_at)
        self._arm()
        more = self._handshake_input
        if more is not None and (self._lost is not None or tls.established):
            self._handshake_input = None  # the rest is records (cheap), or the peer is gone: here
            self._tls_step(tls, tls.receive(bytes(more)), self._input_at if self._input_at is not None else _now())
        elif more is not None:
            self._server.handshakes.submit(self)

    def _tls_step(self, tls: TlsSession, step: TlsStep, at: float) -> None:
        """Apply a session step; ``at``: when the ciphertext it read arrived (its plaintext's stage starts then)."""
        transport = self._transport
        if step.send and transport is not None:
            transport.write(step.send)
        if step.error is not None:
            self._cancel_timer()
            if tls.established:
                self._server.event("warning", "tls_error", {"peer": self.peer, "identity": self.identity,
                                                             "reason": step.error})
            else:
                self._server.event("warning", "tls_refused", {"peer": self.peer, "reason": step.error})
            if transport is not None:
                transport.close()
            return
        if step.established:
            try:
                self.identity = peer_common_name(tls.ssl_object)
            except PeerIdentityError:
                self.identity = ""
            max_days = self._server.max_peer_certificate_days
            problem = certificate_lifetime_problem(tls.ssl_object, max_days) if max_days is not None else None
            if problem is not None:  # IP_051, when configured (tls.max_certificate_days)
                self._server.event("warning", "tls_refused", {"peer": self.peer, "identity": self.identity,
                                                              "reason": problem})
                self.identity = ""
                self._close()
                return
            self._opened(at)
        if step.data and self.identity and transport is not None and not transport.is_closing():
            self._plain_received(step.data, at)
        if step.closed:
            self._peer_closed()

    def _write(self, data: bytes | bytearray) -> None:
        """Plaintext out: encrypted when the connection is TLS."""
        if self._transport is None:
            return
        if self._tls is not None:
            self._transport.write(self._tls.send(data))
        else:
            self._transport.write(data)

    def _close(self) -> None:
        """Graceful close: close_notify first (best effort), then the socket once written."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._tls is not None:
            goodbye = self._tls.close()
            if goodbye:
                transport.write(goodbye)
        transport.close()

    def _plain_received(self, data: bytes, at: float) -> None:
        """Plaintext in; ``at``: when it arrived on the socket, where the SASL exchange's deadline starts
        (bytes that waited behind a handshake step are not given the wait as extra time). The open's starts
        when SASL's outcome is sent: the client may wait for it."""
        if self.engine is None:
            if self._sasl is None or self._sasl.finished:
                return  # refused or failed: the socket is closing
            step = self._sasl.receive(data, at)
            if step.send:
                self._write(step.send)
            if step.error is not None:
                self._server.event("warning", "sasl_failed", {"peer": self.peer, "identity": self.identity,
                                                               "reason": step.error})
                self._close()
                return
            if not step.done:
                self._arm()
                return
            self.engine = ConnectionEngine(self._server.core, self.identity, self._server.limits,
                                           self._mark_dirty, self._engine_event, now=_now())
            self.engine.links.accepting = self._server.accepting
            self.engine.delivery_log = self._server.delivery_log  # IP_010 departure times, while logged
            data = step.amqp_bytes
            if not data:
                self._arm()
                return
        try:
            self.engine.receive(data)
        except Exception as exc:  # noqa: BLE001 - a fault the peer's bytes reached: closed, logged, never raised
            self._engine_failed(exc)
        self._mark_dirty()
        if self._preamble:
            self._arm()

    def _engine_failed(self, exc: Exception) -> None:
        """The engine raised on the peer's bytes (a defect: every field is checked): the connection is
        closed with ``amqp:internal-error`` and the fault logged as an error record, not a traceback."""
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ is not None else None
        self._server.event("error", "engine_error", {
            "peer": self.peer, "identity": self.identity, "error": f"{type(exc).__name__}: {exc}",
            "where": f"{where.filename}:{where.lineno} {where.name}" if where is not None else None})
        assert self.engine is not None
        try:
            self.engine.fail("amqp:internal-error", "the broker could not process the connection's input", None)
        except Exception:  # noqa: BLE001 - proton's state is unknown: drop the socket
            self.abort()

    def eof_received(self) -> bool | None:
        self._peer_closed()
        return None

    def _peer_closed(self) -> None:
        if self.engine is not None:
            self.engine.receive_eof()
            self._mark_dirty()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at, self._preamble = None, None, False

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._step_out:  # finished when the step comes back (its outcome heard out, or dropped)
            self._lost = (exc,)
            return
        self._finish_lost(exc)

    def _finish_lost(self, exc: Exception | None) -> None:
        self._lost = None
        unheard, self._unheard = self._unheard, None
        if unheard is not None and self._tls is not None:
            self._tls_step(self._tls, unheard, _now())
        if self._handshake_input is not None and self._tls is not None and not self._dropped:
            # The peer's last handshake bytes came before it went: heard out (its identity, the
            # connect and disconnect records), nothing written back (no transport any more).
            data, self._handshake_input = self._handshake_input, None
            self._tls_step(self._tls, self._tls.receive(bytes(data)), _now())
        self._cancel_timer()
        if self.engine is not None:
            self.engine.release()
        self._server.connection_closed(self, exc)

    def pause_writing(self) -> None:
        if self.engine is not None:
            self.engine.set_paused(True)

    def resume_writing(self) -> None:
        if self.engine is not None:
            self.engine.set_paused(False)
            self._mark_dirty()

    # helpers -------------------------------------------------------------------------
    def _mark_dirty(self) -> None:
        self._server.mark_dirty(self)

    def _engine_event(self, kind: str, fields: dict) -> None:
        level = "warning" if kind in ("transport_error", "link_refused", "preamble_timeout") else "info"
        self._server.event(level, kind, {"peer": self.peer, "identity": self.identity, **fields})

    def flush(self) -> None:
        """Move proton's output to the socket: at most one chunk per loop turn, nothing while the
        socket is back-pressured (proton keeps it; the flow stops at the links)."""
        engine, transport = self.engine, self._transport
        if engine is None or transport is None or transport.is_closing() or engine.paused:
            return
        engine.output_marked = False
        out = engine.take_output()
        if out:
            self._write(out)
        if engine.finished:
            self._close()
        elif engine.has_output and not engine.paused:
            self._mark_dirty()

    def tick(self, now_ms: int) -> None:
        if self.engine is not None:
            self.engine.tick(now_ms)
            self._mark_dirty()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def peer_certificate(self) -> bytes | None:
        """The verified peer certificate (DER) of a TLS connection, None for plain ones."""
        if self._tls is None or not self._tls.established:
            return None
        return self._tls.ssl_object.getpeercert(binary_form=True)

    def close_for_shutdown(self, link_condition: str, condition: str, description: str) -> None:
        """Detach every link and close the connection with conditions a client acts on (reconnect
        later), flush, then close the socket once written."""
        if self.engine is not None:
            self.engine.detach_all(link_condition, description)
            self.engine.close(condition, description)
            out = self.engine.take_output()
            if out:
                self._write(out)
        self._close()

    def close_revoked(self, reason: str) -> None:
        """The peer's certificate was revoked after the handshake: AMQP close with
        ``amqp:unauthorized-access`` (clients see why), close_notify, then the socket."""
        if self.engine is not None:
            self.engine.close("amqp:unauthorized-access", reason)
            out = self.engine.take_output()
            if out:
                self._write(out)
        self._close()


class BrokerServer:
    """Listening sockets and the set of live connections of one broker process."""

    def __init__(self, core: BrokerCore, limits: EngineLimits | None = None,
                 event: Callable[[str, str, dict], None] | None = None,
                 housekeeping_interval: float = 1.0) -> None:
        self.core = core
        self.limits = limits or EngineLimits()
        self._event = event
        self.connections: set[AmqpConnection] = set()
        #: arriving connections' handshake steps, on a low-priority worker and paced (CPU share per second)
        self.handshakes = HandshakeQueue(cpu_share=self.limits.handshake_cpu_share,
                                         thread=self.limits.handshake_thread, cpus=self.limits.handshake_cpus,
                                         loop_placed=self.limits.handshake_loop_placed)
        self._dirty: set[AmqpConnection] = set()
        self._flush_scheduled = False
        self._servers: list[asyncio.base_events.Server] = []
        self._housekeeping: asyncio.Task | None = None
        self._interval = housekeeping_interval
        self.delivery_log: DeliveryLog | None = None
        #: IP_051: peer certificates valid for longer are refused (None: not checked)
        self.max_peer_certificate_days: int | None = None
        self.accepting = True  #: False once shutting down: new messages are released
        log = core.observer.log
        if log is not None:
            if hasattr(log, "on_change"):
                log.on_change(self.message_logging_changed)
            self.message_logging_changed()

    def message_logging_changed(self) -> None:
        """Give engines the per-delivery hook only while message logging is on (IP_010/119)."""
        log = self.core.observer.log
        self.delivery_log = self.core.observer if log is not None and log.messages_on else None
        for connection in self.connections:
            if connection.engine is not None:
                connection.engine.delivery_log = self.delivery_log

    def event(self, level: str, kind: str, fields: dict) -> None:
        if self._event is not None:
            self._event(level, kind, fields)

    async def listen_tls(self, host: str, port: int, context: ContextSource) -> int:
        """Listen for AMQP over TLS 1.3 (IP_019); returns the bound port.

        TLS is terminated by each connection's own TlsSession over a plain TCP server, so that a
        refused handshake sends its alert and is logged (``tls_refused``)."""
        server = await asyncio.get_running_loop().create_server(
            lambda: AmqpConnection(self, None, context), host, port, backlog=2048)
        self._servers.append(server)
        self._start_housekeeping()
        return server.sockets[0].getsockname()[1]

    async def listen_plain(self, host: str, port: int, identity: str) -> int:
        """Plain AMQP for local development only: every connection gets ``identity``."""
        server = await asyncio.get_running_loop().create_server(
            lambda: AmqpConnection(self, identity), host, port, backlog=2048)
        self._servers.append(server)
        self._start_housekeeping()
        return server.sockets[0].getsockname()[1]

    def _start_housekeeping(self) -> None:
        if self._housekeeping is None:
            self._housekeeping = asyncio.get_running_loop().create_task(self._housekeep())

    async def _housekeep(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            now = now_ms()
            self.core.expire()
            for connection in list(self.connections):
                connection.tick(now)

    def connection_opened(self, connection: AmqpConnection) -> None:
        self.connections.add(connection)
        self.event("info", "connect", {"peer": connection.peer, "identity": connection.identity})

    def connection_closed(self, connection: AmqpConnection, exc: Exception | None) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            self._dirty.discard(connection)
            self.event("info", "disconnect", {"peer": connection.peer, "identity": connection.identity,
                                              "error": str(exc) if exc else None})

    def close_revoked(self, revocations: Revocations) -> int:
        """Close every open connection whose peer certificate ``revocations`` lists (a CRL reloaded
        while it was connected); each is logged. Returns how many were closed."""
        closed = 0
        for connection in list(self.connections):
            der = connection.peer_certificate()
            entry = revocations.lookup(der) if der else None
            if entry is None:
                continue
            self.event("warning", "connection_revoked", {"interface": "bi", "peer": connection.peer,
                                                         "identity": connection.identity, "reason": entry.describe()})
            connection.close_revoked(entry.describe())
            closed += 1
        return closed

    def mark_dirty(self, connection: AmqpConnection) -> None:
        self._dirty.add(connection)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            # (while handshakes wait, a handshake turn could come between: the flush is not deferred then)
            asyncio.get_running_loop().call_soon(self._flush if len(self.handshakes) else self._flush_after_input)

    def _flush_after_input(self) -> None:
        """The flush comes after the input that the next loop turn reads: one write then carries what
        several reads caused (on a TCP socket each write is a system call that also runs the peer's
        receive: the largest single cost of a bridged message), and the peers are woken less often; a
        lone output waits one loop turn more (an idle loop's turn: microseconds)."""
        asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, set()
        for connection in dirty:
            connection.flush()

    def stop_accepting(self) -> None:
        """Shutdown, first step: no new connections, and every new message is released."""
        for server in self._servers:
            server.close()
        self.accepting = False
        for connection in self.connections:
            if connection.engine is not None:
                connection.engine.links.accepting = False

    async def close_connections(self, grace_s: float) -> int:
        """Shutdown, last step: detach every link (``amqp:link:detach-forced``) and close every
        connection (``amqp:connection:forced``: clients reconnect later); wait up to ``grace_s`` for
        the sockets to close. Returns how many connections were closed."""
        connections = list(self.connections)
        description = "the interchange is shutting down; reconnect after it restarts"
        for connection in connections:
            connection.close_for_shutdown("amqp:link:detach-forced", "amqp:connection:forced", description)
        deadline = asyncio.get_running_loop().time() + grace_s
        while self.connections and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        return len(connections)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            connection.abort()
        for server in self._servers:
            await server.wait_closed()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            self._housekeeping = None
        self.handshakes.close()
