"""C-Roads -> IF2: what IF2 already has of a message the BI gives out again.

A BI delivery is settled only after RabbitMQ confirmed its IF2 copy; when the BI link goes before
the settlement got through, the source gives the message out again. :class:`IF2Copies` keeps, per
copy (publication, routing key, body digest), whether it is being published or is at IF2; a
delivery asks :meth:`IF2Copies.at_if2` first, and one IF2 has is settled without publishing. At
most ``limit`` copies are remembered (the oldest forgotten). A copy being published is a
:class:`Publishing`, whose future is made only when a delivery of the same copy waits for it (the
rare case: a message given out again while its first copy is unconfirmed). Details: docs/if2-bridge.md.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Hashable, Iterable

__all__ = ["IF2Copies", "Publishing"]

_AT_IF2 = "at IF2"


class Publishing:
    """A copy's publish under way: what :meth:`IF2Copies.published` ends; a waiter's future on demand."""

    __slots__ = ("_future", "copy")

    def __init__(self, copy: Hashable = None) -> None:
        self._future: asyncio.Future[bool] | None = None
        self.copy = copy  #: the copy it publishes

    def waiter(self) -> "asyncio.Future[bool]":
        """The future of this publish's confirm (made when first asked for)."""
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
        return self._future

    def end(self, confirmed: bool) -> None:
        if self._future is not None and not self._future.done():
            self._future.set_result(confirmed)


class IF2Copies:
    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        #: oldest first (an OrderedDict: forgetting the oldest is O(1), a dict's first key is not after many deletes)
        self._entries: OrderedDict[Hashable, Publishing | str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def at_if2(self, copy: Hashable) -> bool:
        """True when IF2 has ``copy`` (from an earlier delivery of the same message): settle, don't publish.
        A copy being published is waited for (its confirm or failure)."""
        entry = self._entries.get(copy)
        if entry is None:
            return False
        if isinstance(entry, Publishing):
            if not await asyncio.shield(entry.waiter()):
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
        if isinstance(entry, Publishing):
            return entry.waiter()  # (an entry is a Publishing only until its publish ended)
        return True

    def forget(self, copy: Hashable) -> None:
        """A delivery found ``copy`` at IF2 (:meth:`known`): it is asked for once, then forgotten."""
        if self._entries.get(copy) == _AT_IF2:
            del self._entries[copy]

    def publishing(self, copy: Hashable, publishing: Publishing | None = None) -> Publishing:
        """``copy`` is being published now (by ``publishing``, a new one when not given: a publisher's
        own object may be one); end it with :meth:`published`."""
        if publishing is None:
            publishing = Publishing(copy)
        self._entries[copy] = publishing
        return publishing

    def published_all(self, confirmed: Iterable[Publishing]) -> None:
        """:meth:`published` of each publish (of its :attr:`Publishing.copy`), confirmed."""
        entries = self._entries
        for publishing in confirmed:
            publishing.end(True)
            copy = publishing.copy
            if entries.get(copy) is publishing:  # (else a newer publish of the same copy took its place)
                entries[copy] = _AT_IF2
        while len(entries) > self.limit:
            entries.popitem(last=False)

    def published(self, copy: Hashable, publishing: Publishing, confirmed: bool) -> None:
        """Its publish ended, ``confirmed`` by RabbitMQ or not: a confirmed copy is remembered as at IF2."""
        publishing.end(confirmed)
        if self._entries.get(copy) is not publishing:
            return  # (a newer publish of the same copy took its place)
        if confirmed:
            self._entries[copy] = _AT_IF2
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)
        else:
            del self._entries[copy]
