"""Sans-I/O AMQP 1.0 server connection driven through proton's engine (the broker's hot path).

Bytes in (:meth:`ConnectionEngine.receive`), bytes out (:meth:`ConnectionEngine.take_output`);
attaches, messages, credit and detaches go to a :class:`Router`. Proton does the AMQP framing;
this module calls proton's low-level C functions directly (no per-event wrapper objects) and
forwards the received message bytes as they are (IP_014/015). Everything that makes the
per-message path fast lives here and in :mod:`interchange.broker.amqp_scan`, behind this
small interface, and nowhere else.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import MethodType, ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import cproton
from cproton_ffi import ffi, lib
from proton import Data, Described, symbol, ulong

from interchange.broker.deadlines import Deadline, StageTimeouts, stage_deadline
from interchange.broker.handshake_queue import CPU_SHARE, THREAD, HandshakeThread
from interchange.broker.message import BrokerMessage
from interchange.broker.open_frame import MIN_MAX_FRAME_SIZE, OpenFrameCheck, open_and_close
from interchange.broker.proton_io import ProtonConnection
from interchange.broker.wire_text import UndecodableField, condition_text, peer_text

if TYPE_CHECKING:
    from interchange.broker.source import Source

log = logging.getLogger(__name__)

#: Our container-id, in our open frame.
_CONTAINER = "croads-interchange"
#: Apache selector filter (IP_066): descriptor symbol and code.
SELECTOR_DESCRIPTOR_SYMBOL = "apache.org:selector-filter:string"
SELECTOR_DESCRIPTOR_CODE = 0x0000468C00000004

# Event types, looked up once.
_E_CONN_REMOTE_OPEN = lib.PN_CONNECTION_REMOTE_OPEN
_E_CONN_REMOTE_CLOSE = lib.PN_CONNECTION_REMOTE_CLOSE
_E_SESSION_REMOTE_OPEN = lib.PN_SESSION_REMOTE_OPEN
_E_SESSION_REMOTE_CLOSE = lib.PN_SESSION_REMOTE_CLOSE
_E_LINK_REMOTE_OPEN = lib.PN_LINK_REMOTE_OPEN
_E_LINK_REMOTE_CLOSE = lib.PN_LINK_REMOTE_CLOSE
_E_LINK_REMOTE_DETACH = lib.PN_LINK_REMOTE_DETACH
_E_LINK_FLOW = lib.PN_LINK_FLOW
_E_LINK_FINAL = lib.PN_LINK_FINAL
_E_DELIVERY = lib.PN_DELIVERY
_E_TRANSPORT_ERROR = lib.PN_TRANSPORT_ERROR
_E_TRANSPORT_CLOSED = lib.PN_TRANSPORT_CLOSED
_ACCEPTED = lib.PN_ACCEPTED
_REJECTED = lib.PN_REJECTED
_RELEASED = lib.PN_RELEASED
_SND_SETTLED = lib.PN_SND_SETTLED
#: Received messages up to this size become bytes; larger ones are forwarded in the buffer they were read into.
_COPY_LIMIT = 64 * 1024
# One constant tag for pre-settled deliveries; the buffer and the struct live as long as the module.
_SETTLED_TAG_BUFFER = ffi.new("char[]", b"\x00")
_SETTLED_TAG_STRUCT = ffi.new("pn_bytes_t *", (1, _SETTLED_TAG_BUFFER))
_SETTLED_TAG = _SETTLED_TAG_STRUCT[0]
#: Outcomes after which a message goes back to its source (the consumer did not process it).
_REDELIVER = frozenset({lib.PN_RELEASED, lib.PN_MODIFIED})
_LOCAL_ACTIVE = lib.PN_LOCAL_ACTIVE
_TERMINUS_NULL = lib.PN_UNSPECIFIED  #: a terminus of this type is sent as null
_NULL = ffi.NULL

_pn_collector_peek = lib.pn_collector_peek
_pn_collector_pop = lib.pn_collector_pop
_pn_event_type = lib.pn_event_type
_pn_event_delivery = lib.pn_event_delivery
_pn_event_link = lib.pn_event_link
_pn_delivery_link = lib.pn_delivery_link
_pn_delivery_readable = lib.pn_delivery_readable
_pn_delivery_partial = lib.pn_delivery_partial
_pn_delivery_aborted = lib.pn_delivery_aborted
_pn_delivery_pending = lib.pn_delivery_pending
_pn_delivery_settled = lib.pn_delivery_settled
_pn_delivery_updated = lib.pn_delivery_updated
_pn_delivery_update = lib.pn_delivery_update
_pn_delivery_settle = lib.pn_delivery_settle
_pn_delivery_remote_state = lib.pn_delivery_remote_state
_pn_delivery = lib.pn_delivery
_pn_link_recv = lib.pn_link_recv
_pn_link_send = lib.pn_link_send
_pn_link_advance = lib.pn_link_advance
_pn_link_credit = lib.pn_link_credit
_pn_link_flow = lib.pn_link_flow
_pn_link_is_sender = lib.pn_link_is_sender
_from_buffer = ffi.from_buffer

#: the C path of a consumer's deliveries and settlements (``_links.c``, proton's own functions bound
#: below), or None: not built, or turned off with ``INTERCHANGE_PURE_PYTHON=1`` (the same calls through cffi)
_links: ModuleType | None
try:
    from interchange.broker import _links
except ImportError:
    _links = None
if os.environ.get("INTERCHANGE_PURE_PYTHON") == "1":
    _links = None
if _links is not None:
    _links.bind(tuple(int(ffi.cast("uintptr_t", ffi.addressof(lib, name))) for name in (
        "pn_collector_peek", "pn_collector_pop", "pn_event_type", "pn_event_delivery", "pn_delivery_link",
        "pn_delivery_updated", "pn_delivery_remote_state", "pn_delivery_settled", "pn_delivery_settle",
        "pn_delivery", "pn_link_send", "pn_link_advance", "pn_delivery_aborted", "pn_delivery_readable",
        "pn_delivery_partial", "pn_delivery_pending", "pn_link_recv", "pn_delivery_update")),
        _E_DELIVERY, _RELEASED, lib.PN_MODIFIED)
_deliver = _links.deliver if _links is not None else None
_deliver_run = _links.deliver_run if _links is not None else None
_settled_run = _links.settled if _links is not None else None
_received_run = _links.received if _links is not None else None


def pointer_key(pointer: Any) -> int:
    """A proton object's address: the key of a consumer's unsettled deliveries (the C path's too)."""
    return int(ffi.cast("uintptr_t", pointer))


def _pointer(delivery: Any) -> Any:
    """A delivery as cffi's pointer (the C path gives its address)."""
    return ffi.cast("pn_delivery_t *", delivery) if type(delivery) is int else delivery


class AttachRefused(Exception):
    """The router refuses a link attach: the link is closed with this AMQP error condition."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class Rejected(Exception):
    """The router rejects a published message (AMQP `rejected` outcome with this description)."""

    def __init__(self, description: str, condition: str = "amqp:invalid-field") -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class Router(Protocol):
    """What a connection engine needs from the broker core."""

    def attach_publisher(self, identity: str, address: str | None) -> Any: ...

    def attach_consumer(self, identity: str, address: str | None, selector: str | None, link: "ConsumerLinkState") -> Any: ...

    def detach_publisher(self, publisher: Any) -> None: ...

    def detach_consumer(self, link: "ConsumerLinkState") -> None: ...

    def publish(self, publisher: Any, raw: bytes | bytearray) -> "StoreReceipt | None":
        """Route one message; raise :class:`Rejected` to reject it. A receipt means: accept it once the
        store has it (a durable message); None: accept it now."""

    def consumed(self, link: "ConsumerLinkState", message: BrokerMessage) -> None:
        """A consumer settled a durable message (or took it pre-settled): its source is done with it."""

    def credit_available(self, link: "ConsumerLinkState") -> None: ...

    def redeliver(self, link: "ConsumerLinkState", message: BrokerMessage) -> None:
        """The consumer released the message: offer it again (first in line)."""


class StoreReceipt(Protocol):
    """A durable message's way to its publisher's disposition: ``add(callback, arg)`` has
    ``callback(arg, ok)`` called once the message is stored (``ok``) or could not be (then
    ``reason`` says why and ``full`` whether the disk is full)."""

    def add(self, callback: Callable[[Any, bool], None], arg: Any) -> None: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def full(self) -> bool: ...


#: The condition of a durable message the store could not write (the publisher may send it again).
STORE_FAILED = "amqp:internal-error"
#: ... because the broker's disk is full (the publisher may send it again once there is space).
STORE_FULL = "amqp:resource-limit-exceeded"


def store_refusal(reason: str | None, full: bool) -> Rejected:
    """The refusal of a durable message the store cannot take (clear to the publisher: why, and what to do)."""
    if full:
        return Rejected(f"the broker's disk is full, durable messages are refused until there is space "
                        f"({reason}); send it again later", STORE_FULL)
    return Rejected(f"the broker could not store the durable message ({reason}); send it again", STORE_FAILED)


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """Per-connection limits (bounded memory, credit-based flow control both ways)."""

    publisher_credit: int = 1000
    max_message_size: int = 1024 * 1024
    max_frame_size: int = 64 * 1024
    session_incoming_capacity: int = 8 * 1024 * 1024
    idle_timeout_ms: int = 60_000
    #: seconds each stage of the preamble may take (:mod:`interchange.broker.deadlines`)
    handshake_timeout_s: float = 10.0
    header_timeout_s: float = 10.0
    sasl_timeout_s: float = 10.0
    open_timeout_s: float = 10.0
    #: handshake CPU seconds per second (:mod:`interchange.broker.handshake_queue`)
    handshake_cpu_share: float = CPU_SHARE
    #: where handshake steps run: a worker thread at a low priority, or the loop's turns
    handshake_thread: HandshakeThread = THREAD
    #: the CPUs the handshake worker is confined to, the loop's thread then to the others (None: no placement)
    handshake_cpus: frozenset[int] | None = None
    #: the process was placed on CPUs of its own (``[broker] process_cpus``): the loop's thread stays there
    handshake_loop_placed: bool = False

    @property
    def stage_timeouts(self) -> StageTimeouts:
        return StageTimeouts(self.handshake_timeout_s, self.header_timeout_s, self.sasl_timeout_s,
                             self.open_timeout_s)


class ConsumerLinkState:
    """A consumer's receiver link seen from the broker (our sender link)."""

    __slots__ = ("engine", "link", "link_address", "address", "selector", "source", "_tag", "presettled",
                 "unsettled", "departures", "__weakref__")

    def __init__(self, engine: "ConnectionEngine", link: Any, address: str | None, presettled: bool) -> None:
        self.engine = engine
        self.link = link
        self.link_address = pointer_key(link)  #: (for the C path)
        self.address = address
        self.selector: Callable[[dict], bool] | None = None
        self.source: Source | None = None  #: the Source it is attached to (set by the router)
        self._tag = 0
        self.presettled = presettled
        #: each delivery's address (:func:`pointer_key`) -> its message, until the consumer settles it
        self.unsettled: dict[int, BrokerMessage] = {}
        #: delivery -> (departure ms, attempt) while message logging is on (kept by the DeliveryLog)
        self.departures: dict[Any, tuple[int, int]] = {}

    @property
    def identity(self) -> str:
        return self.engine.identity

    def can_send(self) -> bool:
        return not self.engine.closed and not self.engine.paused and _pn_link_credit(self.link) > 0

    def close(self, condition: str, description: str) -> None:
        """Detach the link with an error condition (its source deleted, its grant withdrawn)."""
        self.engine.links.close(self.link, condition, description)

    def send(self, message: BrokerMessage) -> None:
        """Create a delivery carrying the received bytes unchanged; settle per the link's mode."""
        link = self.link
        raw = message.raw
        if self.presettled:  # a settled delivery's tag need not be unique
            delivery = _pn_delivery(link, _SETTLED_TAG)
            _pn_link_send(link, _from_buffer(raw), len(raw))
            _pn_link_advance(link)
            _pn_delivery_settle(delivery)
            delivery = None
            if message.holders is not None:  # a durable message: delivered for good
                self.engine.router.consumed(self, message)
        else:
            self._tag += 1
            if _deliver is not None:
                delivery = _deliver(self.link_address, self._tag, raw)
            else:
                delivery = pointer_key(_pn_delivery(link, (8, _from_buffer(self._tag.to_bytes(8, "big")))))
                _pn_link_send(link, _from_buffer(raw), len(raw))
                _pn_link_advance(link)
            self.unsettled[delivery] = message
        engine = self.engine
        if engine.delivery_log is not None:
            engine.delivery_log.sent(self, message, delivery)
        if not engine.output_marked:
            engine.output_marked = True
            engine.on_output()

    def send_run(self, messages: list[BrokerMessage]) -> int:
        """:meth:`send` of the first of ``messages`` while :meth:`can_send` would say so (the link's
        credit, read once: nothing in between changes the connection's state); how many were sent."""
        engine = self.engine
        if engine.closed or engine.paused:
            return 0
        count = min(_pn_link_credit(self.link), len(messages))
        if count <= 0:
            return 0
        if count < len(messages):
            messages = messages[:count]
        if self.presettled or _deliver is None or engine.delivery_log is not None:
            for message in messages:
                self.send(message)
            return count
        unsettled = self.unsettled
        if _deliver_run is not None:
            before = len(unsettled)
            try:
                self._tag += _deliver_run(self.link_address, self._tag, messages, unsettled)
            except BaseException:
                self._tag += len(unsettled) - before  # (each one in ``unsettled`` took its tag)
                raise
        else:
            deliver, address, tag = _deliver, self.link_address, self._tag
            for message in messages:
                tag += 1
                unsettled[deliver(address, tag, message.raw)] = message
            self._tag = tag
        if not engine.output_marked:
            engine.output_marked = True
            engine.on_output()
        return count


class DeliveryLog(Protocol):
    """Told about each delivery to a consumer while message logging is on (IP_010, the log's
    ``sent_message``): implemented by the broker's observer."""

    def sent(self, link: ConsumerLinkState, message: BrokerMessage, delivery: Any) -> None:
        """Sent on ``link``; ``delivery`` is None when the link is pre-settled."""

    def settled(self, link: ConsumerLinkState, message: BrokerMessage, delivery: Any, outcome: str) -> None:
        """The consumer settled ``delivery`` with ``outcome`` (accepted, released, ...)."""


def _nothing() -> None:
    """A released engine's output callback."""


def _no_event(_kind: str, _fields: dict) -> None:
    """A released engine's (and its links') event callback."""


#: The consumer's outcome of a settled delivery, as the log names it (0: settled without one).
_OUTCOME_NAMES = {lib.PN_ACCEPTED: "accepted", lib.PN_REJECTED: "rejected", lib.PN_RELEASED: "released",
                  lib.PN_MODIFIED: "modified"}


class ConnectionEngine:
    """One AMQP 1.0 server connection (sans-I/O) for an authenticated identity (TLS CN): bytes in
    and out, the connection and its sessions; its links are :attr:`links` (:class:`ConnectionLinks`)."""

    def __init__(self, router: Router, identity: str, limits: EngineLimits, on_output: Callable[[], None],
                 events: Callable[[str, dict], None] | None = None, now: float = 0.0) -> None:
        self.router = router
        self.identity = identity
        self.limits = limits
        self.on_output = on_output
        self._events = events or (lambda kind, fields: None)
        #: told about every delivery to a consumer, when set (while message logging is on)
        self.delivery_log: DeliveryLog | None = None
        self.paused = False
        #: set when output was announced with on_output(); cleared by the I/O layer when it takes output
        self.output_marked = False
        self.closed = False
        self.container_id: str | None = None
        self._proton = ProtonConnection(server=True)
        self._transport = self._proton.transport
        self._connection = self._proton.connection
        self._collector = self._proton.collector
        self._collector_key = pointer_key(self._collector)  #: (for the C path)
        cproton.pn_connection_set_container(self._connection, _CONTAINER)
        self._failed = False  #: closed for the peer's fault (:meth:`fail`), logged once
        self._output_started = False  #: proton wrote something (its protocol header first)
        #: closed before the peer's open: the last bytes to send, in place of proton's output
        self._final: bytes | None = None
        lib.pn_transport_set_max_frame(self._transport, limits.max_frame_size)
        lib.pn_transport_set_idle_timeout(self._transport, limits.idle_timeout_ms)
        self._open_check: OpenFrameCheck | None = OpenFrameCheck()
        self._small_frames: int | None = None  #: a max-frame-size below 512 in the peer's open
        #: the peer's open must arrive by then (``now``: when SASL ended); None once it did
        self._open_deadline: Deadline | None = stage_deadline(now, limits.open_timeout_s, "open")
        self._processing = False  #: inside :meth:`_process` (a nested call returns: the outer loop goes on)
        self.links = ConnectionLinks(self, self._events)
        #: proton event type -> its handler, bound to the part it concerns (one lookup per event)
        self._handlers: dict[int, Callable[[Any], None]] = {
            **{etype: MethodType(handler, self.links) for etype, handler in _LINK_EVENTS.items()},
            **{etype: MethodType(handler, self) for etype, handler in _CONNECTION_EVENTS.items()}}

    # ----------------------------------------------------------------- bytes in/out
    def receive(self, data: bytes) -> None:
        """Feed bytes received from the peer (after TLS and SASL)."""
        if self._failed:
            return  # closed for the peer's fault: nothing more is read
        if self._open_check is not None:  # proton would raise a too small max-frame-size silently
            self._small_frames = self._open_check.feed(data)
            if self._open_check.done:
                self._open_check = None
        self._proton.push(data, self._process)
        if lib.pn_transport_capacity(self._transport) < 0:
            self._on_input_stopped()

    def _on_input_stopped(self) -> None:
        """Proton stopped reading without closing: a frame it could not decode or dispatch.

        A frame whose body does not decode (the open's too), or with an unknown performative code
        or a descriptor that is not a ulong, makes proton close its input silently: no close frame,
        no condition, and the connection would hang until the idle time-out with every later frame
        unanswered. Close it at once with ``amqp:connection:framing-error`` instead (AMQP 1.0 2.8.15).
        """
        if lib.pn_connection_state(self._connection) & (lib.PN_LOCAL_CLOSED | lib.PN_REMOTE_CLOSED):
            return  # an ordinary close in progress
        if lib.pn_condition_is_set(lib.pn_transport_condition(self._transport)):
            return  # proton found the error itself and answers it
        self.fail("amqp:connection:framing-error", "frame not understood: a body that does not decode, an unknown "
                  "performative or a descriptor that is not a ulong")

    def receive_eof(self) -> None:
        """The peer closed its side."""
        self._proton.close_input()
        self._process()

    def take_output(self, limit: int = 4 * 1024 * 1024) -> bytearray:
        """Return (and consume) up to ``limit`` bytes proton wants to send (see :attr:`has_output`)."""
        if self._final is not None:  # closed before the peer's open (fail): the last bytes, once
            out, self._final = bytearray(self._final), b""
            return out
        out = self._proton.take_output(limit)
        if out:
            self._output_started = True
        if self._proton.closed:
            self._on_closed()
        return out

    @property
    def has_output(self) -> bool:
        """True when proton still holds bytes to send."""
        if self._final is not None:
            return bool(self._final)
        return self._proton.has_output

    @property
    def finished(self) -> bool:
        """True when the transport is closed both ways, or closed for the peer's fault (:meth:`fail`) with
        everything written (proton writes nothing before the peer's protocol header): the socket can go."""
        return self._proton.closed or (self._failed and not self.has_output)

    def tick(self, now_ms: int) -> int:
        """Drive idle-timeout keep-alives; returns the next deadline in ms (0 = none)."""
        deadline = lib.pn_transport_tick(self._transport, now_ms)
        self._process()
        return int(deadline)

    def set_paused(self, paused: bool) -> None:
        """Back-pressure from the socket: stop handing out messages while paused."""
        self.paused = paused
        if not paused:
            self.links.resume()

    def close(self, condition: str | None = None, description: str | None = None) -> None:
        """Close the connection (with an error condition if given)."""
        if condition:
            cond = lib.pn_connection_condition(self._connection)
            cproton.pn_condition_set_name(cond, condition)
            cproton.pn_condition_set_description(cond, description or condition)
        lib.pn_connection_close(self._connection)
        self._process()

    def fail(self, condition: str, description: str, event: str | None = "transport_error", **fields: object) -> None:
        """Close at once for the peer's fault (AMQP 1.0 2.4.3 lets a peer that sent an error stop
        waiting): our open if it is not out yet, a close with ``condition``, then the transport closes
        without waiting for the peer's close (:attr:`finished` once the output is taken). Logged as
        ``event`` (``transport_error`` unless said otherwise; None: logged by the caller); nothing more is read."""
        if self._failed:
            return
        self._failed = True
        if event is not None:
            self._events(event, {"condition": condition, "description": description, **fields})
        if lib.pn_connection_state(self._connection) & (lib.PN_REMOTE_ACTIVE | lib.PN_REMOTE_CLOSED):
            # After the peer's open, our close carries the condition; it is written out before the
            # input closes, or proton would replace it with "connection aborted".
            cond = lib.pn_connection_condition(self._connection)
            cproton.pn_condition_set_name(cond, condition)
            cproton.pn_condition_set_description(cond, description)
            lib.pn_connection_open(self._connection)
            lib.pn_connection_close(self._connection)
            lib.pn_transport_pending(self._transport)  # the close frame into the output buffer
            lib.pn_transport_close_tail(self._transport)
            self._process()
            return
        # Before it proton writes no close (and with part of a frame buffered, nothing at all): what
        # it has (its protocol header, once the peer's came) then our open and close.
        head = self._proton.take_output(1 << 20)
        header_out = self._output_started or bool(head)
        self._final = bytes(head) + (open_and_close(_CONTAINER, condition, description) if header_out else b"")

    @property
    def deadline(self) -> Deadline | None:
        """When the peer's open must have arrived (:mod:`interchange.broker.deadlines`); None once it
        did (AMQP's idle time-out then bounds a silent peer, :meth:`tick`)."""
        return None if self._failed or self.closed else self._open_deadline

    def on_timer(self, now: float) -> None:
        """The open's deadline passed: close with ``amqp:resource-limit-exceeded`` (logged as ``preamble_timeout``)."""
        deadline = self.deadline
        if deadline is not None and deadline.passed(now):
            self.fail("amqp:resource-limit-exceeded", deadline.reason, "preamble_timeout", stage=deadline.stage,
                      timeout_s=deadline.timeout_s)

    def detach_all(self, condition: str, description: str) -> None:
        """Detach every link with an error condition (the node shuts down): consumers' unsettled
        messages go back to their sources first."""
        self.links.detach_all(condition, description)

    def release(self) -> None:
        """Free proton's objects; the engine is unusable afterwards. The references that tie the engine, its
        links and its connection into cycles (the handlers table's bound methods, the callbacks, the links'
        engine) go too, so all of them are freed by their reference counts when the connection goes, not left
        to a full collection (20-40 ms of the event loop's time per ~1,000 closed connections)."""
        self._on_closed()
        self._proton.release()
        self._handlers.clear()
        self.on_output = _nothing
        self._events = _no_event
        self.links.release()

    # ----------------------------------------------------------------- events
    def _process(self) -> None:
        """Handle proton's pending events: one short method each, the links' (``_LINK_EVENTS``) on
        :attr:`links`, the connection's (``_CONNECTION_EVENTS``) here; a delivery, the hot path, is
        tested first, without a table lookup; a run of consumers' settlements is handled in C when it
        is built (:meth:`_settle_run`)."""
        if self._processing:
            return  # called from a handler: the loop below goes on with what it added
        self._processing = True
        collector = self._collector
        on_delivery = self.links.on_delivery
        handlers = self._handlers
        links = self.links
        consumer_keys, publisher_keys = links.consumer_keys, links.publisher_keys
        try:
            while True:
                event = _pn_collector_peek(collector)
                if event == _NULL:
                    return
                if _links is not None and _pn_event_type(event) == _E_DELIVERY and (
                        (consumer_keys and _settled_run is not None and self.delivery_log is None and self._settle_run())
                        or (publisher_keys and _received_run is not None and self._receive_run())):
                    continue
                try:
                    etype = _pn_event_type(event)
                    if etype == _E_DELIVERY:
                        on_delivery(_pn_event_delivery(event))
                    else:
                        handler = handlers.get(etype)
                        if handler is not None:
                            handler(event)
                finally:  # also when a handler raised: the event is never handled twice
                    _pn_collector_pop(collector)
        finally:
            self._processing = False

    def _settle_run(self) -> int:
        """The consumers' settlements at the head of the events, in C (``_links.settled``: what
        :meth:`ConnectionLinks.on_delivery` does for each, stopping at the first event it leaves to
        it); the durable messages among them are done with at their sources. How many it handled."""
        durable: list[tuple[ConsumerLinkState, BrokerMessage]] = []
        assert _settled_run is not None
        try:
            handled: int = _settled_run(self._collector_key, self.links.consumer_keys, durable)
        except BaseException:
            _pn_collector_pop(self._collector)  # (as a handler that raised: never handled twice)
            raise
        for state, message in durable:
            self.router.consumed(state, message)
        return handled

    def _receive_run(self) -> int:
        """The publishers' whole messages at the head of the events, read in C (``_links.received``: what
        :meth:`ConnectionLinks.on_delivery` does up to the routing, stopping at the first event it leaves
        to it), then routed and answered in order (:meth:`ConnectionLinks.answer_all`); how many events
        it handled."""
        assert _received_run is not None
        links = self.links
        messages: list[tuple[tuple[Any, Any], int, bytes, bool]] = []
        try:
            handled: int = _received_run(self._collector_key, links.publisher_keys, self.limits.max_message_size,
                                         _COPY_LIMIT, messages)
        except BaseException:
            _pn_collector_pop(self._collector)  # (as a handler that raised: never handled twice)
            raise
        finally:  # (what was read is answered, whatever came after it)
            links.answer_all(messages)
        return handled

    def _on_session_remote_open(self, event: Any) -> None:
        session = lib.pn_event_session(event)
        lib.pn_session_set_incoming_capacity(session, self.limits.session_incoming_capacity)
        lib.pn_session_open(session)

    def _on_session_remote_close(self, event: Any) -> None:
        lib.pn_session_close(lib.pn_event_session(event))

    def _on_connection_remote_open(self, event: Any) -> None:
        self._open_deadline = None
        lib.pn_connection_open(self._connection)
        try:
            self.container_id = peer_text(lib.pn_connection_remote_container(self._connection), "open: container-id")
        except UndecodableField as exc:  # answered with our open, then the close (AMQP 1.0 2.4.2)
            self.fail(exc.condition, exc.description)
            return
        self._events("connection_open", {"container": self.container_id})
        if self._small_frames is not None:  # AMQP 1.0 2.7.1 (proton would raise it to 512 silently)
            self.fail("amqp:invalid-field", f"max-frame-size {self._small_frames} is below the AMQP "
                      f"minimum of {MIN_MAX_FRAME_SIZE}")

    def _on_connection_remote_close(self, event: Any) -> None:
        lib.pn_connection_close(self._connection)

    def _on_transport_error(self, event: Any) -> None:
        if self._failed:
            return  # our own close for the peer's fault, logged by fail()
        name, description = condition_text(lib.pn_transport_condition(self._transport))
        self._events("transport_error", {"condition": name, "description": description})

    def _on_transport_closed(self, event: Any) -> None:
        self._on_closed()

    def _on_closed(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.links.forget_all()


class ConnectionLinks:
    """The links of one :class:`ConnectionEngine`: attaches (authorized by the router, refused with
    a null terminus), the publishers' messages in (admitted by the router, settled per their
    mode, durable ones once stored), the consumers' settlements and credit, and detaches."""

    def __init__(self, engine: ConnectionEngine, events: Callable[[str, dict], None]) -> None:
        self._engine = engine
        self._router = engine.router
        self._limits = engine.limits
        self._events = events
        self._publishers: dict[Any, Any] = {}
        #: link address (:func:`pointer_key`) -> (its publisher, the link): what the C path looks them up by
        self.publisher_keys: dict[int, tuple[Any, Any]] = {}
        self._consumers: dict[Any, ConsumerLinkState] = {}
        #: the same by the link's address (:func:`pointer_key`): what the C path looks them up by
        self.consumer_keys: dict[int, ConsumerLinkState] = {}
        #: deliveries of durable messages waiting for the store before their disposition
        self._awaiting_store: set[Any] = set()
        #: False while the node shuts down: new messages are released (not taken; the publisher sends them again)
        self.accepting = True

    @property
    def attached(self) -> int:
        """How many links are attached now (publishers' and consumers')."""
        return len(self._publishers) + len(self._consumers)

    # ----------------------------------------------------------------- the engine's calls
    def close(self, link: Any, condition: str, description: str) -> None:
        """Detach one link with an error condition (address deleted, grant withdrawn)."""
        self._forget(link)
        if lib.pn_link_state(link) & _LOCAL_ACTIVE:
            cond = lib.pn_link_condition(link)
            cproton.pn_condition_set_name(cond, condition)
            cproton.pn_condition_set_description(cond, description)
            lib.pn_link_close(link)
        engine = self._engine
        engine._process()  # noqa: SLF001 (the engine owns these links)
        engine.on_output()

    def release(self) -> None:
        """The engine is released: no more calls come (its engine and callback dropped, see
        :meth:`ConnectionEngine.release`)."""
        del self._engine
        self._events = _no_event

    def detach_all(self, condition: str, description: str) -> None:
        """Detach every link with an error condition: consumers' unsettled messages go back to their
        sources first."""
        for link in list(self._publishers) + list(self._consumers):
            self.close(link, condition, description)

    def resume(self) -> None:
        """The socket takes output again: consumers with credit and waiting messages are served."""
        for state in list(self._consumers.values()):
            source = state.source
            if source is not None and source.depth and _pn_link_credit(state.link) > 0:
                self._router.credit_available(state)

    def forget_all(self) -> None:
        """The connection is closed: every link leaves the router; proton frees the deliveries
        waiting for the store with the connection (the store's answer is then ignored)."""
        self._awaiting_store.clear()
        for link in list(self._publishers) + list(self._consumers):
            self._forget(link)

    # ----------------------------------------------------------------- link events
    def on_remote_open(self, event: Any) -> None:
        link = _pn_event_link(event)
        if _pn_link_is_sender(link):
            self._attach_consumer(link)
        else:
            self._attach_publisher(link)

    def on_flow(self, event: Any) -> None:
        link = _pn_event_link(event)
        state = self._consumers.get(link)
        if state is not None:
            if _pn_link_credit(link) > 0 and not self._engine.paused:
                self._router.credit_available(state)
            if lib.pn_link_get_drain(link):
                lib.pn_link_drained(link)

    def on_remote_end(self, event: Any) -> None:
        """The peer closed or detached a link: answer in kind."""
        link = _pn_event_link(event)
        self._forget(link)
        if lib.pn_link_state(link) & _LOCAL_ACTIVE:
            if _pn_event_type(event) == _E_LINK_REMOTE_CLOSE:
                lib.pn_link_close(link)
            else:
                lib.pn_link_detach(link)

    def on_final(self, event: Any) -> None:
        self._forget(_pn_event_link(event))

    # ----------------------------------------------------------------- attach and detach
    def _forget(self, link: Any) -> None:
        publisher = self._publishers.pop(link, None)
        if publisher is not None:
            self.publisher_keys.pop(pointer_key(link), None)
            self._router.detach_publisher(publisher)
        state = self._consumers.pop(link, None)
        if state is not None:
            self.consumer_keys.pop(state.link_address, None)
            self._router.detach_consumer(state)

    def _refuse(self, link: Any, condition: str, description: str) -> None:
        cond = lib.pn_link_condition(link)
        cproton.pn_condition_set_name(cond, condition)
        cproton.pn_condition_set_description(cond, description)
        # AMQP 1.0 2.6.3: a refused link is answered with a null local terminus (our source for a
        # consumer, our target for a publisher), then the detach. Proton would otherwise send an
        # empty terminus, which clients such as Qpid JMS take for a successful attach.
        terminus = lib.pn_link_source(link) if _pn_link_is_sender(link) else lib.pn_link_target(link)
        lib.pn_terminus_set_type(terminus, _TERMINUS_NULL)
        lib.pn_link_open(link)
        lib.pn_link_close(link)
        self._events("link_refused", {"condition": condition, "description": description})

    def _attach_publisher(self, link: Any) -> None:
        remote_target = lib.pn_link_remote_target(link)
        try:
            address = peer_text(lib.pn_terminus_get_address(remote_target), "attach: target address")
            publisher = self._router.attach_publisher(self._engine.identity, address)
        except (AttachRefused, UndecodableField) as exc:
            self._refuse(link, exc.condition, exc.description)
            return
        lib.pn_terminus_copy(lib.pn_link_target(link), remote_target)
        lib.pn_terminus_copy(lib.pn_link_source(link), lib.pn_link_remote_source(link))
        lib.pn_link_set_rcv_settle_mode(link, lib.PN_RCV_FIRST)
        lib.pn_link_set_max_message_size(link, self._limits.max_message_size)
        lib.pn_link_open(link)
        _pn_link_flow(link, self._limits.publisher_credit)
        self._publishers[link] = publisher
        self.publisher_keys[pointer_key(link)] = (publisher, link)
        publisher.closer = lambda condition, description: self.close(link, condition, description)

    def _attach_consumer(self, link: Any) -> None:
        remote_source = lib.pn_link_remote_source(link)
        try:
            address = peer_text(lib.pn_terminus_get_address(remote_source), "attach: source address")
            selector = selector_from_filter(Data(lib.pn_terminus_filter(remote_source)))
        except UndecodableField as exc:
            self._refuse(link, exc.condition, exc.description)
            return
        except ValueError as exc:
            self._refuse(link, "amqp:invalid-field", str(exc))
            return
        presettled = lib.pn_link_remote_snd_settle_mode(link) == _SND_SETTLED
        state = ConsumerLinkState(self._engine, link, address, presettled)
        try:
            self._router.attach_consumer(self._engine.identity, address, selector, state)
        except AttachRefused as exc:
            self._refuse(link, exc.condition, exc.description)
            return
        lib.pn_terminus_copy(lib.pn_link_source(link), remote_source)  # echoes the filter back
        lib.pn_terminus_copy(lib.pn_link_target(link), lib.pn_link_remote_target(link))
        lib.pn_link_set_snd_settle_mode(link, lib.pn_link_remote_snd_settle_mode(link))
        lib.pn_link_open(link)
        self._consumers[link] = state
        self.consumer_keys[state.link_address] = state

    # ----------------------------------------------------------------- deliveries
    def on_delivery(self, delivery: Any) -> None:
        """A publisher's message (frames of it) or a consumer's settlement."""
        link = _pn_delivery_link(delivery)
        publisher = self._publishers.get(link)
        if publisher is not None:
            if _pn_delivery_aborted(delivery):  # AMQP 1.0 2.6.14: discarded, as proton's receivers do
                _pn_delivery_settle(delivery)
                self._replenish(link)
                return
            if not _pn_delivery_readable(delivery):
                return
            # Checked on every frame, the last one too: a message whose final frame crosses the
            # limit is refused like one that crossed it earlier.
            size = _pn_delivery_pending(delivery)
            if size > self._limits.max_message_size:
                self.close(link, "amqp:link:message-size-exceeded",
                           f"message larger than {self._limits.max_message_size} bytes")
                return
            if _pn_delivery_partial(delivery):
                return
            self._receive_message(link, delivery, publisher, size)
            return
        state = self._consumers.get(link)
        if state is not None and _pn_delivery_updated(delivery):
            self._settled(state, delivery)

    def _settled(self, state: ConsumerLinkState, delivery: Any) -> None:
        """A consumer's outcome: a released or modified message goes back to its source, a durable
        one consumed leaves the store's holders."""
        outcome = _pn_delivery_remote_state(delivery)
        if outcome or _pn_delivery_settled(delivery):
            key = pointer_key(delivery)
            message = state.unsettled.pop(key, None)
            delivery_log = self._engine.delivery_log
            if message is not None and delivery_log is not None:
                delivery_log.settled(state, message, key, _OUTCOME_NAMES.get(outcome, "settled"))
            _pn_delivery_settle(delivery)
            if message is not None:
                if outcome in _REDELIVER:
                    self._router.redeliver(state, message)
                elif message.holders is not None:
                    self._router.consumed(state, message)

    def _receive_message(self, link: Any, delivery: Any, publisher: Any, size: int) -> None:
        buf = bytearray(size)
        got = _pn_link_recv(link, _from_buffer(buf), size)
        _pn_link_advance(link)
        remote_settled = _pn_delivery_settled(delivery)
        if not self.accepting:  # shutting down: not taken, the publisher may send it again
            if not remote_settled:
                _pn_delivery_update(delivery, _RELEASED)
            _pn_delivery_settle(delivery)
            return
        if got != size:
            buf = buf[: max(got, 0)]
        # Small messages become bytes (cheap, hashable); large ones stay in the buffer proton
        # filled, which is forwarded as it is (no copy of a 500 KB payload).
        raw = bytes(buf) if size <= _COPY_LIMIT else buf
        self._answer(publisher, delivery, raw, remote_settled)
        self._replenish(link)

    def answer_all(self, messages: list[tuple[tuple[Any, Any], int, bytes, bool]]) -> None:
        """The whole messages the C path read (:meth:`ConnectionEngine._receive_run`: (publisher, link),
        delivery address, bytes, sent settled), routed and answered in order as :meth:`_receive_message`
        does; each link's credit topped up once after them."""
        assert _links is not None
        links = {}
        for (publisher, link), delivery, raw, remote_settled in messages:
            if not self.accepting:  # shutting down: not taken, the publisher may send it again
                _links.dispose(delivery, 0 if remote_settled else _RELEASED)
                continue
            self._answer(publisher, delivery, raw, remote_settled)
            links[id(link)] = link
        for link in links.values():
            self._replenish(link)

    def _answer(self, publisher: Any, delivery: Any, raw: bytes | bytearray, remote_settled: bool) -> None:
        """Route a publisher's message and answer it: accepted or rejected now, or once stored (a durable
        one). ``delivery``: proton's (the cffi path), or its address (the C path's)."""
        try:
            receipt = self._router.publish(publisher, raw)
            outcome = _ACCEPTED
            if receipt is not None and not remote_settled:  # accepted once stored
                pointer = _pointer(delivery)
                self._awaiting_store.add(pointer)
                receipt.add(self._stored, (pointer, receipt))
                return
        except Rejected as exc:
            outcome = _REJECTED
            if not remote_settled:
                cond = lib.pn_disposition_condition(lib.pn_delivery_local(_pointer(delivery)))
                cproton.pn_condition_set_name(cond, exc.condition)
                cproton.pn_condition_set_description(cond, exc.description)
        if type(delivery) is int:
            assert _links is not None
            _links.dispose(delivery, 0 if remote_settled else outcome)
            return
        if not remote_settled:
            _pn_delivery_update(delivery, outcome)
        _pn_delivery_settle(delivery)

    def _stored(self, arg: tuple[Any, StoreReceipt], ok: bool) -> None:
        """The store has a durable message (or failed to write it): now its disposition."""
        delivery, receipt = arg
        if delivery not in self._awaiting_store:
            return  # the connection is gone
        self._awaiting_store.discard(delivery)
        if ok:
            _pn_delivery_update(delivery, _ACCEPTED)
        else:
            refusal = store_refusal(receipt.reason, receipt.full)
            cond = lib.pn_disposition_condition(lib.pn_delivery_local(delivery))
            cproton.pn_condition_set_name(cond, refusal.condition)
            cproton.pn_condition_set_description(cond, refusal.description)
            _pn_delivery_update(delivery, _REJECTED)
        _pn_delivery_settle(delivery)
        engine = self._engine
        if not engine.output_marked:
            engine.output_marked = True
            engine.on_output()

    def _replenish(self, link: Any) -> None:
        """Top the publisher's credit up to the window once half of it is used."""
        credit = _pn_link_credit(link)
        window = self._limits.publisher_credit
        if credit < window // 2:
            _pn_link_flow(link, window - credit)


#: The proton events of a connection's links (deliveries aside), and which method of its
#: :class:`ConnectionLinks` handles each.
_LINK_EVENTS: dict[int, Callable[[ConnectionLinks, Any], None]] = {
    _E_LINK_FLOW: ConnectionLinks.on_flow,
    _E_LINK_REMOTE_OPEN: ConnectionLinks.on_remote_open,
    _E_LINK_REMOTE_CLOSE: ConnectionLinks.on_remote_end,
    _E_LINK_REMOTE_DETACH: ConnectionLinks.on_remote_end,
    _E_LINK_FINAL: ConnectionLinks.on_final,
}
#: The proton events of the connection itself, its sessions and transport, and their handlers.
_CONNECTION_EVENTS: dict[int, Callable[[ConnectionEngine, Any], None]] = {
    _E_SESSION_REMOTE_OPEN: ConnectionEngine._on_session_remote_open,  # noqa: SLF001
    _E_SESSION_REMOTE_CLOSE: ConnectionEngine._on_session_remote_close,  # noqa: SLF001
    _E_CONN_REMOTE_OPEN: ConnectionEngine._on_connection_remote_open,  # noqa: SLF001
    _E_CONN_REMOTE_CLOSE: ConnectionEngine._on_connection_remote_close,  # noqa: SLF001
    _E_TRANSPORT_ERROR: ConnectionEngine._on_transport_error,  # noqa: SLF001
    _E_TRANSPORT_CLOSED: ConnectionEngine._on_transport_closed,  # noqa: SLF001
}


def selector_from_filter(data: Data) -> str | None:
    """Extract the JMS selector text from a source filter map (IP_066).

    The filter is found by its descriptor (symbol ``apache.org:selector-filter:string`` or code
    0x0000468C00000004) under any key. Other filters are ignored. A selector filter whose value
    is not a string raises ValueError; a string in the map that is not UTF-8, :class:`UndecodableField`.
    """
    data.rewind()
    if not data.next():
        return None
    try:
        filters = data.get_object()
    except UnicodeDecodeError as exc:  # a string or symbol of the map that is not UTF-8 / ASCII
        raise UndecodableField("attach: source filter", bytes(exc.object), exc) from None
    except Exception as exc:  # malformed filter map from the peer
        raise ValueError(f"unreadable source filter: {exc}") from exc
    if not isinstance(filters, dict):
        return None
    for value in filters.values():
        if isinstance(value, Described) and (
            value.descriptor == symbol(SELECTOR_DESCRIPTOR_SYMBOL)
            or value.descriptor == ulong(SELECTOR_DESCRIPTOR_CODE)
        ):
            if not isinstance(value.value, str):
                raise ValueError("selector filter value must be a string")
            return value.value
    return None
