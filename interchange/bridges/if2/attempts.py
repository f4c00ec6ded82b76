"""What the bridge does with an IF2 message after each answer of the BI (sans-I/O; fed outcomes and time).

A message is acknowledged at RabbitMQ only once the BI accepted it. Otherwise its :class:`Fate`:
REFUSE (the BI rejected it, or it is over the BI's max-message-size, :class:`SizeLimit`: never
sent again); RETRY after a back-off (no answer came, so a copy may arrive twice,
:attr:`Decision.unanswered`; or the BI released it); GIVE_UP after ``attempts`` tries; EXPIRED
once its TTL ran out while the bridge held it (IF2 6.4). All but RETRY are rejected at RabbitMQ
without requeue. A retried copy's TTL is what is left of the IF2 ``expiration``
(:meth:`Attempts.ttl_ms`). Details: docs/if2-bridge.md ("After each answer of the BI").
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from interchange.ground.timing import backoff_s

__all__ = ["ACCEPTED", "Answer", "Attempts", "Decision", "Fate", "RetryPolicy", "SizeLimit", "SIZE_EXCEEDED"]

#: The AMQP 1.0 link error condition of a message over the receiver's max-message-size (2.8.15).
SIZE_EXCEEDED = "amqp:link:message-size-exceeded"


class Answer(Protocol):
    """The BI's answer to one attempt: an AMQP link's :class:`~interchange.broker.client.Outcome` or the
    in-process door's :class:`~interchange.broker.local_door.DoorOutcome` (the same three fields)."""

    @property
    def accepted(self) -> bool: ...

    @property
    def error(self) -> str | None: ...

    @property
    def final(self) -> bool: ...


class Fate(StrEnum):
    ACCEPTED = "accepted"
    REFUSE = "refused"
    RETRY = "retry"
    GIVE_UP = "gave_up"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Decision:
    fate: Fate
    reason: str | None = None
    delay_s: float = 0.0  #: how long to wait before sending again (RETRY)
    unanswered: bool = False  #: the attempt got no answer: the BI may have taken it (a possible duplicate)


#: the decision for every accepted message (one object: a Decision is immutable)
ACCEPTED = Decision(Fate.ACCEPTED)


@dataclass(frozen=True)
class RetryPolicy:
    """At most ``attempts`` sends of one message; back-off between them from ``min_s`` to ``max_s``."""

    attempts: int = 10
    min_s: float = 0.2
    max_s: float = 10.0


class Attempts:
    """One message's sends to the BI, from the moment the bridge took it (``started``, monotonic s)."""

    def __init__(self, policy: RetryPolicy, started: float, ttl_ms: int | None) -> None:
        self.policy, self.started, self.ttl = policy, started, ttl_ms
        self.made = 0
        self.unanswered = 0  #: attempts whose outcome never came (each a possible copy at the BI)

    def ttl_ms(self, now: float) -> int | None:
        """The TTL left for a copy sent now (None: the message has none)."""
        if self.ttl is None:
            return None
        return self.ttl - int((now - self.started) * 1000)

    def before_send(self, now: float) -> Decision | None:
        """EXPIRED when no TTL is left for another copy, else None (send it)."""
        left = self.ttl_ms(now)
        if left is not None and left <= 0 and self.made:
            return Decision(Fate.EXPIRED, f"its ttl of {self.ttl} ms ran out after {self.made} attempts")
        return None

    def after(self, outcome: Answer, now: float) -> Decision:
        """What to do after the BI's answer to one attempt."""
        self.made += 1
        if outcome.accepted:
            return ACCEPTED
        reason = outcome.error or "not accepted"
        if outcome.final:
            return Decision(Fate.REFUSE, reason)
        unanswered = not reason.startswith(("released", "modified", "not sent"))
        self.unanswered += unanswered
        if self.made >= self.policy.attempts:
            return Decision(Fate.GIVE_UP, f"not accepted after {self.made} attempts: {reason}", unanswered=unanswered)
        if (expired := self.before_send(now)) is not None:
            return Decision(expired.fate, f"{expired.reason}: {reason}", unanswered=unanswered)
        delay = backoff_s(self.made, self.policy.min_s, self.policy.max_s)
        return Decision(Fate.RETRY, reason, delay, unanswered)


class SizeLimit:
    """The largest message the BI takes, as far as the bridge knows: unknown at first; learned when
    the BI detaches the sender with ``amqp:link:message-size-exceeded``, which names no message. The
    message over the limit was in flight then, so the largest one in flight is over it too: every
    message at least that large is refused from then on, and none the BI would take (they are all
    smaller than the one it refused). Each such detach refuses at least one more message, so a
    message over the limit costs at most one lost link, however often it comes back."""

    def __init__(self) -> None:
        self.limit: int | None = None

    def learn(self, largest_in_flight: int) -> None:
        self.limit = largest_in_flight - 1 if self.limit is None else min(self.limit, largest_in_flight - 1)

    def refuse(self, size: int) -> str | None:
        if self.limit is not None and size > self.limit:
            return (f"not sent: {SIZE_EXCEEDED}: {size} bytes; the BI detached the link for a message of "
                    f"{self.limit + 1} bytes or more")
        return None
