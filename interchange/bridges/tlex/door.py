"""The bridge's publish path through the broker's in-process door (:mod:`interchange.broker.local_door`).

A bridge running in the node's own process publishes with the same identity, to the same target,
through the same router call an AMQPS link ends in, without the TLS records, the two proton engines
and the socket round trip in between (most of a bridged payload's CPU: docs/performance.md).
:class:`DoorSender` is the sender, engine and link :class:`~.outbound.Outbound` drains into: credit
while the door is open (the broker routes each message before ``send`` returns, so nothing piles up
between them), the broker's max-message-size, and each outcome as the disposition would give it.
"""
from __future__ import annotations

from collections.abc import Callable

from interchange.broker.client import Outcome
from interchange.broker.local_door import DoorOutcome, LocalPublisher

#: Credit the door shows while open: Outbound sends what it holds, the broker takes it at once.
CREDIT = 1 << 30


class DoorSender:
    """:class:`~.outbound.Outbound`'s sender, engine and link over one :class:`LocalPublisher`."""

    def __init__(self, publisher: LocalPublisher) -> None:
        self.publisher = publisher

    @property
    def credit(self) -> int:
        return 0 if self.publisher.closed else CREDIT

    @property
    def closed(self) -> bool:
        return self.publisher.closed

    @property
    def max_message_size(self) -> int | None:
        return self.publisher.max_message_size

    def send(self, state: object, message: bytes, on_outcome: Callable[[Outcome], None] | None = None) -> bool:
        """Route ``message`` now (False once the broker closed the door: it stays queued)."""
        if self.publisher.closed:
            return False
        self.publisher.publish(message, _answer(on_outcome))
        return True

    def flush(self) -> None:
        """Nothing to write: the broker sends its consumers' deliveries once per loop turn itself."""

    def close(self) -> None:
        self.publisher.close()


def _answer(on_outcome: Callable[[Outcome], None] | None) -> Callable[[DoorOutcome], None]:
    if on_outcome is None:
        return _ignore
    return lambda outcome: on_outcome(Outcome(outcome.accepted, outcome.error))


def _ignore(outcome: DoorOutcome) -> None:
    """No one waits for this message's outcome."""


__all__ = ["CREDIT", "DoorSender"]
