"""The broker's in-process door: a publisher link for a bridge that runs in the node's own process.

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
  it would detach the link), and while the node shuts down messages are released;
- the broker closes the door as it detaches a link (target deleted, grant withdrawn): ``closed``
  and ``error`` say so and nothing more is taken; the bridge attaches again, as after a detach.

No credit: :meth:`LocalPublisher.publish` returns after routing, on the event loop the broker runs
on, so nothing can pile up between the two (the sources' own limits apply as for every publisher).
Sans-I/O: no socket, no task.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from interchange.broker.engine import Rejected, StoreReceipt, store_refusal
from interchange.broker.router import PublisherLink


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
        if self.closed:
            on_outcome(DoorOutcome(False, f"not sent: {self.error or 'the door is closed'}"))
            return
        if not self._accepting():  # shutting down: not taken, as the engine releases it
            on_outcome(DoorOutcome(False, "released"))
            return
        if len(raw) > self.max_message_size:
            self.rejected += 1
            on_outcome(DoorOutcome(False, f"not sent: amqp:link:message-size-exceeded: {len(raw)} bytes, over the "
                                          f"broker's max-message-size of {self.max_message_size}", final=True))
            return
        self.sent += 1
        try:
            receipt = self._core.publish(self._link, raw)
        except Rejected as exc:
            self.rejected += 1
            on_outcome(DoorOutcome(False, f"rejected: {exc.condition}: {exc.description}", final=True))
            return
        if receipt is None:
            self.accepted += 1
            on_outcome(ACCEPTED)
            return
        receipt.add(self._stored, (receipt, on_outcome))

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


class Door(Protocol):
    """How a bridge opens in-process publisher links (:class:`LocalDoor`)."""

    def open(self, identity: str, address: str) -> LocalPublisher: ...


class LocalDoor:
    """The node's door for its bridges: one broker core, the listener's limit and shutdown flag."""

    def __init__(self, core: Core, max_message_size: int, accepting: Callable[[], bool]) -> None:
        self._core, self._max, self._accepting = core, max_message_size, accepting

    def open(self, identity: str, address: str) -> LocalPublisher:
        return LocalPublisher.open(self._core, identity, address, self._max, self._accepting)


__all__ = ["ACCEPTED", "Door", "DoorOutcome", "LocalDoor", "LocalPublisher"]
