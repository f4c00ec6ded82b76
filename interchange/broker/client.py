"""The node's own AMQP 1.0 client: receiver links to another interchange's sources (federation),
and sender links for the node's bridges, which publish into a broker as local C-ITS actors (with a
callback per outcome if wanted), and receivers settled later (after the bridge passed the message on).

:class:`ClientEngine` is sans-I/O (bytes in, bytes out, callbacks for messages); proton's engine
does the framing in client mode and the node runs SASL EXTERNAL itself (its identity is its TLS
client certificate, IP_050). :class:`ClientConnection` moves the bytes over an asyncio TLS stream.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import cproton
from cproton_ffi import ffi, lib
from proton import Data, Described, symbol

from interchange.broker.engine import SELECTOR_DESCRIPTOR_SYMBOL
from interchange.broker.proton_io import ProtonConnection
from interchange.broker.sasl import SaslClient
from interchange.broker.wire_text import condition_line

log = logging.getLogger(__name__)

#: on_message(raw bytes) -> None to accept, or an error description to reject.
MessageCallback = Callable[[bytes], "str | None"]
#: on_message(raw bytes, delivery) for a receiver that settles later with :meth:`ClientEngine.settle`.
DeferredCallback = Callable[[bytes, Any], None]
#: settle(..., outcome): None accepts, RELEASE gives the message back to the source, text rejects.
RELEASE = "released"


@dataclass(frozen=True)
class Outcome:
    """The peer's answer to a sent message: accepted, or why not (a rejection, released, lost).

    ``final``: the peer will never take this message, so sending it again is pointless: its
    rejected outcome, or the message is over the link's max-message-size and was not sent.
    Released, modified and unanswered messages (link or connection gone) are not final."""

    accepted: bool
    error: str | None = None
    final: bool = False


@dataclass
class ReceiverState:
    """One receiver link opened by the client."""

    address: str
    selector: str | None
    credit: int
    on_message: MessageCallback
    link: Any = None
    opened: bool = False
    closed: bool = False
    error: str | None = None
    received: int = 0
    deferred: DeferredCallback | None = None  #: set: settled later by :meth:`ClientEngine.settle`
    unsettled: set[Any] = field(default_factory=set)


@dataclass
class SenderState:
    """One sender link opened by the client; outcomes counted from the broker's dispositions."""

    address: str
    link: Any = None
    opened: bool = False
    closed: bool = False
    error: str | None = None
    sent: int = 0
    accepted: int = 0
    rejected: int = 0
    last_rejection: str | None = None
    #: outcome callbacks of deliveries sent with one (:meth:`ClientEngine.send`)
    pending: dict[Any, Callable[[Outcome], None]] = field(default_factory=dict)

    @property
    def credit(self) -> int:
        return int(lib.pn_link_credit(self.link)) if self.link is not None and not self.closed else 0

    @property
    def max_message_size(self) -> int | None:
        """The peer's max-message-size for this link (AMQP 1.0 2.7.3, from its attach); None while
        unknown or when it sets none: a larger message would be refused with a detach."""
        if self.link is None or not self.opened:
            return None
        size = int(lib.pn_link_remote_max_message_size(self.link))
        return size or None


class ClientEngine:
    """Sans-I/O AMQP 1.0 client connection with receiver links (proton engine, client mode)."""

    def __init__(self, container_id: str, hostname: str | None = None, idle_timeout_ms: int = 0) -> None:
        self._proton = ProtonConnection(server=False)
        if idle_timeout_ms:  # AMQP idle time-out: empty frames both ways, a silent peer is dropped
            lib.pn_transport_set_idle_timeout(self._proton.transport, idle_timeout_ms)
        self._connection = self._proton.connection
        self._collector = self._proton.collector
        cproton.pn_connection_set_container(self._connection, container_id)
        if hostname:
            cproton.pn_connection_set_hostname(self._connection, hostname)
        lib.pn_connection_open(self._connection)
        self._session = lib.pn_session(self._connection)
        lib.pn_session_open(self._session)
        self._receivers: dict[Any, ReceiverState] = {}
        self._senders: dict[Any, SenderState] = {}
        self.flowed = False  #: a link got credit since the flag was cleared
        self.remote_error: str | None = None
        self.transport_error: str | None = None  #: why proton closed the transport (e.g. the idle time-out)
        self.closed = False
        self._names = 0

    def any_link_closed(self) -> bool:
        return any(state.closed for state in self._links())

    def any_link_opened(self) -> bool:
        """A link the peer attached (its terminus given, not refused)."""
        return any(state.opened for state in self._links())

    def open_receiver(self, state: ReceiverState) -> ReceiverState:
        self._names += 1
        link = cproton.pn_receiver(self._session, f"rx-{self._names}-{state.address}")
        cproton.pn_terminus_set_address(lib.pn_link_source(link), state.address)
        if state.selector is not None:
            data = Data(lib.pn_terminus_filter(lib.pn_link_source(link)))
            data.put_dict({symbol("jms-selector"): Described(symbol(SELECTOR_DESCRIPTOR_SYMBOL), state.selector)})
        lib.pn_link_set_rcv_settle_mode(link, lib.PN_RCV_FIRST)
        lib.pn_link_open(link)
        lib.pn_link_flow(link, state.credit)
        state.link = link
        self._receivers[link] = state
        return state

    def _links(self) -> list[ReceiverState | SenderState]:
        return [*self._receivers.values(), *self._senders.values()]

    def open_sender(self, state: SenderState) -> SenderState:
        self._names += 1
        link = cproton.pn_sender(self._session, f"tx-{self._names}-{state.address}")
        cproton.pn_terminus_set_address(lib.pn_link_target(link), state.address)
        lib.pn_link_open(link)
        state.link = link
        self._senders[link] = state
        return state

    def send(self, state: SenderState, message: bytes, on_outcome: Callable[[Outcome], None] | None = None) -> bool:
        """Send one encoded AMQP message (unsettled; the broker's outcome is counted and, with
        ``on_outcome``, reported: also when the link or connection goes first). False without credit."""
        if self.closed or state.credit <= 0:
            return False
        state.sent += 1
        delivery = cproton.pn_delivery(state.link, b"%d" % state.sent)
        cproton.pn_link_send(state.link, message)
        lib.pn_link_advance(state.link)
        if on_outcome is not None:
            state.pending[delivery] = on_outcome
        return True

    def settle(self, state: ReceiverState, delivery: Any, outcome: str | None) -> None:
        """Settle a deferred delivery: None accepts, :data:`RELEASE` releases, text rejects. A delivery of
        a closed connection or link is gone (the source keeps unsettled messages for the next link)."""
        if self.closed or state.closed or delivery not in state.unsettled:
            return
        state.unsettled.discard(delivery)
        if outcome is None:
            lib.pn_delivery_update(delivery, lib.PN_ACCEPTED)
        elif outcome == RELEASE:
            lib.pn_delivery_update(delivery, lib.PN_RELEASED)
        else:
            cond = lib.pn_disposition_condition(lib.pn_delivery_local(delivery))
            cproton.pn_condition_set_name(cond, "amqp:invalid-field")
            cproton.pn_condition_set_description(cond, outcome)
            lib.pn_delivery_update(delivery, lib.PN_REJECTED)
        lib.pn_delivery_settle(delivery)
        self._top_up(state)

    def _top_up(self, state: ReceiverState) -> None:
        """Credit back to the window; a deferred receiver counts what it has not settled yet."""
        credit = lib.pn_link_credit(state.link) + len(state.unsettled)
        if credit < state.credit // 2:
            lib.pn_link_flow(state.link, state.credit - credit)

    def lost(self, why: str) -> None:
        """The transport is gone: every link closed, every message in flight without an outcome."""
        self.closed = True
        for link_state in self._links():
            link_state.closed = True
        for sender in self._senders.values():
            self._fail_pending(sender, self.remote_error or why)

    @staticmethod
    def _fail_pending(state: SenderState, why: str) -> None:
        pending, state.pending = state.pending, {}
        for on_outcome in pending.values():
            on_outcome(Outcome(False, f"not settled: {why}"))

    def receive(self, data: bytes) -> None:
        self._proton.push(data, self._process)

    def receive_eof(self) -> None:
        self._proton.close_input()
        self._process()

    def take_output(self) -> bytes:
        self._process()
        out = []
        while self._proton.has_output:
            chunk = self._proton.take_output(4 * 1024 * 1024)
            if not chunk:
                break
            out.append(chunk)
        return b"".join(out)

    @property
    def finished(self) -> bool:
        return self._proton.closed

    def close(self) -> None:
        lib.pn_connection_close(self._connection)
        self._process()

    def tick(self, now_ms: int) -> int:
        """Drive the idle time-out (empty frames out, a silent peer detected); the next deadline in ms (0: none)."""
        deadline = lib.pn_transport_tick(self._proton.transport, now_ms)
        self._process()
        return int(deadline)

    def release(self) -> None:
        self._proton.release()

    def _process(self) -> None:
        collector = self._collector
        while True:
            event = lib.pn_collector_peek(collector)
            if event == ffi.NULL:
                return
            etype = lib.pn_event_type(event)
            if etype == lib.PN_DELIVERY:
                self._on_delivery(lib.pn_event_delivery(event))
            elif etype == lib.PN_LINK_FLOW:
                self.flowed = True
            elif etype == lib.PN_LINK_REMOTE_OPEN:
                link = lib.pn_event_link(event)
                state = self._receivers.get(link) or self._senders.get(link)
                # AMQP 1.0 2.6.3: a refused attach is answered with a null terminus, then the detach
                terminus = lib.pn_link_remote_source(link) if link in self._receivers else lib.pn_link_remote_target(link)
                if state is not None and lib.pn_terminus_get_type(terminus) != lib.PN_UNSPECIFIED:
                    state.opened = True
            elif etype in (lib.PN_LINK_REMOTE_CLOSE, lib.PN_LINK_REMOTE_DETACH):
                link = lib.pn_event_link(event)
                state = self._receivers.get(link) or self._senders.get(link)
                if state is not None:
                    state.closed = True
                    cond = lib.pn_link_remote_condition(link)
                    if lib.pn_condition_is_set(cond):
                        state.error = condition_line(cond)
                    lib.pn_link_close(link)
                    if isinstance(state, SenderState):
                        self._fail_pending(state, state.error or "link detached")
            elif etype == lib.PN_CONNECTION_REMOTE_CLOSE:
                cond = lib.pn_connection_remote_condition(self._connection)
                if lib.pn_condition_is_set(cond):
                    self.remote_error = condition_line(cond)
                lib.pn_connection_close(self._connection)
            elif etype == lib.PN_TRANSPORT_ERROR:
                self.transport_error = condition_line(lib.pn_transport_condition(self._proton.transport))
            elif etype == lib.PN_TRANSPORT_CLOSED:
                self.lost(self.transport_error or "connection closed")
            lib.pn_collector_pop(collector)

    def _on_outcome(self, state: SenderState, delivery: Any) -> None:
        outcome = lib.pn_delivery_remote_state(delivery)
        error = None
        if outcome == lib.PN_ACCEPTED:
            state.accepted += 1
        elif outcome in (lib.PN_REJECTED, lib.PN_RELEASED, lib.PN_MODIFIED):
            state.rejected += 1
            cond = lib.pn_disposition_condition(lib.pn_delivery_remote(delivery))
            error = {lib.PN_RELEASED: "released", lib.PN_MODIFIED: "modified"}.get(outcome, "rejected")
            if lib.pn_condition_is_set(cond):
                state.last_rejection = condition_line(cond)
                error = f"{error}: {state.last_rejection}"
        else:
            return
        on_outcome = state.pending.pop(delivery, None)
        lib.pn_delivery_settle(delivery)
        if on_outcome is not None:
            on_outcome(Outcome(error is None, error, final=outcome == lib.PN_REJECTED))

    def _on_delivery(self, delivery: Any) -> None:
        link = lib.pn_delivery_link(delivery)
        sender = self._senders.get(link)
        if sender is not None:
            self._on_outcome(sender, delivery)
            return
        state = self._receivers.get(link)
        if state is None or not lib.pn_delivery_readable(delivery) or lib.pn_delivery_partial(delivery):
            return
        size = lib.pn_delivery_pending(delivery)
        got, buf = cproton.pn_link_recv(link, size)
        lib.pn_link_advance(link)
        state.received += 1
        if state.deferred is not None and not lib.pn_delivery_settled(delivery):
            state.unsettled.add(delivery)
            state.deferred(bytes(buf[: max(got, 0)]), delivery)
            return
        error = state.on_message(bytes(buf[: max(got, 0)]))
        if not lib.pn_delivery_settled(delivery):
            if error is None:
                lib.pn_delivery_update(delivery, lib.PN_ACCEPTED)
            else:
                cond = lib.pn_disposition_condition(lib.pn_delivery_local(delivery))
                cproton.pn_condition_set_name(cond, "amqp:invalid-field")
                cproton.pn_condition_set_description(cond, error)
                lib.pn_delivery_update(delivery, lib.PN_REJECTED)
        lib.pn_delivery_settle(delivery)
        credit = lib.pn_link_credit(link)
        if credit < state.credit // 2:
            lib.pn_link_flow(link, state.credit - credit)


class ClientConnection(asyncio.Protocol):
    """An outgoing AMQP connection over TLS: SASL EXTERNAL, then the proton client engine."""

    def __init__(self, engine: ClientEngine) -> None:
        self.engine = engine
        self._sasl = SaslClient("EXTERNAL")
        self._transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.link_closed = asyncio.Event()  #: set when the peer detaches one of our links
        self.link_opened = asyncio.Event()  #: set when the peer answers one of our attaches with its terminus
        self._tick: asyncio.TimerHandle | None = None  #: the idle time-out's next deadline
        self._credit = asyncio.Event()  #: set when a link got credit
        self._send_lock = asyncio.Lock()  #: :meth:`publish` callers waiting for credit, in order
        self.on_receive: Callable[[], None] | None = None  #: called after received bytes were processed (new credit)

    @classmethod
    async def open(cls, host: str, port: int, context: ssl.SSLContext, server_hostname: str,
                   container_id: str, timeout: float = 10.0, idle_timeout_s: float = 0.0) -> "ClientConnection":
        """Connect, run SASL; with ``idle_timeout_s``, AMQP's idle time-out: a peer silent for that
        long (a half-open connection, a partition) is dropped (AMQP 1.0 2.4.5)."""
        loop = asyncio.get_running_loop()
        engine = ClientEngine(container_id, server_hostname, round(idle_timeout_s * 1000))
        # asyncio.timeout, not wait_for: the connect runs in this task, so cancelling it (stopping a
        # federation link) reaches the pending connect at once; Python 3.11's wait_for could leave
        # the outer task waiting on an inner connect task that never saw the cancellation.
        async with asyncio.timeout(timeout):
            _, protocol = await loop.create_connection(lambda: cls(engine), host, port, ssl=context,
                                                       server_hostname=server_hostname)
        try:
            async with asyncio.timeout(timeout):
                await protocol.ready
        except BaseException:  # refused, timed out or cancelled during SASL: drop the socket
            protocol.abort()
            raise
        return protocol

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def peer_certificate(self) -> bytes | None:
        """The peer's certificate (DER) from the TLS handshake; None without one."""
        ssl_object = self._transport.get_extra_info("ssl_object") if self._transport is not None else None
        return ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.write(self._sasl.start())

    def data_received(self, data: bytes) -> None:
        if not self._sasl.finished:
            step = self._sasl.receive(data)
            if step.error is not None:
                if not self.ready.done():
                    self.ready.set_exception(ConnectionError(step.error))
                assert self._transport is not None
                self._transport.close()
                return
            if not step.done:
                return
            if not self.ready.done():
                self.ready.set_result(None)
            self._ticked()
            data = step.amqp_bytes
        if data:
            self.engine.receive(data)
        if not self.link_closed.is_set() and self.engine.any_link_closed():
            self.link_closed.set()
        if not self.link_opened.is_set() and self.engine.any_link_opened():
            self.link_opened.set()
        if self.engine.flowed:
            self.engine.flowed = False
            self._credit.set()
        if self.on_receive is not None:
            self.on_receive()
        self.flush()
        if self._tick is None and self._sasl.finished:
            self._ticked()  # no deadline yet (the peer's open just came with its idle time-out)

    def _ticked(self) -> None:
        """Drive the engine's idle time-out and arm the timer at its next deadline (none without one)."""
        self._tick = None
        if self.lost.done():
            return
        self.flush()  # proton times nothing before its open is out
        now_ms = int(asyncio.get_running_loop().time() * 1000)
        deadline = self.engine.tick(now_ms)
        self.flush()
        if deadline:
            self._tick = asyncio.get_running_loop().call_later(max(0, deadline - now_ms) / 1000, self._ticked)

    def flush(self) -> None:
        if self._transport is None or self._transport.is_closing() or not self._sasl.finished:
            return
        out = self.engine.take_output()
        if out:
            self._transport.write(out)
        if self.engine.finished:
            if self.engine.transport_error is not None:
                self._transport.abort()  # e.g. a silent peer: what is unsent would never drain
            else:
                self._transport.close()

    def open_receiver(self, address: str, on_message: MessageCallback, selector: str | None = None,
                      credit: int = 500) -> ReceiverState:
        state = self.engine.open_receiver(ReceiverState(address, selector, credit, on_message))
        self.flush()
        return state

    def open_sender(self, address: str) -> SenderState:
        state = self.engine.open_sender(SenderState(address))
        self.flush()
        return state

    def open_deferred_receiver(self, address: str, on_message: DeferredCallback, selector: str | None = None,
                               credit: int = 500) -> ReceiverState:
        """A receiver whose messages stay unsettled until :meth:`settle` (at most ``credit`` at a time)."""
        state = ReceiverState(address, selector, credit, lambda raw: None, deferred=on_message)
        self.engine.open_receiver(state)
        self.flush()
        return state

    def settle(self, state: ReceiverState, delivery: Any, outcome: str | None = None) -> None:
        self.engine.settle(state, delivery, outcome)
        self.flush()

    async def publish(self, state: SenderState, raw: bytes) -> Outcome:
        """Send one encoded message when the link has credit; the peer's outcome (not accepted when the
        link or connection went away before it answered). A message over the peer's max-message-size
        is not sent: its outcome is final at once (sent, it would only make the peer detach the link)."""
        answer: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

        def answered(outcome: Outcome) -> None:
            if not answer.done():
                answer.set_result(outcome)

        async with self._send_lock:  # FIFO: one task waits for credit, the others queue in order behind it
            while True:
                # with credit the peer's attach has come (it precedes its flow), so its limit is known
                if state.credit > 0 and (limit := state.max_message_size) is not None and len(raw) > limit:
                    return Outcome(False, f"not sent: amqp:link:message-size-exceeded: {len(raw)} bytes, over the "
                                          f"peer's max-message-size of {limit}", final=True)
                if self.engine.send(state, raw, answered):
                    break
                if state.closed or self.lost.done() or self.engine.closed:
                    return Outcome(False, f"not sent: {state.error or 'link or connection closed'}")
                self._credit.clear()
                credit: asyncio.Future[Any] = asyncio.ensure_future(self._credit.wait())
                try:
                    await asyncio.wait([credit, self.lost], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    credit.cancel()
        self.flush()
        return await answer

    def eof_received(self) -> bool | None:
        self.engine.receive_eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(str(exc) if exc else "connection closed during SASL"))
        self.engine.lost(str(exc) if exc else "connection closed")
        self.engine.release()
        if not self.lost.done():
            self.lost.set_result(None)

    async def close(self, timeout: float = 5.0) -> None:
        """Close gracefully (AMQP close, wait for the peer's) or abort after ``timeout``."""
        if self._transport is None or self._transport.is_closing() or self.lost.done():
            return
        if not self._sasl.finished:
            self._transport.abort()
            return
        self.engine.close()
        self.flush()
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns normally when the task is
            # cancelled just as ``lost`` completes, and a stopped federation link then retried for ever.
            async with asyncio.timeout(timeout):
                await asyncio.shield(self.lost)
        except TimeoutError:
            self._transport.abort()
