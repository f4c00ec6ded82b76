"""A source's bounded buffer and its hand-off to consumer links (sans-I/O).

IP_032: every source buffers at least 200 messages; bounded in count and bytes, and when
full the oldest message is dropped and counted, so one slow consumer never slows the
publishers or the other consumers. IP_033: an expired message is never delivered.
IP_128/129: messages of one (publicationId, shardId) never overtake each other: the buffer
is FIFO, queued messages go out before new ones, and while several links share a source
each shard sticks to the link that received its first message.

A buffered message waits in its compact form where it has one (:meth:`BrokerMessage.compact`:
a tuple, no object per message) and becomes a :class:`BrokerMessage` again when it leaves the buffer;
each is counted for what its form holds (:mod:`interchange.broker.memory`).

Every message a source loses undelivered (evicted from a full buffer, expired) is reported to its
:class:`LossObserver` one by one, so the log can account for it; a message a consumer
gives back is counted per source (``BrokerMessage.redeliveries``: its next delivery attempt).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from interchange.broker.addresses import SourceSpec
from interchange.broker.memory import COMPACT_OVERHEAD, MESSAGE_OVERHEAD, BufferLimits, MemoryBudget
from interchange.broker.message import EXPIRY_MASK, BrokerMessage, Compact

Matcher = Callable[[dict], bool]
#: A buffered message: its compact form, or the message itself (durable, given back, built by hand, large)
Entry = Compact | BrokerMessage


def _hold(message: BrokerMessage) -> Entry:
    """What the buffer keeps of ``message``."""
    entry = message.compact()
    if entry is None:
        message.shed()
        return message
    return entry


def _cost(entry: Entry) -> int:
    """What a buffered entry is counted for (:mod:`interchange.broker.memory`)."""
    if isinstance(entry, tuple):
        return len(entry[0]) + COMPACT_OVERHEAD
    return len(entry.raw) + MESSAGE_OVERHEAD


def _key(entry: Entry) -> tuple:
    return entry[1] if isinstance(entry, tuple) else entry.shard_key


def _expired(entry: Entry, now_ms: int) -> bool:
    if isinstance(entry, tuple):
        expiry = entry[3] & EXPIRY_MASK  # the expiry + 1, 0 for none
        return expiry != 0 and expiry <= now_ms + 1
    expiry_ms = entry.expiry_ms
    return expiry_ms is not None and expiry_ms <= now_ms


def _message(entry: Entry) -> BrokerMessage:
    return BrokerMessage.restore(entry) if isinstance(entry, tuple) else entry


class LossObserver(Protocol):
    """Told about each message a source loses (implemented by the broker's observer)."""

    def dropped(self, message: BrokerMessage, source: str, reason: str) -> None:
        """Lost undelivered from ``source``: ``buffer_full`` (IP_032: evicted, the oldest) or
        ``source_deleted`` (still buffered when the source was deleted)."""

    def expired_in(self, message: BrokerMessage, source: str) -> None:
        """IP_033: expired in ``source`` before delivery."""


class ConsumerLink(Protocol):
    """What a source (and the router) needs from a consumer's link (implemented by the AMQP engine)."""

    selector: Matcher | None
    #: the source the link is attached to (set when a replacing source adopts the links)
    source: Source | None

    @property
    def identity(self) -> str:
        """The consumer's identity (its certificate's CN)."""

    def close(self, condition: str, description: str) -> None:
        """Detach the link with an AMQP error condition (its source deleted, its grant withdrawn)."""

    def can_send(self) -> bool:
        """True while the link has credit and its connection is not back-pressured."""

    def send(self, message: BrokerMessage) -> None:
        """Deliver a message (uses one credit)."""


_SENT, _BLOCKED, _NO_TAKER = 0, 1, 2


class Source:
    """Runtime state of one source address.

    Buffered messages wait in FIFO order. A message is *blocked* when a link wants it (its
    selector matches) but cannot take it now (no credit, back-pressure); later messages of the
    same shard then wait behind it. A message no attached link wants does not hold anything up.
    After a full pass over the buffer the source is *clean*: it knows which shards are blocked,
    so a new message can be handed over directly without rescanning the buffer; credit and link
    changes make it unclean again.
    """

    __slots__ = ("spec", "node_selector", "residual", "_queue", "_bytes", "links", "_next_link", "_shard_owner",
                 "_blocked", "_clean", "dropped", "expired", "delivered", "enqueued", "observer", "max_bytes", "budget")

    def __init__(self, spec: SourceSpec, node_selector: Matcher | None, observer: LossObserver | None = None,
                 limits: BufferLimits = BufferLimits(), budget: MemoryBudget | None = None) -> None:
        self.spec = spec
        #: the node's budget this source's buffer counts against (None: only its own limits)
        self.budget = budget
        self.max_bytes = limits.source_bytes(spec)  #: its own limit, else the node's default
        self.observer = observer
        self.node_selector = node_selector
        #: what is left of the node selector once the routing index has matched (set by the index)
        self.residual = node_selector
        self._queue: deque[Entry] = deque()
        self._bytes = 0
        self.links: list[ConsumerLink] = []
        self._next_link = 0
        self._shard_owner: dict[tuple, ConsumerLink] = {}
        self._blocked: set[tuple] = set()
        self._clean = True
        self.dropped = 0
        self.expired = 0
        self.delivered = 0
        self.enqueued = 0

    @property
    def depth(self) -> int:
        return len(self._queue)

    @property
    def depth_bytes(self) -> int:
        """What the buffer is counted for: each message's bytes and its form's overhead (:mod:`~interchange.broker.memory`)."""
        return self._bytes

    def _count(self, delta: int) -> None:
        self._bytes += delta
        budget = self.budget
        if budget is not None:
            budget.used += delta

    def held(self) -> tuple[int, int]:
        """(durable, memory-only) messages buffered: what a restart keeps and what it loses."""
        durable = sum(1 for entry in self._queue if not isinstance(entry, tuple) and entry.holders is not None)
        return durable, len(self._queue) - durable

    def buffered(self) -> list[BrokerMessage]:
        """The buffered messages, oldest first (restored from their compact form: for tests and tools)."""
        return [_message(entry) for entry in self._queue]

    def add_link(self, link: ConsumerLink) -> None:
        self.links.append(link)
        self._clean = False

    def remove_link(self, link: ConsumerLink) -> None:
        if link in self.links:
            self.links.remove(link)
        for key in [k for k, owner in self._shard_owner.items() if owner is link]:
            del self._shard_owner[key]
        self._clean = False

    def credit_changed(self, now_ms: int) -> None:
        """A link got credit or its connection can write again: retry the buffer."""
        self._clean = False
        self.pump(now_ms)

    def offer(self, message: BrokerMessage, now_ms: int) -> None:
        """Take a routed message: hand it to a ready link, or buffer it."""
        self.enqueued += 1
        was_empty = not self._queue
        if was_empty or (self._clean and message.shard_key not in self._blocked):
            outcome = self._try_send(message)
            if outcome == _SENT:
                return
            if was_empty:
                self._blocked.clear()
                self._clean = True
            entry = _hold(message)
            self._queue.append(entry)
            self._count(_cost(entry))
            if outcome == _BLOCKED:
                self._blocked.add(message.shard_key)
            self._evict()
            return
        entry = _hold(message)
        self._queue.append(entry)
        self._count(_cost(entry))
        self._evict()
        if not self._clean:
            self.pump(now_ms)
        else:
            self._blocked.add(message.shard_key)

    def offer_all(self, messages: list[BrokerMessage], now_ms: int) -> None:
        """:meth:`offer` of each of ``messages``, in order: while the buffer is empty and its one link
        takes every message (no selector), as many as the link takes now go to it in one call
        (``send_run``, where the link has it: what :meth:`offer` would send one by one); the rest
        one by one."""
        links = self.links
        if not self._queue and len(links) == 1 and links[0].selector is None:
            send_run = getattr(links[0], "send_run", None)
            if send_run is not None:
                sent: int = send_run(messages)
                self.enqueued += sent
                self.delivered += sent
                if sent == len(messages):
                    return
                messages = messages[sent:]
        for message in messages:
            self.offer(message, now_ms)

    def _evict(self) -> None:
        spec = self.spec
        while self._queue and (len(self._queue) > spec.max_messages or self._bytes > self.max_bytes):
            self.evict_oldest("buffer_full")

    def evict_oldest(self, reason: str) -> int:
        """Drop the oldest buffered message, reported lost for ``reason`` (``buffer_full``: this
        source's limits, IP_032; ``node_memory``: the node's budget); return its cost (0: empty)."""
        if not self._queue:
            return 0
        old = self._queue.popleft()
        cost = _cost(old)
        self._count(-cost)
        self.dropped += 1
        if self.observer is not None:
            self.observer.dropped(_message(old), self.spec.address, reason)
        return cost

    def _try_send(self, message: BrokerMessage) -> int:
        links = self.links
        if not links:
            return _NO_TAKER
        n = len(links)
        if n == 1:  # (the properties read only for a link selector: a buffered message decodes them again)
            link = links[0]
            if link.selector is not None and not link.selector(message.properties):
                return _NO_TAKER
            if not link.can_send():
                return _BLOCKED
            link.send(message)
            self.delivered += 1
            return _SENT
        properties = message.properties
        key = message.shard_key
        owner = self._shard_owner.get(key)
        if owner is not None and (owner.selector is None or owner.selector(properties)):
            if not owner.can_send():
                return _BLOCKED
            owner.send(message)
            self.delivered += 1
            return _SENT
        wanted = False
        for i in range(n):
            link = links[(self._next_link + i) % n]
            if link.selector is not None and not link.selector(properties):
                continue
            wanted = True
            if link.can_send():
                self._next_link = (self._next_link + i + 1) % n
                self._shard_owner[key] = link
                link.send(message)
                self.delivered += 1
                return _SENT
        return _BLOCKED if wanted else _NO_TAKER

    def pump(self, now_ms: int) -> None:
        """Deliver buffered messages, oldest first, to links that can take them.

        Scans from the head and stops as soon as no link can take anything more, so a credit
        grant costs what it delivers plus the messages it has to step over, not the backlog.
        """
        queue = self._queue
        links = self.links
        if not queue or not any(link.can_send() for link in links):
            self._drop_expired(now_ms)
            self._clean = True
            self._blocked = {_key(entry) for entry in queue}
            return
        skipped: list[Entry] = []
        blocked: set[tuple] = set()
        while queue:
            entry = queue.popleft()
            if _expired(entry, now_ms):
                self._lose_expired(entry)
                continue
            key = _key(entry)
            outcome = _BLOCKED if key in blocked else self._try_send(_message(entry))
            if outcome == _SENT:
                self._count(-_cost(entry))
                continue
            skipped.append(entry)
            if outcome == _BLOCKED:
                blocked.add(key)
                if not any(link.can_send() for link in links):
                    # Nothing more can go out until credit or links change, which makes the
                    # source unclean again; until then every new message is held anyway.
                    break
        if skipped:
            queue.extendleft(reversed(skipped))
        self._blocked = blocked
        self._clean = True

    def _drop_expired(self, now_ms: int) -> None:
        queue = self._queue
        while queue and _expired(queue[0], now_ms):
            self._lose_expired(queue.popleft())

    def _lose_expired(self, entry: Entry) -> None:
        """Account for a message taken off the buffer because it expired (IP_033)."""
        self._count(-_cost(entry))
        self.expired += 1
        if self.observer is not None:
            self.observer.expired_in(_message(entry), self.spec.address)

    def expire(self, now_ms: int) -> int:
        """Drop every expired message; return how many were dropped."""
        keep: deque[Entry] = deque()
        dropped = 0
        for entry in self._queue:
            if not _expired(entry, now_ms):
                keep.append(entry)
            else:
                self._lose_expired(entry)
                dropped += 1
        if dropped:
            self._queue = keep
        return dropped

    def adopt(self, old: "Source") -> None:
        """Take over the buffer, links and counters of the source this one replaces."""
        # the old source's bytes are in the budget already
        self._queue, self._bytes = old._queue, old._bytes  # noqa: SLF001
        self.links, self._shard_owner = old.links, old._shard_owner  # noqa: SLF001
        self.dropped, self.expired = old.dropped, old.expired
        self.delivered, self.enqueued = old.delivered, old.enqueued
        self._clean = False
        for link in self.links:
            link.source = self
        self._evict()

    def requeue(self, messages: list[BrokerMessage]) -> None:
        """Put messages a consumer never settled back at the front, in their order."""
        address = self.spec.address
        for message in messages:
            counts = message.redeliveries
            if counts is None:
                counts = message.redeliveries = {}
            counts[address] = counts.get(address, 0) + 1
        for message in reversed(messages):
            entry = _hold(message)  # given back: ``redeliveries`` keeps it an object
            self._queue.appendleft(entry)
            self._count(_cost(entry))
        self._clean = False
        self._evict()

    def clear(self, reason: str = "source_deleted") -> None:
        """Drop every buffered message (each reported as dropped for ``reason``)."""
        if self.observer is not None:
            for entry in self._queue:
                self.observer.dropped(_message(entry), self.spec.address, reason)
        self.dropped += len(self._queue)
        self._queue.clear()
        self._count(-self._bytes)
