"""Capability pushes (IP_075/091): our capabilities POSTed to every neighbour.

One :class:`Pusher` task per neighbour POSTs our capabilities message for it (``message(name)``) when woken
(a local capability added or removed, the neighbour new or moved) and at least every
``capability_repost_s`` (<= 24 h, IP_091); failures
are retried with backoff. The neighbour's answer (its capabilities) goes to ``answered(name,
message)``: the service records it as if the neighbour had POSTed it.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from ii_api.decisions.subscriptions import same_cn
from ii_api.peers.client import IIClient, IIClientError
from ii_api.resources.doors import CapabilitiesAnswered, CapabilitiesFor, EventSink, NeighbourDirectory
from ii_api.settings.config import IIConfig
from interchange.ground.timing import backoff_s

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

    def __init__(self, *, config: IIConfig, client: IIClient, neighbours: NeighbourDirectory,
                 message: CapabilitiesFor, answered: CapabilitiesAnswered, event: EventSink) -> None:
        self._config = config
        self._client = client
        self._neighbours = neighbours
        self._message = message
        self._answered = answered
        self._event = event
        self._pushers: dict[str, Pusher] = {}
        self.closed = False

    def start(self, name: str) -> None:
        if self.closed or name in self._pushers:
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
        config, loop = self._config, asyncio.get_running_loop()
        failures = 0
        due = loop.time() + config.capability_repost_s
        while True:
            timeout = max(0.0, due - loop.time())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await pusher.wake.wait()
            pusher.wake.clear()
            peer = self._neighbours.neighbour(name)
            if peer is None:
                return
            message = self._message(name)
            try:
                theirs = await self._client.post_capabilities(peer, message)
            except IIClientError as exc:
                failures += 1
                pusher.last_error = str(exc)
                delay = backoff_s(failures, config.retry_min_s, min(config.retry_max_s, config.capability_repost_s))
                due = loop.time() + delay
                self._event("warning", "ii_capabilities_push_failed", {"neighbour": name, "error": str(exc),
                                                                       "retry_in_s": delay})
                continue
            failures, pusher.last_error = 0, None
            pusher.pushes += 1
            due = loop.time() + config.capability_repost_s
            self._event("info", "ii_capabilities_pushed", {"neighbour": name, "count": len(message.capabilities)})
            if not same_cn(theirs.name, name):
                self._event("warning", "ii_capabilities_answer_ignored",
                            {"neighbour": name, "reason": f"answer names {theirs.name!r}"})
                continue
            try:
                await self._answered(name, theirs)
            except Exception:  # a bug or a store failure must not end the pushes to this neighbour
                log.exception("ii: recording the capabilities of %s failed", name)
                due = loop.time() + config.retry_max_s
