"""Where the messages of one of our subscriptions at a neighbour go in the local broker.

:class:`ii_api.peers.federation.Federation` hands every message it pulls to ``publish_imported(raw,
neighbour)``. :class:`TargetedImport` implements that for ONE outgoing subscription: the message
is admitted like any imported message (validated, marked as imported) and offered only to the
sources of the local subscriptions that subscription was requested for, never to a source
served to another interchange (scope ``local``; IP_109).

Why not route it broadly (``BrokerCore.publish_imported`` without ``only``): two local
subscriptions with overlapping but different selectors make two subscriptions at the same
neighbour, whose sources both carry a message in the overlap; routed broadly, each local
source would get it twice.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from ii_api.resources.doors import ImportSink
from interchange.broker.engine import StoreReceipt

__all__ = ["TargetedImport"]


class TargetedImport:
    """The ``core`` of a :class:`~ii_api.peers.federation.Federation`: imported data to chosen sources."""

    def __init__(self, core: ImportSink, targets: Callable[[], Iterable[str]]) -> None:
        self._core = core
        self._targets = targets

    def publish_imported(self, raw: bytes, neighbour: str) -> StoreReceipt | None:
        """Validate and offer one message to this subscription's local sources; raise Rejected
        for a malformed one (IP_016). A receipt: a durable message, stored when it is done."""
        return self._core.publish_imported(raw, neighbour, only=self._targets())
