"""Which broker process serves which address, when a node runs several (one per core).

A node runs ``processes`` broker processes on consecutive ports; process 0 is the node process
(the II and the federation links, imported data enters there). A **target** lives in exactly one
process (``TargetSpec.process``, or a stable hash of its address), so a publication's shard order
is kept (IP_128-130); a **source** exists in every process and a consumer reads one endpoint per
process (appendix G, tables 13-15). docs/broker.md ("Several broker processes").
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from interchange.broker.addresses import TargetSpec

__all__ = ["Placement"]


@dataclass(frozen=True, slots=True)
class Placement:
    """The process layout of one node: ``processes`` broker processes, this one being ``index``."""

    processes: int = 1
    index: int = 0

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ValueError("a node runs at least one broker process")
        if not 0 <= self.index < self.processes:
            raise ValueError(f"process index {self.index} is not in 0..{self.processes - 1}")

    def owner(self, spec: TargetSpec) -> int:
        """The process serving target ``spec``: its ``process`` field, else a stable hash of its address."""
        return self.owner_of(spec.address, spec.process)

    def owner_of(self, address: str, process: int | None = None) -> int:
        """The process serving the target ``address`` (``process``: the target's explicit choice)."""
        if process is not None:
            if process >= self.processes:
                raise ValueError(f"target {address!r} names broker process {process}, "
                                 f"but the node runs {self.processes}")
            return process
        if self.processes == 1:
            return 0
        return zlib.crc32(address.encode()) % self.processes

    def owns(self, spec: TargetSpec) -> bool:
        """Whether this process serves target ``spec``."""
        return self.processes == 1 or self.owner(spec) == self.index
