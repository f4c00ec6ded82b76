"""The doors of the Improved Interface: the small interfaces its objects are given.

Two lead to the data plane (:mod:`interchange.broker`), which the II never reaches past:

* :class:`AddressBookDoor`: the broker's :class:`~interchange.broker.addresses.AddressBook`,
  where the II puts the sources (IP_109) and targets its subscriptions and deliveries need;
* :class:`ImportSink`: where federation hands the messages it pulls from neighbours
  (:meth:`~interchange.broker.router.BrokerCore.publish_imported`: validated, marked as imported).

The others are between the II's own objects (one object owns each resource, see
:mod:`ii_api.service`); each object is given only the view of another it reads:

* :class:`NeighbourDirectory`: who our neighbours are (IP_089/125/126), owned by
  :class:`~ii_api.neighbours.Neighbours`;
* :class:`LocalCapabilityView`: the capabilities our actors registered (IP_077/109), owned by
  :class:`~ii_api.local_actors.ActorCapabilities`;
* :class:`NeighbourCapabilityView`: what the neighbours announced (IP_076), owned by
  :class:`~ii_api.neighbours.NeighbourCapabilities`.

Changes flow the other way as events the :class:`~ii_api.service.IIService` routes (callbacks
given at construction), so no object imports another's owner.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from ii_api.discovery import Neighbour
from ii_api.models import Capability
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.engine import StoreReceipt

__all__ = ["AddressBookDoor", "EventSink", "ImportSink", "LocalCapabilityView", "MessageSink",
           "NeighbourCapabilityView", "NeighbourDirectory"]

EventSink = Callable[[str, str, dict], None]
"""``(level, kind, fields)``: an II event for the node's JSON log."""


class AddressBookDoor(Protocol):
    """The data plane's addresses, as the II changes them."""

    def target(self, address: str) -> TargetSpec | None: ...

    def source(self, address: str) -> SourceSpec | None: ...

    def put_target(self, spec: TargetSpec) -> None: ...

    def put_source(self, spec: SourceSpec) -> None: ...

    def remove(self, address: str) -> None: ...


class MessageSink(Protocol):
    """Where a federation link hands each message it receives from a neighbour."""

    def publish_imported(self, raw: bytes, neighbour: str) -> StoreReceipt | None:
        """Route one message; raise :class:`~interchange.broker.engine.Rejected` for a malformed one.
        A receipt: the message is durable and settled upstream once stored (issue 11)."""


class ImportSink(Protocol):
    """The data plane's entry for imported messages, optionally offered to some sources only."""

    def publish_imported(self, raw: bytes, neighbour: str,
                         only: Iterable[str] | None = None) -> StoreReceipt | None: ...


class NeighbourDirectory(Protocol):
    """The neighbours discovery found (IP_089), the only interchanges the II talks to (IP_126)."""

    def neighbour(self, name: str) -> Neighbour | None: ...

    def require(self, cn: str, body_name: str | None = None) -> str: ...

    def endpoint_address(self, neighbour: str, host: str | None) -> str: ...


class LocalCapabilityView(Protocol):
    """Our capabilities: exactly those our local actors registered (IP_077/109)."""

    def all(self) -> list[Capability]: ...

    def of_actor(self, actor: str) -> list[Capability]: ...


class NeighbourCapabilityView(Protocol):
    """The capabilities each neighbour announced (IP_076)."""

    def by_neighbour(self) -> Mapping[str, list[Capability]]: ...
