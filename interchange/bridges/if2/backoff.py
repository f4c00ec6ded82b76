"""C-Roads -> IF2: how long a nacked export waits before the BI gets it back.

RabbitMQ nacks a publish it cannot take (a full ``x-overflow: reject-publish`` queue, an internal
error; the bridge counts an unreachable RabbitMQ the same); the export is then released at the BI,
whose source gives it out again at once, so released at once the bridge would publish it and be
nacked in a tight loop. :class:`NackBackoff` says when to release each nacked export: a round of
nacks holds its releases ``delay_s``, starting at ``initial_s`` and multiplied by ``factor`` for
each new round up to ``maximum_s``; a confirm ends the back-off (the next nack starts at
``initial_s``). A nack of a publish made before the current round's hold ended (the copies in
flight with the first one, fresh ones during the hold) belongs to that round: it is released with
it and does not grow the delay. The delivery stays unsettled at the BI while held, so nothing is
lost and IF2 gets it once (the copy bookkeeping of :mod:`.copies` is untouched). Sans-I/O: the
caller passes the time (monotonic seconds).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NackBackoff"]


@dataclass
class NackBackoff:
    initial_s: float = 0.01
    maximum_s: float = 1.0
    factor: float = 2.0
    delay_s: float = 0.0  #: the current round's hold; 0: no nack since the last confirm
    until: float = 0.0  #: the current round's releases are due then

    def nacked(self, published_at: float, now: float) -> float:
        """A publish made at ``published_at`` was nacked at ``now``: when to release its export."""
        if self.delay_s and published_at < self.until:
            return max(self.until, now)  # the current round (its hold may have passed meanwhile)
        self.delay_s = min(self.maximum_s, self.delay_s * self.factor) if self.delay_s else self.initial_s
        self.until = now + self.delay_s
        return self.until

    def confirmed(self) -> None:
        """A publish was confirmed: RabbitMQ takes messages again."""
        self.delay_s = self.until = 0.0

    @property
    def active(self) -> bool:
        return self.delay_s > 0
