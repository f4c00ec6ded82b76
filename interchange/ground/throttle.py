"""Rate-limited records of a recurring event (sans-I/O: the caller gives the time).

A bridge that drops a controller's payload ten times a second must say so at warning level,
but not ten times a second: :class:`Throttle` lets the first occurrence of each key through at
once, then at most one per ``interval_s``, and tells each record how many occurrences it stands
for (those held back since the previous record, and this one). Keys are bounded: past
``max_keys`` the oldest key is forgotten (its next occurrence is recorded as a first one).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

__all__ = ["Throttle"]


@dataclass(slots=True)
class _Slot:
    last_s: float
    held: int = 0


class Throttle:
    """At most one record per key per ``interval_s`` (see the module docstring)."""

    def __init__(self, interval_s: float = 60.0, max_keys: int = 10_000) -> None:
        if interval_s < 0 or max_keys < 1:
            raise ValueError("interval_s >= 0 and max_keys >= 1")
        self.interval_s, self.max_keys = interval_s, max_keys
        self._slots: OrderedDict[Hashable, _Slot] = OrderedDict()

    def hit(self, key: Hashable, now_s: float) -> int | None:
        """One occurrence of ``key`` at ``now_s``: None to hold it back, else the number of
        occurrences the record stands for (1 for a first one)."""
        slot = self._slots.get(key)
        if slot is None:
            if len(self._slots) >= self.max_keys:
                self._slots.popitem(last=False)
            self._slots[key] = _Slot(now_s)
            return 1
        if now_s - slot.last_s < self.interval_s:
            slot.held += 1
            return None
        count, slot.held, slot.last_s = slot.held + 1, 0, now_s
        self._slots.move_to_end(key)
        return count
