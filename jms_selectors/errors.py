"""The one exception of the selector engine (IP_066: an invalid selector is refused at attach)."""
from __future__ import annotations


class SelectorError(ValueError):
    """An invalid selector, found while compiling it; evaluation never raises.

    ``position`` is the 0-based character offset in the selector text where the problem was
    found (``len(text)`` for "end of input"), ``reason`` a human-readable explanation and
    ``text`` the selector (or ``None`` when it was not a string).
    """

    def __init__(self, position: int, reason: str, text: str | None = None) -> None:
        self.position = position
        self.reason = reason
        self.text = text
        super().__init__(f"invalid selector at position {position}: {reason}")

    def __reduce__(self) -> tuple[type[SelectorError], tuple[object, ...]]:  # keep pickling (e.g. across processes) working
        return (type(self), (self.position, self.reason, self.text))
