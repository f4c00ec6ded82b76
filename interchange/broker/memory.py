"""What a buffered message costs, and the limits that bound the buffers (sans-I/O; IP_032).

A buffered message is counted for its encoded size plus the memory the broker holds for it besides
those bytes: :data:`COMPACT_OVERHEAD` in its compact form (nearly all: a tuple, see
:mod:`interchange.broker.message`), :data:`MESSAGE_OVERHEAD` kept as an object (durable, given
back, large); its decoded properties are not kept. The byte limits bound the memory, not just the
payloads.

The node's budget (``[broker.memory] node_max_bytes``, shared equally by the broker processes, by
default 512 MiB for each; :class:`MemoryBudget`) bounds the sum over all sources of what they hold
(it must hold IP_032's 200 messages of the largest size too): past it, the source holding the most gives up its oldest messages
(logged one by one as ``dropped_message`` with ``reason = node_memory``, each naming its source,
as IP_032's per-source drops are) until the sum is back under the low-water mark, and a
``memory_budget`` record says how many each episode cost. Publishers are never slowed nor refused
for it (IP_032: one slow consumer must not hold the others up), and the sources that keep up lose
nothing. A message held by several sources is counted in each: the bound is conservative.

IP_032: every source buffers at least :data:`IP_032_FLOOR` messages. A source also evicts by bytes,
so its byte limit must hold that many messages of the largest size the broker accepts
(``[broker.limits] max_message_size``), or a briefly offline consumer of large messages would lose
data after fewer: :meth:`BufferLimits.problems` names every limit that undercuts it, and the node
refuses such a configuration at start. A source without a byte limit of its own (those the II
creates) takes :attr:`BufferLimits.source_max_bytes`.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from interchange.broker.addresses import SourceSpec

#: IP_032: the fewest messages a source must be able to buffer.
IP_032_FLOOR = 200
MIB = 1024 * 1024
#: the node's budget for each broker process when ``[broker.memory] node_max_bytes`` is not set
DEFAULT_PROCESS_BUDGET = 512 * MIB


#: Bytes a message buffered as an object holds besides its encoded bytes (measured with tracemalloc
#: on CPython 3.11: the bytes object's header and pymalloc's rounding, the 13-slot message object
#: with its GC header, four int objects, the deque slot; tests/unit/test_message_memory.py checks it).
MESSAGE_OVERHEAD = 780
#: The same for a message buffered in its compact form (the bytes object's 33-byte header and up to
#: 15 bytes of pymalloc's rounding, the 4-tuple's 80 bytes with its GC header, the packed int's 48,
#: the deque's slot and its share of the deque's block; checked the same way).
COMPACT_OVERHEAD = 190


def message_cost(size: int) -> int:
    """The most a buffered message of ``size`` encoded bytes is counted for against the limits (its
    form as an object: what the floors assume)."""
    return size + MESSAGE_OVERHEAD


def compact_cost(size: int) -> int:
    """What a buffered message of ``size`` encoded bytes is counted for in its compact form."""
    return size + COMPACT_OVERHEAD


@dataclass(frozen=True, slots=True)
class BufferLimits:
    """The byte limits of the buffers, with the largest message the broker accepts."""

    max_message_size: int = MIB
    #: the byte limit of a source whose spec has none (the II's sources)
    source_max_bytes: int = 256 * MIB
    #: the budget of all sources together (of one broker process: the node's divided by their number)
    node_max_bytes: int = DEFAULT_PROCESS_BUDGET

    @property
    def floor_bytes(self) -> int:
        """What :data:`IP_032_FLOOR` messages of the largest accepted size are counted for."""
        return IP_032_FLOOR * message_cost(self.max_message_size)

    def source_bytes(self, spec: SourceSpec) -> int:
        """A source's byte limit: its own, else :attr:`source_max_bytes`."""
        return spec.max_bytes if spec.max_bytes is not None else self.source_max_bytes

    def problems(self, sources: Iterable[SourceSpec] = ()) -> list[str]:
        """Every limit that holds fewer than :data:`IP_032_FLOOR` messages of the largest accepted size."""
        floor = self.floor_bytes
        need = (f"{IP_032_FLOOR} messages of max_message_size {self.max_message_size} bytes need {floor} bytes "
                f"(IP_032)")
        found = []
        if self.source_max_bytes < floor:
            found.append(f"the default max_bytes of sources ([broker.memory] source_max_bytes) {self.source_max_bytes} "
                         f"is too small: {need}")
        for spec in sources:
            if spec.max_bytes is not None and spec.max_bytes < floor:
                found.append(f"source {spec.address!r}: max_bytes {spec.max_bytes} is too small: {need}")
        if self.node_max_bytes < floor:
            found.append(f"the node's budget ([broker.memory] node_max_bytes, per broker process) "
                         f"{self.node_max_bytes} is too small: {need}")
        return found


class Evictable(Protocol):
    """What the budget needs of a source (implemented by :class:`interchange.broker.source.Source`)."""

    @property
    def depth_bytes(self) -> int:
        """What the source's buffer is counted for."""

    def evict_oldest(self, reason: str) -> int:
        """Drop the oldest buffered message (reported as lost for ``reason``); return its cost (0: empty)."""


class MemoryBudget:
    """The node's byte budget across its sources (one object per broker process; the sources add
    and subtract what they hold in :attr:`used`, the router calls :meth:`enforce` after routing)."""

    __slots__ = ("limit", "low_water", "used", "evicted", "episodes")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: enforcing stops here, so that one episode frees room for many messages, not one
        self.low_water = limit - limit // 32
        self.used = 0
        self.evicted = 0  #: messages evicted for the budget since start
        self.episodes = 0

    def over(self) -> bool:
        return self.used > self.limit

    def enforce(self, sources: Iterable[Evictable]) -> int:
        """Evict the oldest messages of the source holding the most until :attr:`used` is under
        :attr:`low_water` (a heap of the sources by bytes: a sweep costs a sort, not a scan per
        message); return how many."""
        if self.used <= self.limit:
            return 0
        heap = [(-source.depth_bytes, n, source) for n, source in enumerate(sources) if source.depth_bytes]
        heapq.heapify(heap)
        evicted = 0
        while self.used > self.low_water and heap:
            _, n, source = heapq.heappop(heap)
            below = -heap[0][0] if heap else 0
            freed = 1
            while self.used > self.low_water and source.depth_bytes >= below:
                freed = source.evict_oldest("node_memory")
                if not freed:
                    break
                evicted += 1
            if freed and source.depth_bytes:
                heapq.heappush(heap, (-source.depth_bytes, n, source))
        self.evicted += evicted
        self.episodes += 1
        return evicted
