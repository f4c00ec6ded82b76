"""Capability pushes (IP_075/091): our capabilities POSTed to every neighbour.

One :class:`Pusher` task per neighbour POSTs :meth:`IIService.capabilities_message
<ii_api.service.IIService.capabilities_message>` when woken (a local capability added or removed,
the neighbour new or moved) and at least every ``capability_repost_s`` (<= 24 h, IP_091); failures
are retried with backoff. The neighbour's answer (its capabilities) is recorded as if it had
POSTed them.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ii_api.client import IIClientError
from ii_api.subscriptions import same_cn

if TYPE_CHECKING:  # pragma: no cover
    from ii_api.service import IIService

log = logging.getLogger(__name__)


@dataclass
class Pusher:
    """Posts our capabilities to one neighbour when woken, and at least every repost interval."""

    wake: asyncio.Event
    task: asyncio.Task[None] | None = None
    pushes: int = 0
    last_error: str | None = None


class CapabilityPushes:
    """The pushers, one per discovered neighbour."""

    def __init__(self, service: IIService) -> None:
        self.service = service
        self._pushers: dict[str, Pusher] = {}

    def start(self, name: str) -> None:
        if self.service.closed or name in self._pushers:
            return
        pusher = Pusher(asyncio.Event())
        pusher.wake.set()  # IP_091: our capabilities go to a new neighbour at once
        self._pushers[name] = pusher
        pusher.task = asyncio.get_running_loop().create_task(self._push_loop(name, pusher), name=f"ii-push-{name}")

    def stop(self, name: str) -> None:
        pusher = self._pushers.pop(name, None)
        if pusher is not None and pusher.task is not None:
            pusher.task.cancel()

    def wake(self, name: str) -> None:
        """Push to ``name`` now (its pusher woken, or started)."""
        if name in self._pushers:
            self._pushers[name].wake.set()
        else:
            self.start(name)

    def wake_all(self) -> None:
        for pusher in self._pushers.values():
            pusher.wake.set()

    def state(self, name: str) -> Pusher | None:
        return self._pushers.get(name)

    def tasks(self) -> list[asyncio.Task[None]]:
        return [p.task for p in self._pushers.values() if p.task is not None]

    async def _push_loop(self, name: str, pusher: Pusher) -> None:
        service, config = self.service, self.service.config
        loop = asyncio.get_running_loop()
        failures = 0
        due = loop.time() + config.capability_repost_s
        while True:
            timeout = max(0.0, due - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pusher.wake.wait(), timeout)
            pusher.wake.clear()
            peer = service.neighbours_by_name.get(name)
            if peer is None:
                return
            try:
                theirs = await service.client.post_capabilities(peer, service.capabilities_message())
            except IIClientError as exc:
                failures += 1
                pusher.last_error = str(exc)
                delay = min(config.retry_min_s * 2 ** (failures - 1), config.retry_max_s, config.capability_repost_s)
                due = loop.time() + delay
                service.event("warning", "ii_capabilities_push_failed", {"neighbour": name, "error": str(exc),
                                                                         "retry_in_s": delay})
                continue
            failures, pusher.last_error = 0, None
            pusher.pushes += 1
            due = loop.time() + config.capability_repost_s
            service.event("info", "ii_capabilities_pushed", {"neighbour": name,
                                                             "count": len(service.local_cap_models)})
            if not same_cn(theirs.name, name):
                service.event("warning", "ii_capabilities_answer_ignored",
                              {"neighbour": name, "reason": f"answer names {theirs.name!r}"})
                continue
            try:
                async with service.lock:
                    if name in service.neighbours_by_name:
                        await service.set_neighbour_capabilities(name, theirs)
            except Exception:  # a bug or a store failure must not end the pushes to this neighbour
                log.exception("ii: recording the capabilities of %s failed", name)
                due = loop.time() + config.retry_max_s
