"""The broker's address model: targets (where publishers send) and sources (where consumers read).

The interface between the data plane and the control plane: the II creates and deletes targets
and sources at run time through :class:`AddressBook` (before it runs, the config file does).
A **target** names who may publish, optionally a selector and a coverage
(:mod:`interchange.broker.coverage`), and its ``origin`` (IP_109: imported data is never served to
a third interchange). A **source** is a bounded buffer (IP_032) fed by its node selector and scope;
links may add their own selector and share the buffer. Details: docs/broker.md ("Addresses").
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

import jms_selectors
from interchange.broker.coverage import Coverage


class Origin(str, Enum):
    """Where messages published on a target come from."""

    LOCAL = "local"  #: produced by a C-ITS actor connected to this interchange
    FEDERATED = "federated"  #: imported from another interchange's source


class Scope(str, Enum):
    """Which published messages may enter a source."""

    ALL = "all"  #: local and imported data (sources for local actors)
    LOCAL = "local"  #: locally produced data only (sources served to other interchanges, IP_109)


class TargetSpec(BaseModel):
    """A publish address."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    address: str = Field(min_length=1, max_length=1024)
    publishers: frozenset[str] = Field(default_factory=frozenset, description="CNs allowed to publish; empty = nobody")
    selector: str | None = Field(default=None, description="messages must match this selector to be accepted")
    coverage: Coverage | None = Field(default=None, description="messages must fit one of these capabilities "
                                      "to be accepted (IP_077)")
    origin: Origin = Origin.LOCAL
    shard_count: int | None = Field(default=None, ge=1, description="capability shardCount, bounds shardId (IP_130)")
    process: int | None = Field(default=None, ge=0, description="broker process serving it when the node runs "
                                "several (default: by a hash of the address); see interchange.broker.placement")


class SourceSpec(BaseModel):
    """A consume address with its buffer limits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    address: str = Field(min_length=1, max_length=1024)
    consumers: frozenset[str] = Field(default_factory=frozenset, description="CNs allowed to consume; empty = nobody")
    selector: str | None = Field(default=None, description="node-set selector; every message must match it")
    scope: Scope = Scope.ALL
    max_messages: int = Field(default=10_000, ge=200, description="IP_032: at least 200 messages")
    max_bytes: int | None = Field(default=None, ge=1024 * 1024, description="None: the node's default "
                                  "([broker.memory] source_max_bytes); never below 200 messages of the largest "
                                  "accepted size (interchange.broker.memory)")


class AddressError(ValueError):
    """An address operation that cannot be done (duplicate, unknown, invalid selector)."""


AddressListener = Callable[[str, str, "TargetSpec | SourceSpec | None"], None]


class AddressBook:
    """The set of targets and sources, changed at run time by config or the II.

    Listeners are called as ``listener(kind, address, spec_or_None)`` (``kind`` is "target" or
    "source"; None when the address was removed) after each change, so the router can build or
    tear down its runtime objects; removing an address detaches its links.
    """

    def __init__(self) -> None:
        self._targets: dict[str, TargetSpec] = {}
        self._sources: dict[str, SourceSpec] = {}
        self._listeners: list[AddressListener] = []

    def subscribe(self, listener: AddressListener) -> None:
        """Call ``listener(kind, address, spec_or_None)`` after every change."""
        self._listeners.append(listener)

    def _notify(self, kind: str, address: str, spec: TargetSpec | SourceSpec | None) -> None:
        for listener in self._listeners:
            listener(kind, address, spec)

    @property
    def targets(self) -> dict[str, TargetSpec]:
        return dict(self._targets)

    @property
    def sources(self) -> dict[str, SourceSpec]:
        return dict(self._sources)

    def target(self, address: str) -> TargetSpec | None:
        return self._targets.get(address)

    def source(self, address: str) -> SourceSpec | None:
        return self._sources.get(address)

    def put_target(self, spec: TargetSpec) -> None:
        """Create or replace a target."""
        if spec.address in self._sources:
            raise AddressError(f"address {spec.address!r} is already a source")
        _check_selector(spec.selector)
        self._targets[spec.address] = spec
        self._notify("target", spec.address, spec)

    def put_source(self, spec: SourceSpec) -> None:
        """Create or replace a source (its buffer is kept when only grants or limits change)."""
        if spec.address in self._targets:
            raise AddressError(f"address {spec.address!r} is already a target")
        _check_selector(spec.selector)
        self._sources[spec.address] = spec
        self._notify("source", spec.address, spec)

    def remove(self, address: str) -> None:
        """Delete a target or source; its links are detached."""
        if address in self._targets:
            del self._targets[address]
            self._notify("target", address, None)
        elif address in self._sources:
            del self._sources[address]
            self._notify("source", address, None)
        else:
            raise AddressError(f"no such address {address!r}")

    def load(self, targets: Iterable[TargetSpec], sources: Iterable[SourceSpec]) -> None:
        for t in targets:
            self.put_target(t)
        for s in sources:
            self.put_source(s)


def _check_selector(text: str | None) -> None:
    if text is None:
        return
    try:
        jms_selectors.compile(text)
    except jms_selectors.SelectorError as exc:
        raise AddressError(f"invalid selector: {exc}") from exc
