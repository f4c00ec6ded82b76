"""The broker's in-process door: publisher and consumer links for a bridge in the node's own process.

A bridge (TLEX, IF2) is a local C-ITS actor with its own certificate (IP_050) and publishes to the
target of its delivery. Over AMQPS inside one process every message crossed two TLS records, two
proton engines and two socket writes and reads, and came back as a disposition the same way: most
of a bridged payload's CPU. The door gives the same publisher the same router call instead:

- attach: :meth:`BrokerCore.attach_publisher` with the bridge's identity (its certificate's CN, as
  the TLS handshake would name it) and the target address: the same authorization (the target's
  publishers, the process that owns it) and the same ``link_attached`` record;
- each message: :meth:`BrokerCore.publish`, the same admission, the target's capability check,
  routing, metrics and log records (``received``, ``rejected`` with the reason); its outcome
  (:class:`DoorOutcome`) comes at once, or once stored for a durable message, as the disposition
  would over AMQP; a message over the broker's max-message-size is refused, not routed (over AMQP
  it would detach the link), and while the node shuts down messages are released; the messages of
  one read of a bridge (:meth:`LocalPublisher.publish_all`) go to the core in one call
  (:meth:`BrokerCore.publish_all`: the same per message, one arrival time for all);
- the broker closes the door as it detaches a link (target deleted, grant withdrawn): ``closed``
  and ``error`` say so and nothing more is taken; the bridge attaches again, as after a detach.

No credit: :meth:`LocalPublisher.publish` returns after routing, on the event loop the broker runs
on, so nothing can pile up between the two (the sources' own limits apply as for every publisher).

A consumer (:class:`LocalConsumer`) is a deferred receiver on a source, as over AMQP: the same
:meth:`BrokerCore.attach_consumer` (the source's consumers, the link selector), a window of
``credit`` messages handed out and not settled, each delivery settled by its tag with the AMQP
outcomes (accepted, released: back to the front of the source, rejected with a reason), the
message log's ``sent_message`` records while it is on (IP_010); when the link goes (the bridge
closes it, the source is deleted, the grant withdrawn) every unsettled message goes back to its
source, and a later settlement of one of them changes nothing (False), so nothing is lost or
settled twice. Deliveries are handed to the bridge in a later loop turn (``schedule``), never from
inside the source's hand-off, so a settlement made at once does not re-enter it: one call per
message (``on_message``), or with ``on_messages`` one call with all of a turn's (the bridge then
reads, maps and publishes them in one loop, and accepts many at once with :meth:`LocalConsumer.accept_all`).
Sans-I/O: no socket, no task.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from interchange.broker.client import RELEASE
from interchange.broker.engine import Rejected, StoreReceipt, store_refusal
from interchange.broker.message import BrokerMessage
from interchange.broker.observer import DeliveryLink
from interchange.broker.router import ConsumerLinkState, PublisherLink
from interchange.broker.source import Matcher, Source


@dataclass(frozen=True, slots=True)
class DoorOutcome:
    """The broker's answer to a message through the door, as its disposition would say it.

    ``final``: the broker will never take this message (rejected, or too large); not final:
    released (shutting down) or the door was closed, so it may be sent again later."""

    accepted: bool
    error: str | None = None
    final: bool = False


ACCEPTED = DoorOutcome(True)


class Core(Protocol):
    """What the door needs of the broker core (:class:`~interchange.broker.router.BrokerCore`)."""

    def attach_publisher(self, identity: str, address: str | None) -> PublisherLink: ...

    def detach_publisher(self, publisher: PublisherLink) -> None: ...

    def publish(self, publisher: PublisherLink, raw: bytes | bytearray) -> StoreReceipt | None: ...

    def publish_all(self, publisher: PublisherLink, raws: Sequence[bytes | bytearray]
                    ) -> list[StoreReceipt | Rejected | None]: ...

    def attach_consumer(self, identity: str, address: str | None, selector: str | None,
                        link: ConsumerLinkState) -> Source: ...

    def detach_consumer(self, link: ConsumerLinkState) -> None: ...

    def credit_available(self, link: ConsumerLinkState) -> None: ...

    def redeliver(self, link: ConsumerLinkState, message: BrokerMessage) -> None: ...

    def consumed(self, link: ConsumerLinkState, message: BrokerMessage) -> None: ...


class DeliveryLog(Protocol):
    """The message log's delivery records (the broker's observer while message logging is on)."""

    def sent(self, link: DeliveryLink, message: BrokerMessage, delivery: object | None) -> None: ...

    def settled(self, link: DeliveryLink, message: BrokerMessage, delivery: object, outcome: str) -> None: ...


class LocalPublisher:
    """One in-process publisher link (see the module docstring). :meth:`open` raises
    :class:`~interchange.broker.engine.AttachRefused` as an AMQP attach would be refused."""

    def __init__(self, core: Core, link: PublisherLink, max_message_size: int,
                 accepting: Callable[[], bool]) -> None:
        self._core, self._link = core, link
        self.max_message_size = max_message_size
        self._accepting = accepting
        self.closed = False
        self.error: str | None = None  #: the broker's condition when it closed the door
        self.on_closed: Callable[[], None] | None = None  #: told when the broker closes the door
        self.sent = self.accepted = self.rejected = 0
        link.closer = self._closed_by_broker

    @classmethod
    def open(cls, core: Core, identity: str, address: str, max_message_size: int,
             accepting: Callable[[], bool] = lambda: True) -> "LocalPublisher":
        return cls(core, core.attach_publisher(identity, address), max_message_size, accepting)

    @property
    def address(self) -> str:
        return self._link.spec.address

    def publish(self, raw: bytes, on_outcome: Callable[[DoorOutcome], None]) -> None:
        """Route ``raw`` (an encoded AMQP message); ``on_outcome`` is called with the broker's answer,
        now, or for a durable message once the store has it."""
        answer = self._take(raw)
        if isinstance(answer, DoorOutcome):
            on_outcome(answer)
        else:
            answer.add(self._stored, (answer, on_outcome))

    def publish_all(self, raws: Sequence[bytes], later: Callable[[int], Callable[[DoorOutcome], None]]
                    ) -> list[DoorOutcome | None]:
        """:meth:`publish` for each of ``raws``, in order, as one call (the messages of one read of a
        bridge, routed by one :meth:`~interchange.broker.router.BrokerCore.publish_all`): the answers
        known now, and None for each message ``i`` whose answer comes later (a durable one, once
        stored), to the callback ``later(i)`` gives."""
        if self.closed or not self._accepting():  # (the same answer for each: :meth:`_take`'s)
            return [cast(DoorOutcome, self._take(raw)) for raw in raws]
        limit = self.max_message_size
        fitting = [raw for raw in raws if len(raw) <= limit]
        self.sent += len(fitting)
        routed_all = self._core.publish_all(self._link, fitting)
        if len(fitting) == len(raws) and routed_all.count(None) == len(raws):  # (the usual read: all taken)
            self.accepted += len(raws)
            return [ACCEPTED] * len(raws)
        answers: list[DoorOutcome | None] = []
        routed = iter(routed_all)
        for i, raw in enumerate(raws):
            answer = next(routed) if len(raw) <= limit else self._take(raw)
            if answer is None:
                self.accepted += 1
                answers.append(ACCEPTED)
            elif isinstance(answer, DoorOutcome):
                answers.append(answer)
            elif isinstance(answer, Rejected):
                self.rejected += 1
                answers.append(DoorOutcome(False, f"rejected: {answer.condition}: {answer.description}", final=True))
            else:
                answer.add(self._stored, (answer, later(i)))
                answers.append(None)
        return answers

    def _take(self, raw: bytes) -> DoorOutcome | StoreReceipt:
        """The broker's answer to ``raw`` now, or the store's receipt it waits for."""
        if self.closed:
            return DoorOutcome(False, f"not sent: {self.error or 'the door is closed'}")
        if not self._accepting():  # shutting down: not taken, as the engine releases it
            return DoorOutcome(False, "released")
        if len(raw) > self.max_message_size:
            self.rejected += 1
            return DoorOutcome(False, f"not sent: amqp:link:message-size-exceeded: {len(raw)} bytes, over the "
                                      f"broker's max-message-size of {self.max_message_size}", final=True)
        self.sent += 1
        try:
            receipt = self._core.publish(self._link, raw)
        except Rejected as exc:
            self.rejected += 1
            return DoorOutcome(False, f"rejected: {exc.condition}: {exc.description}", final=True)
        if receipt is None:
            self.accepted += 1
            return ACCEPTED
        return receipt

    def _stored(self, arg: tuple[StoreReceipt, Callable[[DoorOutcome], None]], ok: bool) -> None:
        receipt, on_outcome = arg
        if ok:
            self.accepted += 1
            on_outcome(ACCEPTED)
            return
        refusal = store_refusal(receipt.reason, receipt.full)
        self.rejected += 1
        on_outcome(DoorOutcome(False, f"rejected: {refusal.condition}: {refusal.description}"))

    def _closed_by_broker(self, condition: str, description: str) -> None:
        if not self.closed:
            self.closed, self.error = True, f"{condition}: {description}"
            self._core.detach_publisher(self._link)
            if self.on_closed is not None:
                self.on_closed()

    def close(self) -> None:
        """The bridge is done with the door (stopping, or attaching again)."""
        if not self.closed:
            self.closed = True
            self._core.detach_publisher(self._link)


#: A consumer's handler: the message's bytes (unchanged, as an AMQP delivery carries them) and its tag.
OnMessage = Callable[[bytes | bytearray, int], None]
#: A consumer's handler of a turn's deliveries at once: their bytes and their tags, in order.
OnMessages = Callable[[list[bytes | bytearray], list[int]], None]
#: The outcomes a settlement names (None: accepted; any other text rejects with it as the reason).
_REDELIVERED = (RELEASE, "modified")


class LocalConsumer:
    """One in-process consumer link (see the module docstring): opened by :meth:`LocalDoor.consume`,
    which raises :class:`~interchange.broker.engine.AttachRefused` as an AMQP attach would be refused."""

    __slots__ = ("_core", "_identity", "address", "selector", "source", "_window", "_on_message", "_on_messages",
                 "_schedule", "_log", "_tag", "unsettled", "departures", "_handing", "_starved", "_refilling", "closed", "error",
                 "on_closed")

    def __init__(self, core: Core, identity: str, address: str, on_message: OnMessage, credit: int,
                 schedule: Callable[[Callable[[], None]], object],
                 log: Callable[[], DeliveryLog | None] = lambda: None, on_messages: OnMessages | None = None) -> None:
        self._core, self._identity = core, identity
        self.address: str | None = address
        self.selector: Matcher | None = None  #: the link selector (set by the core)
        self.source: Source | None = None  #: the source attached to (set by the core)
        self._window, self._on_message, self._schedule, self._log = credit, on_message, schedule, log
        self._on_messages = on_messages  #: when given, a turn's deliveries go to it in one call
        self._tag = 0
        self.unsettled: dict[int, BrokerMessage] = {}  #: tag -> message handed out (or about to be)
        self.departures: dict[object, tuple[int, int]] = {}  #: kept by the message log (IP_010)
        self._handing: list[int] = []  #: tags sent by the source, handed to the bridge in the next turn
        self._starved = False  #: the source found no credit here: tell it when there is some again
        self._refilling = False  #: the source is told in the next turn (once for the turn's settlements)
        self.closed = False
        self.error: str | None = None  #: the broker's condition when it closed the link
        self.on_closed: Callable[[], None] | None = None  #: told when the broker closes the link

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def credit(self) -> int:
        return self._window - len(self.unsettled)

    def can_send(self) -> bool:
        if self.closed or len(self.unsettled) >= self._window:
            self._starved = True
            return False
        return True

    def send(self, message: BrokerMessage) -> None:
        """The source's hand-off (one credit): kept unsettled, handed to the bridge in a later turn."""
        self._tag += 1
        tag = self._tag
        self.unsettled[tag] = message
        if (log := self._log()) is not None:
            log.sent(self, message, tag)
        if not self._handing:
            self._schedule(self._hand_over)
        self._handing.append(tag)

    def _hand_over(self) -> None:
        handing, self._handing = self._handing, []
        unsettled = self.unsettled
        if self._on_messages is not None:
            tags = [tag for tag in handing if tag in unsettled]  # (not given back meanwhile: the link closed)
            if tags:
                self._on_messages([unsettled[tag].raw for tag in tags], tags)
            return
        on_message = self._on_message
        for tag in handing:
            message = unsettled.get(tag)
            if message is not None:
                on_message(message.raw, tag)

    def settle(self, tag: int, outcome: str | None) -> bool:
        """Settle delivery ``tag``: None accepts, :data:`~interchange.broker.client.RELEASE` gives it back
        (first in line), other text rejects it. False when it is not out on this link (the link closed and
        the source has it back, or it was settled already): nothing happens."""
        message = self.unsettled.pop(tag, None)
        if message is None:
            return False
        if (log := self._log()) is not None:
            log.settled(self, message, tag, "accepted" if outcome is None else
                              outcome if outcome in _REDELIVERED else "rejected")
        if outcome in _REDELIVERED:
            self._core.redeliver(self, message)
            return True
        if message.holders is not None:  # durable: the source is done with it
            self._core.consumed(self, message)
        self._refill_soon()
        return True

    def accept_all(self, tags: list[int]) -> int:
        """:meth:`settle` each of ``tags`` as accepted (the source told once of the credit): how many were
        out on this link (the others were given back or settled before, and nothing happens to them)."""
        unsettled, log, core = self.unsettled, self._log(), self._core
        settled = 0
        for tag in tags:
            message = unsettled.pop(tag, None)
            if message is None:
                continue
            settled += 1
            if log is not None:
                log.settled(self, message, tag, "accepted")
            if message.holders is not None:  # durable: the source is done with it
                core.consumed(self, message)
        if settled:
            self._refill_soon()
        return settled

    def _refill_soon(self) -> None:
        """A settlement freed credit: a starved link is refilled once, in a later loop turn."""
        if self._starved and not self._refilling:
            self._refilling = True
            self._schedule(self._refill)

    def _refill(self) -> None:
        """Credit again, as a receiver's flow frame would bring it: once for a turn's settlements. What the
        source sends at once is handed over now, after its hand-off returned (so without re-entering it),
        not a loop turn later: the turn's wait and its share of the loop's cost saved for each refill."""
        self._refilling = self._starved = False
        if not self.closed:
            self._core.credit_available(self)
            if self._handing:
                self._hand_over()  # (the turn scheduled for it finds nothing left)

    def close(self, condition: str, description: str) -> None:
        """The broker closes the link (source deleted, grant withdrawn): its unsettled messages go back."""
        if not self.closed:
            self.closed, self.error = True, f"{condition}: {description}"
            self._core.detach_consumer(self)
            if self.on_closed is not None:
                self.on_closed()

    def detach(self) -> None:
        """The bridge is done with the link (stopping, or attaching again): unsettled messages go back."""
        if not self.closed:
            self.closed = True
            self._core.detach_consumer(self)


class Door(Protocol):
    """How a bridge opens in-process publisher links (:class:`LocalDoor`)."""

    def open(self, identity: str, address: str) -> LocalPublisher: ...


class ConsumingDoor(Door, Protocol):
    """A door that also opens in-process consumer links (:class:`LocalDoor`)."""

    def consume(self, identity: str, address: str, on_message: OnMessage, credit: int,
                selector: str | None = None, on_messages: OnMessages | None = None) -> LocalConsumer: ...


class LocalDoor:
    """The node's door for its bridges: one broker core, the listener's limit and shutdown flag, how to
    run a call in the next loop turn, and the message log's delivery records while they are on."""

    def __init__(self, core: Core, max_message_size: int, accepting: Callable[[], bool],
                 schedule: Callable[[Callable[[], None]], object] | None = None,
                 delivery_log: Callable[[], DeliveryLog | None] = lambda: None) -> None:
        self._core, self._max, self._accepting = core, max_message_size, accepting
        self._schedule, self._delivery_log = schedule, delivery_log

    def open(self, identity: str, address: str) -> LocalPublisher:
        return LocalPublisher.open(self._core, identity, address, self._max, self._accepting)

    def consume(self, identity: str, address: str, on_message: OnMessage, credit: int,
                selector: str | None = None, on_messages: OnMessages | None = None) -> LocalConsumer:
        """A deferred consumer on source ``address`` with a window of ``credit`` unsettled messages (each
        turn's deliveries to ``on_messages`` in one call when it is given, else to ``on_message``)."""
        schedule = self._schedule or asyncio.get_running_loop().call_soon
        consumer = LocalConsumer(self._core, identity, address, on_message, credit, schedule, self._delivery_log,
                                 on_messages)
        self._core.attach_consumer(identity, address, selector, consumer)
        self._core.credit_available(consumer)  # what waits in the source comes now
        return consumer


__all__ = ["ACCEPTED", "ConsumingDoor", "Door", "DoorOutcome", "LocalConsumer", "LocalDoor", "LocalPublisher", "OnMessage",
           "OnMessages"]
