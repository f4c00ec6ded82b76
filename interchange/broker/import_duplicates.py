"""Duplicate suppression at import for multi-hop route changes, sans-I/O.

During a make-before-break route change (:mod:`ii_api.decisions.handover`) a message reaches a
local source over two routes; the copies differ only in their annotations, the bare message is the
same (IP_014/015). An imported message whose bare message a source already got within the window
is not offered to it again (``dropped_message``, reason ``duplicate``). Only with ``[ii.multihop]
enabled``; locally published messages are never checked. The window is bounded by time
(``window_ms``) and count (``max_entries``). The price and the reasoning: docs/broker.md
("Multi-hop federation").
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict

from interchange.broker.amqp_scan import find_message_annotations

__all__ = ["ImportDuplicates", "bare_digest"]


def bare_digest(raw: bytes | bytearray, start: int = -1) -> bytes:
    """A 16-byte digest of the bare message (everything after the message annotations, which
    starts at ``start`` when the caller knows it); raise
    :class:`~interchange.broker.amqp_scan.ScanError` if the sections before it are malformed."""
    if start < 0:
        start = find_message_annotations(raw).end
    return hashlib.blake2b(memoryview(raw)[start:], digest_size=16).digest()


class ImportDuplicates:
    """Which bare messages each source got from imports lately (by digest)."""

    def __init__(self, window_ms: int, max_entries: int = 100_000) -> None:
        if window_ms <= 0 or max_entries <= 0:
            raise ValueError("the duplicate window needs a positive duration and size")
        self.window_ms = window_ms
        self.max_entries = max_entries
        self._seen: OrderedDict[tuple[str, bytes], int] = OrderedDict()  #: oldest first -> when first seen

    def __len__(self) -> int:
        return len(self._seen)

    def first(self, address: str, digest: bytes, now_ms: int) -> bool:
        """True (and remembered) if source ``address`` has not had this bare message within the
        window; False for a second copy."""
        self._forget_old(now_ms)
        key = (address, digest)
        if key in self._seen:
            return False
        self._seen[key] = now_ms
        if len(self._seen) > self.max_entries:
            self._seen.popitem(last=False)
        return True

    def _forget_old(self, now_ms: int) -> None:
        seen, horizon = self._seen, now_ms - self.window_ms
        while seen:
            key, at = next(iter(seen.items()))
            if at > horizon:
                return
            del seen[key]
