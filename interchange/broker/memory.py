"""What a buffered message costs, and the limits that bound the buffers (sans-I/O; IP_032).

IP_032: every source buffers at least :data:`IP_032_FLOOR` messages. A source also evicts by bytes,
so its byte limit must hold that many messages of the largest size the broker accepts
(``[broker.limits] max_message_size``), or a briefly offline consumer of large messages would lose
data after fewer: :meth:`BufferLimits.problems` names every limit that undercuts it, and the node
refuses such a configuration at start. A source without a byte limit of its own (those the II
creates) takes :attr:`BufferLimits.source_max_bytes`.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from interchange.broker.addresses import SourceSpec

#: IP_032: the fewest messages a source must be able to buffer.
IP_032_FLOOR = 200
MIB = 1024 * 1024


def message_cost(size: int) -> int:
    """The bytes a buffered message of ``size`` encoded bytes is counted for against the limits."""
    return size


@dataclass(frozen=True, slots=True)
class BufferLimits:
    """The byte limits of the buffers, with the largest message the broker accepts."""

    max_message_size: int = MIB
    #: the byte limit of a source whose spec has none (the II's sources)
    source_max_bytes: int = 256 * MIB

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
        return found
