"""Fake traffic-light controllers (TLC systems, UDAP): they stream MAPEM and SPATEM into a streaming
service and record what they receive, answering each SREM with an SSEM.

Each controller opens its own TLC session (singleplex: one identifier, datagram 0x04; UDAP 2.2.1.1)
through the same :class:`~.stream.SessionSupervisor` the bridge uses. IP_104 on the sending side:
a controller sends the MAPEM of each of its intersections before its first SPATEM, and again
every ``mapem_interval`` seconds (IP_048 asks for a repetition within 9 minutes).

Phase: real controllers are independent machines. Each runs its own control cycle on its own clock
(the specs only bound the clock difference to the service, ``clockDiffLimit``, in seconds, and call
TCPStreaming "a continuous asynchronous bi-directional stream"), so nothing lines up their 100 ms
SPATEM ticks. The default, ``staggered``, gives each controller its own phase in the SPATEM period
(uniform, reproducible from its TLC identifier: :func:`controller_phase`); ``aligned`` makes every
controller fire at the same tick, a worst case of one burst of all controllers per period.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import random
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.payloads import MESSAGE_IDS, kind_of, stand_in
from interchange.bridges.tlex.rest import StreamingServiceClient, session_request
from interchange.bridges.tlex.stream import Backoff, SessionSupervisor, read_now

PayloadFactory = Callable[[str, str, int], bytes]  #: (kind, intersection, sequence) -> payload bytes
PHASINGS = ("staggered", "aligned")


def controller_phase(tlc_id: str, period: float, phasing: str = "staggered") -> float:
    """Offset (s) of a controller's SPATEM ticks in the period: 0 for all when ``aligned``; when
    ``staggered``, uniform in [0, period), independent per controller and the same in every run
    (``random.Random`` seeded with the TLC identifier; not security)."""
    if phasing == "aligned":
        return 0.0
    if phasing != "staggered":
        raise ValueError(f"phasing must be one of {', '.join(PHASINGS)}, not {phasing!r}")
    return random.Random(tlc_id).random() * period  # noqa: S311


def first_tick(now: float, period: float, phase: float) -> float:
    """The first time >= ``now`` on the grid ``phase + k * period``."""
    return phase + math.ceil((now - phase) / period) * period


@dataclass
class ControllerSpec:
    tlc_id: str  #: 8 ASCII characters
    intersections: list[str]  #: intersection reference ids as "region-id"
    station_id: int = 0


@dataclass
class ControllerRecord:
    received: list[Payload] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)


class FakeController:
    def __init__(self, spec: ControllerSpec, api: StreamingServiceClient, *, domain: str,
                 stream_ssl: ssl.SSLContext | None, security: str = "TLSv1.2", spatem_hz: float = 10.0,
                 mapem_interval: float = 60.0, factory: PayloadFactory | None = None,
                 server_hostname: str | None = None, backoff: Backoff | None = None,
                 phasing: str = "staggered") -> None:
        self.spec, self.spatem_hz, self.mapem_interval = spec, spatem_hz, mapem_interval
        self.phase = controller_phase(spec.tlc_id, 1.0 / spatem_hz if spatem_hz > 0 else 1.0, phasing)
        self.record = ControllerRecord()
        self._factory = factory or (lambda kind, ix, seq: stand_in(kind, spec.station_id, ix, seq))
        self.supervisor = SessionSupervisor(
            api, session_request(domain, "singleplex", [spec.tlc_id], security), stream_ssl=stream_ssl,
            on_payload=self._received, server_hostname=server_hostname, backoff=backoff or Backoff(0.1, 2.0))
        self._sequence = 0
        self._tasks: list[asyncio.Task] = []

    def _send(self, kind: str, intersection: str) -> None:
        self._sequence += 1
        data = self._factory(kind, intersection, self._sequence)
        self.supervisor.send(Payload(MESSAGE_IDS[kind], read_now().utc_ms, data))
        self.record.sent[kind] = self.record.sent.get(kind, 0) + 1

    def _received(self, payload: Payload) -> None:
        self.record.received.append(payload)
        if kind_of(payload.payload_type) == "SREM":
            for intersection in self.spec.intersections:
                self._send("SSEM", intersection)

    async def _emit(self) -> None:
        await self.supervisor.connected.wait()
        period = 1.0 / self.spatem_hz if self.spatem_hz > 0 else None
        next_map = 0.0
        loop = asyncio.get_running_loop()
        start = first_tick(loop.time(), period, self.phase) if period is not None else loop.time()
        await asyncio.sleep(start - loop.time())  # the loop's clock is the grid all controllers share
        ticks = 0
        while True:
            if loop.time() >= next_map:
                for intersection in self.spec.intersections:
                    self._send("MAPEM", intersection)
                next_map = loop.time() + self.mapem_interval
            if period is None:
                await asyncio.sleep(self.mapem_interval)
                continue
            for intersection in self.spec.intersections:
                self._send("SPATEM", intersection)
            ticks += 1
            await asyncio.sleep(max(0.0, start + ticks * period - loop.time()))  # no drift

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self.supervisor.run(), name=f"tlc-{self.spec.tlc_id}"),
                       asyncio.create_task(self._emit(), name=f"tlc-{self.spec.tlc_id}-emit")]

    async def stop(self) -> None:
        self.supervisor.close_stream("controller stopping")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
