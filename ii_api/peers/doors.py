"""What the links to other interchanges are given (the door of :mod:`ii_api.peers`).

* :class:`MessageSink`: where a federation link (:class:`~ii_api.peers.federation.Federation`)
  hands each message it pulls; for one subscription at a neighbour that is
  :class:`ii_api.resources.imports.TargetedImport`, which offers it to the local sources the
  subscription serves;
* :class:`DiscoveryListener`: told each discovery round's result
  (:class:`~ii_api.peers.discovery.Discovery`); in a node
  :meth:`ii_api.node.propagation.Propagation.discovered`;
* :class:`ClientContext`: the current TLS client context (the node's interchange certificate,
  reloaded with it), for the HTTPS client and the federation links; in a node
  :attr:`certs.node_tls.NodeTls.client` ``.current``;
* :class:`EventSink`: the node's JSON log (``federation_link_up``/``_down``); in a node
  :meth:`ii_api.node.service.IIService.event`;
* :class:`LinkDown`: told when a federation link is refused or lost; in a node the subscription's
  runner (:class:`ii_api.resources.outgoing.OutgoingRunner`), which polls the subscription at once.
"""
from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Protocol

from interchange.broker.engine import StoreReceipt

if TYPE_CHECKING:
    from ii_api.peers.discovery import DiscoveryResult
    from ii_api.peers.federation import RemoteEndpoint

__all__ = ["ClientContext", "DiscoveryListener", "EventSink", "LinkDown", "MessageSink"]


class MessageSink(Protocol):
    """Where a federation link hands each message it receives from a neighbour."""

    def publish_imported(self, raw: bytes, neighbour: str) -> StoreReceipt | None:
        """Route one message; raise :class:`~interchange.broker.engine.Rejected` for a malformed one.
        A receipt: the message is durable and settled upstream once stored."""


class DiscoveryListener(Protocol):
    """Awaited with the result of each discovery round (IP_089)."""

    async def __call__(self, result: DiscoveryResult, /) -> None: ...


class ClientContext(Protocol):
    """The TLS client context to use for the next connection (it changes when the files are reloaded)."""

    def __call__(self) -> ssl.SSLContext: ...


class EventSink(Protocol):
    """A record for the node's JSON log: ``(level, event, fields)``."""

    def __call__(self, level: str, kind: str, fields: dict, /) -> None: ...


class LinkDown(Protocol):
    """Told that the federation link to ``endpoint`` was refused or lost, and why."""

    def __call__(self, endpoint: RemoteEndpoint, reason: str, /) -> None: ...
