"""TLEX load generator for thousands of traffic lights: a streaming service that plays N controllers
and writes their payloads to the Broker session from pre-encoded frames.

    .venv/bin/python benchmarks/tlex_loadgen.py --dir DIR --controllers 1000 --hz 10 [--phase aligned]

The service side is the project's simulator (:class:`~interchange.bridges.tlex.simulator.
StreamingServiceSimulator`: REST, session tokens, TLS 1.2 listener, keep-alives); only the
payloads are made here, for speed. Each controller has a frame template per kind (TCPStreaming
frame, datagram 0x05 with its TLC identifier, the payload a :func:`~interchange.bridges.tlex.
payloads.stamped` stand-in); a payload costs a copy of its template and three patched fields
(origin timestamp, send time, sequence number). Every ``--tick-ms`` the generator writes all
payloads that fell due since the last tick in one write (a real service under load coalesces the
same way); each controller sends its MAPEM first (IP_104) and again every ``--mapem-interval``,
and SPATEM at ``--hz`` on its own phase of the period (``staggered``: uniform per TLC identifier,
as :func:`~interchange.bridges.tlex.controllers.controller_phase`; ``aligned``: all on one tick).

The stamp is the payload's *scheduled* time on that grid, not the time it was written, so a late
generator shows up as latency (coordinated omission avoided), and the generator reports its own
lag (write time - scheduled time) and CPU per payload, so a run says whether it was the bottleneck.

Writes ``DIR/sim.json`` (what a bridge needs, as ``interchange tlex-sim`` does), prints one line
when ready, and on SIGTERM/SIGINT (or after ``--duration``) a JSON line with its figures.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import resource
import secrets
import signal
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certs import create_test_pki
from certs.keys import KeySpec
from certs.tls import streaming_server_context, web_server_context
from interchange.bridges.tlex.codec import Payload, encode
from interchange.bridges.tlex.controllers import controller_phase
from interchange.bridges.tlex.payloads import MESSAGE_IDS, stamped
from interchange.bridges.tlex.service import Limits, ServiceRegistry
from interchange.bridges.tlex.session import Send
from interchange.bridges.tlex.simulator import StreamingServiceSimulator

SERVICE_NAME = "tlex-sim.test"
DOMAIN = "c-roads"
#: byte offsets in a 0x05 payload frame: 4 header, type, 8 TLC id, payload type, 8 origin ms
_ORIGIN_AT = 4 + 1 + 8 + 1
_PAYLOAD_AT = _ORIGIN_AT + 8
_STAMP_AT = _PAYLOAD_AT + 6  #: stamped(): send ns, station, sequence
_U64 = struct.Struct(">Q")
_STAMP = struct.Struct(">QII")


def tlc_id(index: int) -> str:
    return f"NLSM{index + 1:04d}"


@dataclass
class Controller:
    tlc: str
    station: int
    phase: float
    spatem: bytes
    mapem: bytes
    sequence: int = 0
    next_map: float = 0.0


@dataclass
class Figures:
    sent: dict[str, int] = field(default_factory=lambda: {"SPATEM": 0, "MAPEM": 0})
    writes: int = 0
    lags_us: list[int] = field(default_factory=list)  #: one per write: the oldest payload's lag
    cpu0: float = 0.0
    wall0: float = 0.0

    def summary(self) -> dict[str, Any]:
        lags = sorted(self.lags_us)
        cpu = _cpu() - self.cpu0
        payloads = sum(self.sent.values())
        wall = time.monotonic() - self.wall0 if self.wall0 else 0.0

        def pct(q: float) -> float:
            return lags[min(len(lags) - 1, int(q * len(lags)))] / 1e3 if lags else 0.0

        return {"sent": self.sent, "payloads": payloads, "writes": self.writes, "seconds": round(wall, 3),
                "rate": round(payloads / wall, 1) if wall else 0.0, "cpu_s": round(cpu, 3),
                "cpu_us_per_payload": round(cpu / payloads * 1e6, 2) if payloads else 0.0,
                "lag_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": lags[-1] / 1e3 if lags else 0.0}}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _template(tlc: str, station: int, kind: str, intersection: str) -> bytes:
    payload = stamped(kind, station, intersection, 0)
    return encode(Payload(MESSAGE_IDS[kind], 0, payload, tlc))


class Generator:
    """Writes the controllers' payloads to one Broker session (see the module docstring)."""

    def __init__(self, controllers: list[Controller], hz: float, mapem_interval: float, tick_s: float) -> None:
        self.controllers = sorted(controllers, key=lambda c: c.phase)
        self.period = 1.0 / hz
        self.mapem_interval, self.tick_s = mapem_interval, tick_s
        self.figures = Figures()

    def _payload(self, out: bytearray, controller: Controller, kind: str, due_mono: float, wall_offset: float) -> None:
        controller.sequence += 1
        start = len(out)
        out += controller.spatem if kind == "SPATEM" else controller.mapem
        ns = int((due_mono + wall_offset) * 1e9)
        _U64.pack_into(out, start + _ORIGIN_AT, ns // 1_000_000)
        _STAMP.pack_into(out, start + _STAMP_AT, ns, controller.station, controller.sequence)
        self.figures.sent[kind] += 1

    async def run(self, write: Any) -> None:
        """``write(bytes)`` until cancelled or the session ends: MAPEMs first, then the SPATEM grid."""
        with contextlib.suppress(SessionGone):
            await self._run(write)

    async def _run(self, write: Any) -> None:
        loop = asyncio.get_running_loop()
        wall_offset = time.time() - loop.time()
        figures = self.figures
        if not figures.wall0:  # the figures cover every session from the first one on
            figures.cpu0, figures.wall0 = _cpu(), time.monotonic()
        out = bytearray()
        now = loop.time()
        for controller in self.controllers:  # IP_104: every controller's MAPEM before its SPATEMs
            self._payload(out, controller, "MAPEM", now, wall_offset)
            controller.next_map = now + self.mapem_interval
        write(bytes(out))
        figures.writes += 1
        phases = [c.phase for c in self.controllers]
        cycle = math.floor(now / self.period) + 1
        index = 0
        while True:
            await asyncio.sleep(self.tick_s)
            now = loop.time()
            out = bytearray()
            oldest = None
            while True:
                if index == len(phases):
                    index, cycle = 0, cycle + 1
                due = cycle * self.period + phases[index]
                if due > now:
                    break
                controller = self.controllers[index]
                if due >= controller.next_map:
                    self._payload(out, controller, "MAPEM", due, wall_offset)
                    controller.next_map = due + self.mapem_interval
                self._payload(out, controller, "SPATEM", due, wall_offset)
                oldest = due if oldest is None else oldest
                index += 1
            if out:
                write(bytes(out))
                figures.writes += 1
                assert oldest is not None
                figures.lags_us.append(int((loop.time() - oldest) * 1e6))


async def serve(args: argparse.Namespace) -> None:
    directory: Path = args.dir
    directory.mkdir(parents=True, exist_ok=True)
    pki = create_test_pki(directory / "pki", [SERVICE_NAME], [], key_spec=KeySpec("rsa"), exist_ok=True)
    server = pki.servers[SERVICE_NAME]
    rate = args.controllers * args.hz
    registry = ServiceRegistry(Limits(payload_rate=max(1200.0, rate * 2), throughput_kb=max(120.0, rate * 0.5)), {})
    broker = registry.add_account("broker", "BROKER_SYSTEM", secrets.token_urlsafe(24))
    operator = registry.add_account("tlc-operator", "TLC_SYSTEM", secrets.token_urlsafe(24))
    tlcs = [tlc_id(i) for i in range(args.controllers)]
    for tlc in tlcs:
        registry.register_tlc(operator, tlc, DOMAIN)
    registry.play(DOMAIN, tlcs)
    service = StreamingServiceSimulator(registry, stream_tls=streaming_server_context(server.chain, server.key),
                                        api_tls=web_server_context(server.chain, server.key))
    await service.start()
    intersections = {tlc: f"5-{100 + i}" for i, tlc in enumerate(tlcs)}
    facts = {"api_url": service.api_url, "server_name": SERVICE_NAME, "trust_bundle": str(pki.trust_bundle.resolve()),
             "domain": DOMAIN, "broker_authorization": broker.authorization,
             "controllers": [{"tlc_id": tlc, "intersections": [intersections[tlc]]} for tlc in tlcs]}
    (directory / "sim.json").write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    period = 1.0 / args.hz
    controllers = [Controller(tlc, 1_000_000 + i, controller_phase(tlc, period, args.phase),
                              _template(tlc, 1_000_000 + i, "SPATEM", intersections[tlc]),
                              _template(tlc, 1_000_000 + i, "MAPEM", intersections[tlc]))
                   for i, tlc in enumerate(tlcs)]
    generator = Generator(controllers, args.hz, args.mapem_interval, args.tick_ms / 1e3)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"tlex-loadgen: REST {service.api_url}, {args.controllers} controllers x {args.hz:g} Hz "
          f"({args.phase}), facts in {directory / 'sim.json'}", flush=True)
    task: asyncio.Task | None = None
    try:
        async with asyncio.timeout(args.duration):
            while not stop.is_set():  # one Broker session at a time; a new one restarts the payloads
                connection = await _broker_session(service, registry, stop)
                if connection is None:
                    break
                task = asyncio.create_task(generator.run(_writer(connection)))
                while not stop.is_set() and not task.done() and connection.stream.closed is None:
                    await asyncio.sleep(0.05)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    except TimeoutError:
        pass
    finally:
        if task is not None:
            task.cancel()
        print(json.dumps(generator.figures.summary()), flush=True)
        await service.close()


def _writer(connection: Any) -> Any:
    """Bytes to the session's connection; raises :class:`SessionGone` once it is closing."""
    pump = connection.pump

    def write(data: bytes) -> None:
        if pump.closed is not None or connection.stream.closed is not None:
            raise SessionGone
        try:
            pump.execute([Send(data)])
        except (AttributeError, RuntimeError, ConnectionError) as exc:  # the transport went under us
            raise SessionGone from exc
    return write


class SessionGone(Exception):
    """The Broker session the generator wrote to has ended."""


async def _broker_session(service: StreamingServiceSimulator, registry: ServiceRegistry, stop: asyncio.Event) -> Any:
    """The connection of the first Broker session streaming (None if stopped before one is)."""
    while not stop.is_set():
        for token, connection in list(service.connections.items()):
            record = registry.sessions.get(token)
            if record is not None and record.account.role == "BROKER_SYSTEM" and connection.pump is not None:
                return connection
        await asyncio.sleep(0.02)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="state directory (PKI, sim.json)")
    parser.add_argument("--controllers", type=int, default=1000)
    parser.add_argument("--hz", type=float, default=10.0, help="SPATEM per second per controller")
    parser.add_argument("--phase", choices=("staggered", "aligned"), default="staggered")
    parser.add_argument("--mapem-interval", type=float, default=2.0, help="seconds between a controller's MAPEMs")
    parser.add_argument("--tick-ms", type=float, default=1.0, help="the generator's write interval")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    args = parser.parse_args()
    if args.controllers < 1 or args.controllers > 9999 or args.hz <= 0:
        parser.error("--controllers must be 1..9999 and --hz positive")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
