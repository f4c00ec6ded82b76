"""IF2 republishing rules for the C-Roads -> IF2 direction (sans-I/O; fed messages and time).

IF2 6.4: publish again only 1. if the content changed on bit-level, 2. if the ttl expired but the
message is still valid, 3. at least once per hour. A message (its IF2 routing key and
publicationId; content: its body) is valid until its last C-Roads copy expires (IP_033;
``last seen + ttl``, without a ttl ``default_validity_s``). :meth:`RepublishPolicy.offer`: a new
message or a changed body at once, the same body only when its IF2 copy expired or is an hour old;
:meth:`RepublishPolicy.due`: valid messages to publish again between copies, with the validity
left as ttl; :meth:`RepublishPolicy.failed` forgets a message whose publishing failed.
Details: docs/if2-bridge.md ("Republishing").
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Due", "RepublishPolicy"]

P = TypeVar("P")
HOUR_S = 3600.0


@dataclass
class _Entry(Generic[P]):
    body: bytes
    payload: P  # what the caller needs to publish it again (its envelope)
    ttl_s: float | None
    valid_until: float
    published_at: float

    def republish_at(self, interval_s: float) -> float:
        """When the IF2 copy needs renewing: its ttl expired, or ``interval_s`` passed."""
        wait = interval_s if self.ttl_s is None else min(self.ttl_s, interval_s)
        return self.published_at + wait


@dataclass(frozen=True)
class Due(Generic[P]):
    """A message to publish again: its body, the caller's payload and the validity left (ms)."""

    key: Hashable
    body: bytes
    payload: P
    ttl_ms: int | None


class RepublishPolicy(Generic[P]):
    """Which C-Roads messages are (re)published to IF2, and when."""

    def __init__(self, interval_s: float = HOUR_S, default_validity_s: float = 24 * HOUR_S,
                 max_entries: int = 100_000) -> None:
        if not 0 < interval_s <= HOUR_S:
            raise ValueError("interval_s must be in (0, 3600]: IF2 republishes at least once per hour")
        self.interval_s = interval_s
        self.default_validity_s = default_validity_s
        self.max_entries = max_entries
        self._entries: dict[Hashable, _Entry[P]] = {}
        self.suppressed = 0  #: identical copies not published (IF2 FILTER04)

    def __len__(self) -> int:
        return len(self._entries)

    def offer(self, key: Hashable, body: bytes, payload: P, ttl_ms: int | None, now: float) -> bool:
        """A copy arrived from C-Roads: True if it is to be published now (and recorded as such)."""
        ttl_s = None if ttl_ms is None else ttl_ms / 1000.0
        valid_until = now + (self.default_validity_s if ttl_s is None else ttl_s)
        entries = self._entries
        entry = entries.get(key)
        if entry is None:
            if len(entries) >= self.max_entries:
                self._evict(now)
            entries[key] = _Entry(body, payload, ttl_s, valid_until, now)
            return True
        if entry.body == body and now < entry.republish_at(self.interval_s):
            entry.valid_until = max(entry.valid_until, valid_until)
            entry.payload = payload
            self.suppressed += 1
            return False
        # published again: the entry renewed, as a new one would be, and moved last (the dict stays ordered
        # by last publication)
        entry.body, entry.payload, entry.ttl_s, entry.valid_until, entry.published_at = \
            body, payload, ttl_s, valid_until, now
        entries[key] = entries.pop(key)
        return True

    def holds(self, key: Hashable, body: bytes) -> bool:
        """True when ``body`` is the content last published for ``key`` (a copy of it is not new)."""
        entry = self._entries.get(key)
        return entry is not None and entry.body == body

    def failed(self, key: Hashable) -> None:
        """Publishing it failed: forget it, so that its next copy is published."""
        self._entries.pop(key, None)

    def due(self, now: float) -> list[Due[P]]:
        """Valid messages whose IF2 copy must be renewed now (recorded as published); expired ones
        are forgotten."""
        out: list[Due[P]] = []
        for key, entry in list(self._entries.items()):
            left_ms = int((entry.valid_until - now) * 1000)
            if left_ms <= 0:  # (under a millisecond left: a copy would expire on arrival)
                del self._entries[key]
            elif now >= entry.republish_at(self.interval_s):
                entry.published_at = now
                if entry.ttl_s is not None:  # exact, not the rounded ms: the copy ends with the validity
                    entry.ttl_s = entry.valid_until - now
                out.append(Due(key, entry.body, entry.payload, None if entry.ttl_s is None else left_ms))
        return out

    def next_due(self) -> float | None:
        """The earliest time :meth:`due` has something to do (renewal or expiry), None if nothing."""
        times = [min(e.valid_until, e.republish_at(self.interval_s)) for e in self._entries.values()]
        return min(times) if times else None

    def _evict(self, now: float) -> None:
        """Full: drop expired entries, else the one published longest ago."""
        for key, entry in list(self._entries.items()):
            if now >= entry.valid_until:
                del self._entries[key]
        if len(self._entries) >= self.max_entries:
            del self._entries[next(iter(self._entries))]
