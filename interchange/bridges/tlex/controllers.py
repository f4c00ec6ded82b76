"""Fake traffic-light controllers (TLC systems, UDAP): they stream MAPEM and SPATEM into a streaming
service and record what they receive, answering each SREM with an SSEM.

:class:`FakeController` has its own TLC session (singleplex, datagram 0x04);
:class:`VirtualControllers` are played by the service itself (thousands, no session each).
IP_104: MAPEM before the first SPATEM, again every ``mapem_interval`` (IP_048) and at once on every
new session (:meth:`map_now`). Type bytes from ``payload_types`` (default the ETSI messageIDs).
Phase ``staggered`` (default, :func:`controller_phase`) or ``aligned`` (one burst per period).
Why: docs/tlex-bridge.md ("Fake controllers").
"""
from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import random
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.payloads import DEFAULT_TYPES, PayloadTypes, stand_in
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
                 phasing: str = "staggered", payload_types: PayloadTypes = DEFAULT_TYPES) -> None:
        self.spec, self.spatem_hz, self.mapem_interval = spec, spatem_hz, mapem_interval
        self.types = payload_types
        self.phase = controller_phase(spec.tlc_id, 1.0 / spatem_hz if spatem_hz > 0 else 1.0, phasing)
        self.record = ControllerRecord()
        self._factory = factory or (lambda kind, ix, seq: stand_in(kind, spec.station_id, ix, seq))
        self.supervisor = SessionSupervisor(
            api, session_request(domain, "singleplex", [spec.tlc_id], security), stream_ssl=stream_ssl,
            on_payload=self._received, server_hostname=server_hostname, backoff=backoff or Backoff(0.1, 2.0))
        self._sequence = 0
        self._next_map = 0.0
        self._tasks: list[asyncio.Task] = []

    def _send(self, kind: str, intersection: str) -> None:
        self._sequence += 1
        data = self._factory(kind, intersection, self._sequence)
        self.supervisor.send(Payload(self.types.by_kind[kind], read_now().utc_ms, data))
        self.record.sent[kind] = self.record.sent.get(kind, 0) + 1

    def _received(self, payload: Payload) -> None:
        self.record.received.append(payload)
        if self.types.by_byte.get(payload.payload_type) == "SREM":
            for intersection in self.spec.intersections:
                self._send("SSEM", intersection)

    def map_now(self) -> None:
        """Send the MAPEMs now (a new session takes this controller's payloads), and the next
        ones ``mapem_interval`` later."""
        for intersection in self.spec.intersections:
            self._send("MAPEM", intersection)
        self._next_map = asyncio.get_running_loop().time() + self.mapem_interval

    async def _emit(self) -> None:
        await self.supervisor.connected.wait()
        period = 1.0 / self.spatem_hz if self.spatem_hz > 0 else None
        loop = asyncio.get_running_loop()
        start = first_tick(loop.time(), period, self.phase) if period is not None else loop.time()
        await asyncio.sleep(start - loop.time())  # the loop's clock is the grid all controllers share
        ticks, sessions = 0, 0
        while True:
            if loop.time() >= self._next_map or self.supervisor.stats.sessions != sessions:
                sessions = self.supervisor.stats.sessions  # a new session of its own: MAPEM first again
                self.map_now()
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


class VirtualControllers:
    """Controllers the streaming service plays itself (``interchange tlex-sim --virtual``): each sends
    MAPEM then SPATEM on its own phase, MAPEM again every ``mapem_interval``, and answers an SREM
    with an SSEM per intersection, as :class:`FakeController` does. One task ticks them all: it sends
    every payload due and sleeps until the next is (a loaded service sends late ones together, and
    gives the loop a turn between batches)."""

    def __init__(self, specs: list[ControllerSpec], *, spatem_hz: float = 10.0, mapem_interval: float = 60.0,
                 factory: Callable[[ControllerSpec], PayloadFactory] | None = None,
                 phasing: str = "staggered", payload_types: PayloadTypes = DEFAULT_TYPES) -> None:
        self.specs = {spec.tlc_id: spec for spec in specs}
        self.types = payload_types
        self.spatem_hz, self.mapem_interval = spatem_hz, mapem_interval
        period = 1.0 / spatem_hz if spatem_hz > 0 else 1.0
        self._order = sorted(((controller_phase(s.tlc_id, period, phasing), s) for s in specs), key=lambda p: p[0])
        self._factories = {s.tlc_id: (factory(s) if factory is not None else _stand_in(s)) for s in specs}
        self._sequence = dict.fromkeys(self.specs, 0)
        self._next_map = dict.fromkeys(self.specs, 0.0)
        self.sent: dict[str, int] = {}  #: payloads sent, by message type
        self.from_broker: dict[str, list[Payload]] = {}  #: Broker payloads (SREMs), by TLC identifier
        self._send: Callable[[Payload], None] | None = None
        self._task: asyncio.Task | None = None

    def start(self, send: Callable[[Payload], None]) -> None:
        """Start sending with ``send`` (:meth:`~.simulator.StreamingServiceSimulator.play`)."""
        self._send = send
        self._task = asyncio.create_task(self._run(), name="tlex-virtual-controllers")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def map_now(self, tlcs: frozenset[str]) -> None:
        """These controllers send their MAPEMs now (a new session takes their payloads), the next
        ones ``mapem_interval`` later."""
        now = asyncio.get_running_loop().time()
        for tlc in sorted(tlcs & self.specs.keys()):
            for intersection in self.specs[tlc].intersections:
                self._emit(tlc, "MAPEM", intersection)
            self._next_map[tlc] = now + self.mapem_interval

    def received(self, payload: Payload) -> None:
        tlc = payload.tlc
        if tlc is None or tlc not in self.specs:
            return
        self.from_broker.setdefault(tlc, []).append(payload)
        if self.types.by_byte.get(payload.payload_type) == "SREM":
            for intersection in self.specs[tlc].intersections:
                self._emit(tlc, "SSEM", intersection)

    def _emit(self, tlc: str, kind: str, intersection: str) -> None:
        assert self._send is not None
        self._sequence[tlc] += 1
        data = self._factories[tlc](kind, intersection, self._sequence[tlc])
        self._send(Payload(self.types.by_kind[kind], read_now().utc_ms, data, tlc))
        self.sent[kind] = self.sent.get(kind, 0) + 1

    def _tick(self, spec: ControllerSpec, now: float, spatem: bool) -> None:
        if now >= self._next_map[spec.tlc_id]:
            for intersection in spec.intersections:
                self._emit(spec.tlc_id, "MAPEM", intersection)
            self._next_map[spec.tlc_id] = now + self.mapem_interval
        if spatem:
            for intersection in spec.intersections:
                self._emit(spec.tlc_id, "SPATEM", intersection)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        if self.spatem_hz <= 0 or not self._order:
            while True:
                for _, spec in self._order:
                    self._tick(spec, loop.time(), spatem=False)
                await asyncio.sleep(self.mapem_interval)
        period, phases = 1.0 / self.spatem_hz, [phase for phase, _ in self._order]
        cycle = math.floor(loop.time() / period)
        index = bisect.bisect_right(phases, loop.time() - cycle * period)  # not those already past: no burst
        while True:
            if index == len(phases):
                index, cycle = 0, cycle + 1
            due = cycle * period + phases[index]
            # a late batch yields too (sleep(0)): a host that cannot keep up still serves its
            # sessions and stops, between batches of at most one period's payloads
            await asyncio.sleep(max(0.0, due - loop.time()))
            now = loop.time()
            while index < len(phases) and cycle * period + phases[index] <= now:
                self._tick(self._order[index][1], now, spatem=True)
                index += 1


def _stand_in(spec: ControllerSpec) -> PayloadFactory:
    return lambda kind, intersection, sequence: stand_in(kind, spec.station_id, intersection, sequence)
