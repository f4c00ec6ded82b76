"""The bridge's AMQP 1.0 link to its node's Basic Interface, kept up across connection losses.

IP_050: a local C-ITS actor (mutual TLS 1.3, SASL EXTERNAL with its certificate). One connection
carries a sender to the delivery target and a receiver on the subscription source whose messages
stay unsettled until the bridge settles them, so nothing it did not pass on is lost.
:meth:`BiLink.send` is one attempt returning the BI's outcome (:mod:`.attempts` decides what
next); a message over the BI's max-message-size (its attach's, or learned from a detach
``amqp:link:message-size-exceeded``: :class:`~.attempts.SizeLimit`) is not sent.
With the broker's in-process door (``bi_door = "in-process"``) both go through it instead: the
publisher, and the subscription's consumer (:class:`~interchange.broker.local_door.LocalConsumer`,
the same window and settlements; attached again after the broker closed it); the AMQPS connection
stays for what the door cannot serve (a target of another broker process of the node).
Details: docs/if2-bridge.md ("After each answer of the BI").
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from interchange.bridges.if2.attempts import SIZE_EXCEEDED, Answer, SizeLimit
from interchange.broker.client import ClientConnection, Outcome, ReceiverState, SenderState
from interchange.broker.engine import AttachRefused
from interchange.broker.local_door import ConsumingDoor, DoorOutcome, LocalConsumer, LocalPublisher, OnMessages
from interchange.ground.timing import backoff_s

__all__ = ["BiLink"]

EventSink = Callable[[str, str, dict[str, Any]], None]
#: a BI delivery's handler: its bytes and its delivery (settled later by :meth:`BiLink.settle`)
OnDelivery = Callable[[bytes | bytearray, Any], None]


class BiLink:
    """A supervised connection to ``host:port`` with one sender and one deferred receiver."""

    def __init__(self, host: str, port: int, server_name: str, context: ssl.SSLContext, container_id: str,
                 event: EventSink, *, backoff: tuple[float, float] = (0.2, 10.0), credit: int = 256,
                 door: ConsumingDoor | None = None, identity: str = "") -> None:
        self.host, self.port, self.server_name = host, port, server_name
        self._context = context
        self._container_id = container_id
        self._event = event
        self._backoff = backoff
        self._credit = credit
        self.target: str | None = None
        self.source: tuple[str, str | None, OnDelivery] | None = None  # address, selector, callback
        self._connection: ClientConnection | None = None
        self._sender: SenderState | None = None
        self._receiver: ReceiverState | None = None
        self._up = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connects = 0
        self.size_limit = SizeLimit()
        #: bytes of each message sent on the current sender and not answered (kept once unanswered: a
        #: detach fails them all, and the largest of them is over the limit it names)
        self._flight: dict[object, int] = {}
        #: the broker's in-process door (``bi_door = "in-process"``), this actor's identity at it, the publisher
        self._door, self._identity = door, identity
        self._consuming = door  #: (kept when the publisher falls back to AMQPS: each link on its own)
        self._publisher: LocalPublisher | None = None
        #: the subscription's consumer at the door (with a door the subscription is not read over AMQPS)
        self._consumer: LocalConsumer | None = None
        self._on_messages: OnMessages | None = None  #: the consumer's handler of a turn's deliveries at the door
        self._reattach: asyncio.TimerHandle | None = None
        self._refusals = 0  #: attaches at the door refused since the last one that worked
        self._flushing = False  #: a flush of the connection is scheduled for this loop turn
        self._queued = 0  #: sends waiting in :meth:`send` (for link, credit): later submits queue behind them
        self._later: set[asyncio.Future[None]] = set()

    @property
    def connected(self) -> bool:
        return self._up.is_set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="if2-bi-link")

    async def close(self) -> None:
        for later in list(self._later):
            later.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._connection is not None:
            await self._connection.close()
        if self._publisher is not None:
            self._publisher.close()
        if self._reattach is not None:
            self._reattach.cancel()
        if self._consumer is not None:
            self._consumer.detach()

    def set_target(self, address: str) -> None:
        """Publish to ``address`` from now on (the delivery's target)."""
        if address == self.target:
            return
        self.target = address
        if self._connection is not None and self._up.is_set():
            self._open_sender(self._connection, address)

    def set_source(self, address: str, selector: str | None, on_message: OnDelivery,
                   on_messages: OnMessages | None = None) -> None:
        """Consume ``address``: each delivery to ``on_message``; through the door, with ``on_messages``,
        a loop turn's deliveries in one call (their bytes and their deliveries, to settle each later)."""
        self.source = (address, selector, on_message)
        self._on_messages = on_messages
        if self._consuming is not None:
            self._attach_consumer()
        elif self._connection is not None and self._up.is_set():
            self._receiver = self._connection.open_deferred_receiver(address, on_message, selector, self._credit)

    def _attach_consumer(self) -> None:
        """The subscription's consumer at the door (the source is in every broker process of the node,
        this one's included); attached again after a growing back-off while the broker refuses it (the
        source not created yet) and after it closed the link."""
        self._reattach = None
        if self.source is None or self._consuming is None:
            return
        address, selector, on_message = self.source
        try:
            consumer = self._consuming.consume(self._identity, address, on_message, self._credit, selector,
                                               self._on_messages)
        except AttachRefused as exc:
            self._refusals += 1
            self._event("warning", "if2_door_consumer_refused", {"source": address, "reason": exc.description})
            self._reattach_later()
            return
        self._refusals = 0
        consumer.on_closed = self._reattach_later
        self._consumer = consumer

    def _reattach_later(self) -> None:
        if self._reattach is None:
            delay = backoff_s(self._refusals, *self._backoff) if self._refusals else self._backoff[0]
            self._reattach = asyncio.get_running_loop().call_later(delay, self._attach_consumer)

    def settle(self, receiver: ReceiverState | LocalConsumer, delivery: Any, outcome: str | None) -> bool:
        """Settle a delivery of ``receiver`` (written with the others of this loop turn); False when its
        link or connection is gone (the source kept the message and gives it out again)."""
        if isinstance(receiver, LocalConsumer):
            return receiver.settle(delivery, outcome)
        connection = self._connection
        if connection is None or receiver is not self._receiver or receiver.closed or connection.engine.closed:
            return False
        connection.engine.settle(receiver, delivery, outcome)
        self._flush_soon()
        return True

    def accept_all(self, receiver: ReceiverState | LocalConsumer, deliveries: list[Any]) -> int:
        """:meth:`settle` each of ``deliveries`` of ``receiver`` as accepted (at the door in one call): how many
        were settled (the others' link or connection is gone: the source gives them out again)."""
        if isinstance(receiver, LocalConsumer):
            return receiver.accept_all(deliveries)
        return sum(self.settle(receiver, delivery, None) for delivery in deliveries)

    def _flush_soon(self) -> None:
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        if self._connection is not None:
            self._connection.flush()

    @property
    def receiver(self) -> ReceiverState | LocalConsumer | None:
        return self._consumer if self._consuming is not None else self._receiver

    @property
    def max_message_size(self) -> int | None:
        """The largest message the BI takes, as far as the bridge knows (None: no limit known)."""
        sender = self._sender
        limits = [limit for limit in (sender.max_message_size if sender is not None else None,
                                      self.size_limit.limit) if limit is not None]
        return min(limits) if limits else None

    def submit(self, raw: bytes, on_outcome: Callable[[Answer], None]) -> None:
        """One attempt, as :meth:`send`, answered through ``on_outcome``: through the door (its
        :class:`DoorOutcome` as it is) or on the link at once when it can take the message now (no
        task, no future), else by :meth:`send`."""
        publisher = self._door_publisher()
        if publisher is not None:
            publisher.publish(raw, on_outcome)
            return
        connection, sender = self._connection, self._sender
        if (self._queued or connection is None or sender is None or not self._up.is_set() or sender.credit <= 0
                or connection.engine.closed):
            later = asyncio.ensure_future(self._send_later(raw, on_outcome))
            self._later.add(later)  # (the loop keeps only a weak reference to a task)
            later.add_done_callback(self._later.discard)
            return
        if (too_big := self.size_limit.refuse(len(raw))) is not None:
            on_outcome(Outcome(False, too_big, final=True))
            return
        if (limit := sender.max_message_size) is not None and len(raw) > limit:
            on_outcome(Outcome(False, f"not sent: amqp:link:message-size-exceeded: {len(raw)} bytes, over the "
                                      f"peer's max-message-size of {limit}", final=True))
            return
        flight, token = self._flight, object()
        flight[token] = len(raw)
        connection.engine.send(sender, raw, lambda outcome: on_outcome(self._answered(flight, token, outcome)))
        self._flush_soon()

    def submit_all(self, raws: Sequence[bytes], later: Callable[[int], Callable[[Answer], None]]
                   ) -> Sequence[Answer | None]:
        """:meth:`submit` for each of ``raws``, in order: through the door as one call
        (:meth:`LocalPublisher.publish_all`), the answers known now, None for each message ``i`` whose
        answer goes later to the callback ``later(i)`` gives (a durable message, once stored; every
        message sent on the AMQPS link)."""
        publisher = self._door_publisher()
        if publisher is not None:
            return publisher.publish_all(raws, later)
        for i, raw in enumerate(raws):
            self.submit(raw, later(i))
        return [None] * len(raws)

    async def _send_later(self, raw: bytes, on_outcome: Callable[[Answer], None]) -> None:
        self._queued += 1
        try:
            outcome = await self.send(raw)
        finally:
            self._queued -= 1
        on_outcome(outcome)

    def _answered(self, flight: dict[object, int], token: object, outcome: Outcome) -> Outcome:
        """Bookkeeping of one answered message on the link (what :class:`SizeLimit` learns from)."""
        if outcome.accepted or outcome.final or (outcome.error or "").startswith(("released", "modified")):
            flight.pop(token, None)
        elif SIZE_EXCEEDED in (outcome.error or "") and flight:
            self.size_limit.learn(max(flight.values()))
        return outcome

    async def send(self, raw: bytes) -> Outcome:
        """One attempt: wait until the link is up, send, and return the BI's outcome (not accepted
        with ``final`` unset when the link or connection went first). Through the broker's in-process
        door when the node gives one and the broker lets this actor publish there."""
        publisher = self._door_publisher()
        if publisher is not None:
            return await _through(publisher, raw)
        while True:
            await self._up.wait()
            connection, sender = self._connection, self._sender
            if connection is not None and sender is not None:
                break
            await asyncio.sleep(0.05)  # connected, target not known yet
        if (too_big := self.size_limit.refuse(len(raw))) is not None:
            return Outcome(False, too_big, final=True)
        flight, token = self._flight, object()
        flight[token] = len(raw)
        return self._answered(flight, token, await connection.publish(sender, raw))

    def _door_publisher(self) -> LocalPublisher | None:
        """The door's publisher on the current target (opened again after the broker closed it)."""
        if self._door is None or self.target is None:
            return None
        publisher = self._publisher
        if publisher is None or publisher.closed or publisher.address != self.target:
            if publisher is not None:
                publisher.close()
            try:
                publisher = self._publisher = self._door.open(self._identity, self.target)
            except AttachRefused as exc:  # another broker process serves the target, say: AMQPS then
                self._publisher = None
                self._event("info", "if2_door_refused", {"target": self.target, "reason": exc.description})
                self._door = None
                return None
        return publisher

    def _open_sender(self, connection: ClientConnection, address: str) -> None:
        self._sender = connection.open_sender(address)
        self._flight = {}

    async def _connect(self) -> ClientConnection:
        connection = await ClientConnection.open(self.host, self.port, self._context, self.server_name,
                                                 self._container_id)
        if self.target is not None:
            self._open_sender(connection, self.target)
        if self.source is not None and self._consuming is None:
            address, selector, callback = self.source
            self._receiver = connection.open_deferred_receiver(address, callback, selector, self._credit)
        return connection

    async def _run(self) -> None:
        failures = 0  # connection attempts failed since the last one that worked
        while True:
            try:
                self._connection = await self._connect()
            except (OSError, ConnectionError, TimeoutError, ssl.SSLError) as exc:
                failures += 1
                delay = backoff_s(failures, *self._backoff)
                self._event("warning", "if2_bi_connect_failed", {"error": str(exc) or type(exc).__name__,
                                                                 "retry_s": delay})
                await asyncio.sleep(delay)
                continue
            self.connects += 1
            self._event("info", "if2_bi_connected", {"port": self.port, "connects": self.connects})
            self._up.set()
            failures = 0
            connection = self._connection
            link_closed: asyncio.Future[Any] = asyncio.ensure_future(connection.link_closed.wait())
            try:
                await asyncio.wait([link_closed, connection.lost], return_when=asyncio.FIRST_COMPLETED)
            finally:
                link_closed.cancel()
            self._up.clear()
            self._event("warning", "if2_bi_connection_lost", {"error": connection.engine.remote_error})
            connection.abort()
            await asyncio.sleep(self._backoff[0])


async def _through(publisher: LocalPublisher, raw: bytes) -> Outcome:
    """One message through the door, its outcome as the AMQPS link's would read (at once, or once a
    durable message is stored)."""
    answer: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

    def answered(outcome: DoorOutcome) -> None:
        if not answer.done():
            answer.set_result(Outcome(outcome.accepted, outcome.error, final=outcome.final))

    publisher.publish(raw, answered)
    return await answer
