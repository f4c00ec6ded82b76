"""Which broker process serves which address, when a node runs several (one per core).

Appendix G and the endpoint lists of tables 13-15 exist so that an interchange can scale a
capability's data over several broker nodes. Here a node runs ``processes`` broker processes on
consecutive ports (``port``, ``port + 1``, ...); process 0 is the node process itself, which also
hosts the Improved Interface and the federation links.

- A **target** lives in exactly one process (``TargetSpec.process``, or a stable hash of its
  address): everything one publisher sends on it is admitted by one process, so the order of a
  publication's shards is kept (IP_128-130) without any cross-process hand-off.
- A **source** exists in every process: each process routes the messages published on its own
  targets to its copy of the source, so a consumer reads one endpoint per process (the II hands
  them all out, as the spec's endpoint list allows). Imported (federated) data enters process 0.
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
