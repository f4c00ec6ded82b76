"""C-Roads -> IF2: what IF2 already has of a message the BI gives out again.

A BI delivery is settled only after RabbitMQ confirmed its IF2 copy; when the BI link goes before
the settlement got through, the source gives the message out again. :class:`IF2Copies` keeps, per
copy (publication, routing key, body digest), whether it is being published or is at IF2; a
delivery asks :meth:`IF2Copies.at_if2` first, and one IF2 has is settled without publishing. At
most ``limit`` copies are remembered (the oldest forgotten). Details: docs/if2-bridge.md.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["IF2Copies"]

_AT_IF2 = "at IF2"


class IF2Copies:
    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        #: oldest first (an OrderedDict: forgetting the oldest is O(1), a dict's first key is not after many deletes)
        self._entries: OrderedDict[Hashable, asyncio.Future[bool] | str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def at_if2(self, copy: Hashable) -> bool:
        """True when IF2 has ``copy`` (from an earlier delivery of the same message): settle, don't publish.
        A copy being published is waited for (its confirm or failure)."""
        entry = self._entries.get(copy)
        if entry is None:
            return False
        if isinstance(entry, asyncio.Future):
            if not await asyncio.shield(entry):
                return False  # that publish failed: this delivery publishes it
        if self._entries.get(copy) == _AT_IF2:
            del self._entries[copy]
        return True

    def known(self, copy: Hashable) -> "bool | asyncio.Future[bool]":
        """Without waiting: True when IF2 has ``copy``, False when not, the future of its publish when
        it is being published (:meth:`at_if2` waits for it)."""
        entry = self._entries.get(copy)
        if entry is None:
            return False
        if isinstance(entry, asyncio.Future):
            return entry if not entry.done() else entry.result()
        return True

    def forget(self, copy: Hashable) -> None:
        """A delivery found ``copy`` at IF2 (:meth:`known`): it is asked for once, then forgotten."""
        if self._entries.get(copy) == _AT_IF2:
            del self._entries[copy]

    def publishing(self, copy: Hashable) -> asyncio.Future[bool]:
        """``copy`` is being published now; resolve the future with :meth:`published`."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._entries[copy] = future
        return future

    def published(self, copy: Hashable, future: asyncio.Future[bool], confirmed: bool) -> None:
        """Its publish ended, ``confirmed`` by RabbitMQ or not: a confirmed copy is remembered as at IF2."""
        if not future.done():
            future.set_result(confirmed)
        if self._entries.get(copy) is not future:
            return  # (a newer publish of the same copy took its place)
        if confirmed:
            self._entries[copy] = _AT_IF2
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)
        else:
            del self._entries[copy]
