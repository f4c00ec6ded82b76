"""Where the messages of one of our subscriptions at a neighbour go in the local broker.

:class:`ii_api.federation.Federation` hands every message it pulls to ``publish_imported(raw,
neighbour)``. :class:`TargetedImport` implements that for ONE outgoing subscription: the message
is admitted like any imported message (validated, marked as imported) and offered only to the
sources of the local subscriptions that subscription was requested for, never to a source
served to another interchange (scope ``local``; IP_109).

Why not :meth:`BrokerCore.publish_imported` (offer to every matching source): two local
subscriptions with overlapping but different selectors make two subscriptions at the same
neighbour, whose sources both carry a message in the overlap; routed broadly, each local
source would get it twice.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from interchange.broker.addresses import Scope
from interchange.broker.engine import Rejected
from interchange.broker.router import BrokerCore

__all__ = ["TargetedImport"]


class TargetedImport:
    """The ``core`` of a :class:`~ii_api.federation.Federation`: imported data to chosen sources."""

    def __init__(self, core: BrokerCore, targets: Callable[[], Iterable[str]]) -> None:
        self._core = core
        self._targets = targets
        self.imported = 0

    def publish_imported(self, raw: bytes, neighbour: str) -> None:
        """Validate and offer one message; raise Rejected for a malformed one (IP_016)."""
        core = self._core
        now = core.clock_ms()
        try:
            message = core.admission.admit(raw, neighbour, True, None, now)
        except Rejected as exc:
            core.observer.rejected(neighbour, "(federation)", raw, exc.description)
            raise
        core.observer.received(message, f"federation:{neighbour}")
        if message.expiry_ms is not None and message.expiry_ms <= now:
            core.observer.expired(1)
            return
        self.imported += 1
        routed = 0
        for address in dict.fromkeys(self._targets()):
            source = core.sources.get(address)
            if source is None or source.spec.scope is not Scope.ALL:
                continue  # IP_109: never towards another interchange
            if source.node_selector is None or source.node_selector(message.properties):
                source.offer(message, now)
                routed += 1
        core.observer.routed(routed)
