"""Which broker process serves which address, when a node runs several (one per core).

A node runs ``processes`` broker processes on consecutive ports; process 0 is the node process
(the II and the federation links, imported data enters there). A **target** lives in exactly one
process (``TargetSpec.process``, or a stable hash of its address over ``target_processes``: all of them
unless the operator keeps some, e.g. process 0 and its II and federation work, for the targets placed
there by name), so a publication's shard order is kept (IP_128-130); a **source** exists in every process
and a consumer reads one endpoint per process (appendix G, tables 13-15). docs/broker.md ("Several broker
processes").
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from interchange.broker.addresses import TargetSpec

__all__ = ["Placement", "target_processes_problem"]


@dataclass(frozen=True, slots=True)
class Placement:
    """The process layout of one node: ``processes`` broker processes, this one being ``index``."""

    processes: int = 1
    index: int = 0
    #: the processes a target without a ``process`` of its own is hashed over (None: every one)
    target_processes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ValueError("a node runs at least one broker process")
        if not 0 <= self.index < self.processes:
            raise ValueError(f"process index {self.index} is not in 0..{self.processes - 1}")
        if self.target_processes is not None:
            problem = target_processes_problem(self.target_processes, self.processes)
            if problem is not None:
                raise ValueError(problem)

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
        hosts = self.target_processes
        if hosts is None:
            return zlib.crc32(address.encode()) % self.processes
        return hosts[zlib.crc32(address.encode()) % len(hosts)]

    def owns(self, spec: TargetSpec) -> bool:
        """Whether this process serves target ``spec``."""
        return self.processes == 1 or self.owner(spec) == self.index


def target_processes_problem(hosts: tuple[int, ...] | list[int], processes: int) -> str | None:
    """Why ``hosts`` cannot be the processes that targets are hashed over (None: they can)."""
    if not hosts:
        return "no process is named: targets must live somewhere"
    missing = sorted(k for k in hosts if not 0 <= k < processes)
    if missing:
        return f"process {', '.join(map(str, missing))} is not one of the node's ({processes}: 0..{processes - 1})"
    if len(set(hosts)) != len(hosts):
        return "a process is named twice"
    return None
