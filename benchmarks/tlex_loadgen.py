"""TLEX load generator for thousands of traffic lights: a streaming service that plays N controllers
and writes their payloads to the Broker session from pre-encoded frames.

    .venv/bin/python benchmarks/tlex_loadgen.py --dir DIR --controllers 1000 --hz 10 [--phase aligned]
    .venv/bin/python benchmarks/tlex_loadgen.py --dir DIR --controllers 1000 --multiplex 100

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

Where the payloads enter the service: by default the service plays the controllers itself and the
frames go straight to the Broker session; with ``--multiplex N`` the controllers are grouped N per
TLC multiplex session (TLEX 6.3.3.2, session type "TLC", TCPStreaming_Multiplex, datagram 0x05),
opened over REST and TLS like a real controller's, and the service routes what they send to the
Broker sessions: the path a deployment with multiplexing controllers takes. The service then writes
what one loop turn routed to a session in one write (one TLS record), as a service under load
coalesces; one record per payload would make the generator, not the node, the bottleneck.

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
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certs import create_test_pki
from certs.keys import KeySpec
from certs.tls import streaming_client_context, streaming_server_context, web_client_context, web_server_context
from interchange.bridges.tlex.codec import Payload, encode
from interchange.bridges.tlex.controllers import controller_phase
from interchange.bridges.tlex.payloads import MESSAGE_IDS, stamped
from interchange.bridges.tlex.rest import StreamingServiceClient, session_request
from interchange.bridges.tlex.service import Limits, Route, ServiceRegistry
from interchange.bridges.tlex.session import Send, SessionClosed
from interchange.bridges.tlex.simulator import StreamingServiceSimulator
from interchange.bridges.tlex.stream import SessionSupervisor, read_now

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
    group: int = 0  #: the session the controller's frames are written to
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
        """``write(group, bytes)`` until cancelled or a session ends: MAPEMs first, then the SPATEM grid."""
        with contextlib.suppress(SessionGone):
            await self._run(write)

    async def _run(self, write: Any) -> None:
        loop = asyncio.get_running_loop()
        wall_offset = time.time() - loop.time()
        figures = self.figures
        if not figures.wall0:  # the figures cover every session from the first one on
            figures.cpu0, figures.wall0 = _cpu(), time.monotonic()
        outs: dict[int, bytearray] = {}
        now = loop.time()
        for controller in self.controllers:  # IP_104: every controller's MAPEM before its SPATEMs
            self._payload(outs.setdefault(controller.group, bytearray()), controller, "MAPEM", now, wall_offset)
            controller.next_map = now + self.mapem_interval
        self._write_all(write, outs)
        phases = [c.phase for c in self.controllers]
        cycle = math.floor(now / self.period) + 1
        index = 0
        while True:
            await asyncio.sleep(self.tick_s)
            now = loop.time()
            outs = {}
            oldest = None
            while True:
                if index == len(phases):
                    index, cycle = 0, cycle + 1
                due = cycle * self.period + phases[index]
                if due > now:
                    break
                controller = self.controllers[index]
                out = outs.get(controller.group)
                if out is None:
                    out = outs[controller.group] = bytearray()
                if due >= controller.next_map:
                    self._payload(out, controller, "MAPEM", due, wall_offset)
                    controller.next_map = due + self.mapem_interval
                self._payload(out, controller, "SPATEM", due, wall_offset)
                oldest = due if oldest is None else oldest
                index += 1
            if outs:
                self._write_all(write, outs)
                assert oldest is not None
                figures.lags_us.append(int((loop.time() - oldest) * 1e6))

    def _write_all(self, write: Any, outs: dict[int, bytearray]) -> None:
        for group, out in outs.items():
            write(group, bytes(out))
            self.figures.writes += 1


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
    if not args.multiplex:
        registry.play(DOMAIN, tlcs)
    service = CoalescingService(registry, stream_tls=streaming_server_context(server.chain, server.key),
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
                              _template(tlc, 1_000_000 + i, "MAPEM", intersections[tlc]),
                              group=i // args.multiplex if args.multiplex else 0)
                   for i, tlc in enumerate(tlcs)]
    generator = Generator(controllers, args.hz, args.mapem_interval, args.tick_ms / 1e3)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sessions = TlcSessions(service, operator.authorization, pki.trust_bundle, tlcs, args.multiplex)
    await sessions.start()
    via = f"{len(sessions.supervisors)} TLC multiplex sessions" if args.multiplex else "played by the service"
    print(f"tlex-loadgen: REST {service.api_url}, {args.controllers} controllers x {args.hz:g} Hz "
          f"({args.phase}, {via}), facts in {directory / 'sim.json'}", flush=True)
    task: asyncio.Task | None = None
    try:
        async with asyncio.timeout(args.duration):
            while not stop.is_set():  # one Broker session at a time; a new one restarts the payloads
                connection = await _broker_session(service, registry, stop)
                if connection is None:
                    break
                write = sessions.writer() if args.multiplex else _writer(connection)
                task = asyncio.create_task(generator.run(write))
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
        await sessions.close()
        await service.close()


def _writer(connection: Any) -> Any:
    """Bytes to the Broker session's connection; raises :class:`SessionGone` once it is closing."""
    pump = connection.pump

    def write(_group: int, data: bytes) -> None:
        if pump.closed is not None or connection.stream.closed is not None:
            raise SessionGone
        try:
            pump.execute([Send(data)])
        except (AttributeError, RuntimeError, ConnectionError) as exc:  # the transport went under us
            raise SessionGone from exc
    return write


class CoalescingService(StreamingServiceSimulator):
    """The simulator, relaying each loop turn's payloads to a session in one write (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: dict[str, list[bytes]] = {}

    def _deliver(self, routes: list[Route]) -> None:
        now = read_now()
        for route in routes:
            token = route.token
            target = self.connections.get(token) if token is not None else None
            if token is None or target is None or target.pump is None:
                super()._deliver([route])
                continue
            try:
                actions = target.stream.send_payload(route.payload, now)
            except SessionClosed:
                continue
            frames = self._pending.get(token)
            if frames is None:
                if not self._pending:
                    asyncio.get_running_loop().call_soon(self._flush)
                frames = self._pending[token] = []
            frames += [action.data for action in actions if isinstance(action, Send)]
            self.stats.routed += 1

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        for token, frames in pending.items():
            target = self.connections.get(token)
            if target is not None and target.pump is not None and target.pump.closed is None:
                target.pump.execute([Send(b"".join(frames))])


class TlcSessions:
    """The controllers' TLC multiplex sessions (``--multiplex N``: N identifiers each), kept up by the
    project's session client; the generator writes its pre-encoded 0x05 frames to their streams."""

    def __init__(self, service: StreamingServiceSimulator, authorization: str, trust: Path, tlcs: list[str],
                 per_session: int) -> None:
        self._api = StreamingServiceClient(service.api_url, authorization, ssl_context=web_client_context(trust),
                                           server_hostname=SERVICE_NAME)
        groups = [tlcs[i:i + per_session] for i in range(0, len(tlcs), per_session)] if per_session else []
        self.supervisors = [SessionSupervisor(self._api, session_request(DOMAIN, "multiplex", group),
                                              stream_ssl=streaming_client_context(trust), on_payload=lambda _p: None,
                                              server_hostname=SERVICE_NAME, on_event=_refusals)
                            for group in groups]
        self._tasks: list[asyncio.Task] = []
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> None:
        if not self.supervisors:
            return
        await self._stack.enter_async_context(self._api)
        self._tasks = [asyncio.create_task(supervisor.run()) for supervisor in self.supervisors]
        async with asyncio.timeout(30):
            for supervisor in self.supervisors:
                await supervisor.connected.wait()

    def writer(self) -> Any:
        """``write(group, frames)`` to that group's stream; :class:`SessionGone` when it is down."""
        def write(group: int, data: bytes) -> None:
            pump = self.supervisors[group]._pump
            if pump is None or pump.closed is not None:
                raise SessionGone
            pump.execute([Send(data)])
        return write

    async def close(self) -> None:
        for supervisor in self.supervisors:
            supervisor.close_stream("load generator stopping")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._stack.aclose()


def _refusals(name: str, fields: dict) -> None:
    """A TLC session that cannot be set up is said on stderr (the run would wait for it)."""
    if name in ("session_refused", "stream_connect_failed"):
        print(f"tlex-loadgen: TLC session {name}: {fields.get('error')}", file=sys.stderr, flush=True)


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
    parser.add_argument("--multiplex", type=int, default=0, metavar="N",
                        help="controllers in TLC multiplex sessions of N identifiers (0: played by the service)")
    args = parser.parse_args()
    if args.controllers < 1 or args.controllers > 9999 or args.hz <= 0 or args.multiplex < 0:
        parser.error("--controllers must be 1..9999, --hz positive and --multiplex not negative")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
