"""``interchange tlex-sim``: run a streaming-service simulator with fake traffic-light controllers.

    interchange tlex-sim --dir tlex-sim [--controllers 2] [--spatem-hz 10] [--phase staggered|aligned]
                         [--virtual] [--payload-types SPATEM=1,...] [--token T] ...
    interchange tlex-sim --dir tlex-sim --print-node-config [--actor DIR] [--publisher-id NL00001]

``--dir`` keeps the RSA test PKI and the tokens (:mod:`.sim_facts`); fixed default ports (8640,
8641 TLS, 8642 plain); ``sim.json`` is rewritten at each start; runs until interrupted or
``--duration``. What each option does: docs/tlex-bridge.md ("``interchange tlex-sim``").
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certs import create_test_pki
from certs.errors import PkiError
from certs.keys import KeySpec
from certs.tls import streaming_client_context, streaming_server_context, web_client_context, web_server_context
from interchange.bridges.tlex.controllers import PHASINGS, ControllerSpec, FakeController, PayloadFactory, VirtualControllers
from interchange.bridges.tlex.payloads import DEFAULT_TYPES, MESSAGE_IDS, PayloadTypes, stamped
from interchange.bridges.tlex.rest import StreamingServiceClient
from interchange.bridges.tlex.service import Limits, ServiceRegistry
from interchange.bridges.tlex.sim_facts import DEFAULT_DOMAIN, DEFAULT_PORTS, SERVICE_NAME, facts, node_config
from interchange.bridges.tlex.sim_facts import specs as controller_specs
from interchange.bridges.tlex.sim_facts import tlc_id, tokens
from interchange.bridges.tlex.simulator import API_PREFIX, StreamingServiceSimulator
from interchange.ground.errors import CliError

__all__ = ["DEFAULT_DOMAIN", "SERVICE_NAME", "Simulation", "start_simulation", "tlc_id"]


@dataclass
class Simulation:
    """A running simulator, its controllers and the facts a bridge needs (``sim.json``)."""

    service: StreamingServiceSimulator
    controllers: list[FakeController]
    facts: dict[str, Any]
    _clients: list[StreamingServiceClient] = field(default_factory=list)
    virtual: VirtualControllers | None = None  #: the controllers, when the service plays them

    def sent(self) -> dict[str, int]:
        """Payloads the controllers sent, by message type."""
        kinds: dict[str, int] = dict(self.virtual.sent) if self.virtual is not None else {}
        for controller in self.controllers:
            for kind, count in controller.record.sent.items():
                kinds[kind] = kinds.get(kind, 0) + count
        return kinds

    async def close(self) -> None:
        if self.virtual is not None:
            await self.virtual.stop()
        for controller in self.controllers:
            await controller.stop()
        for client in self._clients:
            await client.close()
        await self.service.close()


def _pki(directory: Path) -> Any:
    return create_test_pki(directory / "pki", [SERVICE_NAME], [], key_spec=KeySpec("rsa"), exist_ok=True)


async def start_simulation(directory: Path, *, controllers: int = 2, spatem_hz: float = 10.0,
                           mapem_interval: float = 60.0, domain: str = DEFAULT_DOMAIN, host: str = "127.0.0.1",
                           api_port: int = 0, tls_port: int = 0, plain_port: int = 0,
                           limits: Limits | None = None, stamp: bool = False,
                           phasing: str = "staggered", virtual: bool = False,
                           payload_types: PayloadTypes = DEFAULT_TYPES, token: str | None = None) -> Simulation:
    """Start the service and ``controllers`` fake controllers (played by the service when
    ``virtual``); write ``directory/sim.json``."""
    directory = directory.resolve()
    pki = _pki(directory)
    server = pki.servers[SERVICE_NAME]
    kept = tokens(directory, token)
    registry = ServiceRegistry(limits or Limits(payload_rate=max(1200.0, controllers * spatem_hz * 2),
                                                throughput_kb=max(120.0, controllers * spatem_hz * 0.5)), {})
    registry.add_account("broker", "BROKER_SYSTEM", kept["broker"])
    operator = registry.add_account("tlc-operator", "TLC_SYSTEM", kept["tlc-operator"])
    registry.add_account("monitor", "MONITOR", kept["monitor"])
    specs = controller_specs(controllers)
    for spec in specs:
        registry.register_tlc(operator, spec.tlc_id, domain)
    service = StreamingServiceSimulator(registry, host=host,
                                        stream_tls=streaming_server_context(server.chain, server.key),
                                        api_tls=web_server_context(server.chain, server.key))
    await service.start(api_port, tls_port, plain_port)
    found = facts(api_url=service.api_url, trust_bundle=pki.trust_bundle, domain=domain, tokens_=kept, specs_=specs,
                  payload_types=payload_types, listeners={m: port for m, (_, port) in registry.listeners.items()})
    (directory / "sim.json").write_text(json.dumps(found, indent=2) + "\n", encoding="utf-8")
    if virtual:
        played = VirtualControllers(specs, spatem_hz=spatem_hz, mapem_interval=mapem_interval,
                                    factory=_stamped if stamp else None, phasing=phasing, payload_types=payload_types)
        played.start(service.play(played, domain, [spec.tlc_id for spec in specs]))
        service.watch_brokers(played.map_now)
        return Simulation(service, [], found, virtual=played)
    api = StreamingServiceClient(service.api_url, operator.authorization,
                                 ssl_context=web_client_context(pki.trust_bundle), server_hostname=SERVICE_NAME)
    await api.__aenter__()
    stream_ssl = streaming_client_context(pki.trust_bundle)
    fakes = {spec.tlc_id: FakeController(spec, api, domain=domain, stream_ssl=stream_ssl, spatem_hz=spatem_hz,
                                         mapem_interval=mapem_interval, server_hostname=SERVICE_NAME,
                                         factory=_stamped(spec) if stamp else None, phasing=phasing,
                                         payload_types=payload_types) for spec in specs}

    def map_now(tlcs: frozenset[str]) -> None:
        for tlc in sorted(tlcs & fakes.keys()):
            if fakes[tlc].supervisor.stats.connected:
                fakes[tlc].map_now()
    service.watch_brokers(map_now)
    for fake in fakes.values():
        fake.start()
    return Simulation(service, list(fakes.values()), found, [api])


def _stamped(spec: ControllerSpec) -> PayloadFactory:
    return lambda kind, intersection, sequence: stamped(kind, spec.station_id, intersection, sequence)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tlex-sim", help="run a TLEX/UDAP streaming-service simulator with fake traffic-light controllers",
        description="Streaming service (REST + TCPStreaming, TLS 1.2) and fake controllers emitting MAPEM/SPATEM.")
    parser.add_argument("--dir", type=Path, default=Path("tlex-sim"), help="state directory (PKI, tokens, sim.json)")
    parser.add_argument("--controllers", type=int, default=2, help="fake controllers (default 2)")
    parser.add_argument("--spatem-hz", type=float, default=10.0, help="SPATEM per second per controller")
    parser.add_argument("--mapem-interval", type=float, default=60.0, help="seconds between MAPEM repetitions")
    parser.add_argument("--phase", choices=PHASINGS, default="staggered",
                        help="controllers' SPATEM ticks: each on its own phase (default, as independent controllers "
                             "are), or all aligned (one burst of every controller per period)")
    parser.add_argument("--domain", default=DEFAULT_DOMAIN, help="session domain")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--api-port", type=int, default=DEFAULT_PORTS["api"], help="REST API port (0: any free one)")
    parser.add_argument("--tls-port", type=int, default=DEFAULT_PORTS["tls"], help="TCPStreaming TLS 1.2 port")
    parser.add_argument("--plain-port", type=int, default=DEFAULT_PORTS["plain"], help="TCPStreaming plain TCP port")
    parser.add_argument("--token", help="the Broker account's X-Authorization token (default: made once, kept in "
                                        "DIR/tokens.json)")
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--virtual", action="store_true",
                        help="the service plays the controllers itself (no TLC session, TLS connection or task "
                             "each): for thousands of controllers")
    parser.add_argument("--payload-types", type=payload_types_arg, default=DEFAULT_TYPES, metavar="TYPE=BYTE,...",
                        help="the controllers' payload type bytes, e.g. SPATEM=1,MAPEM=2,SREM=3,SSEM=4 (decimal or 0x..; "
                             "default the ETSI messageIDs SPATEM=4,MAPEM=5,SREM=9,SSEM=10)")
    parser.add_argument("--stamp", action="store_true",
                        help="payloads carry send time, station and sequence (benchmarks: latency and loss)")
    parser.add_argument("--print-node-config", action="store_true",
                        help="print the [tlex] block (TOML) of a node pointed at this simulator, and exit")
    parser.add_argument("--actor", type=Path, help="with --print-node-config: the bridge's identity directory at the node")
    parser.add_argument("--publisher-id", default="NL00001", help="with --print-node-config: the bridge's publisherId")
    parser.set_defaults(handler=run)


def payload_types_arg(text: str) -> PayloadTypes:
    """``SPATEM=1,MAPEM=0x02,...`` over the default type bytes (argparse turns ValueError into a usage error)."""
    given: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        kind, sep, value = item.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{item!r}: write TYPE=BYTE, e.g. SPATEM=1")
        try:
            given[kind.strip().upper()] = int(value.strip(), 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: the byte is a number (1 or 0x01)") from None
    try:
        return PayloadTypes({**MESSAGE_IDS, **given})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.controllers <= 10_000:
        raise CliError("--controllers must be between 0 and 10000")
    if args.spatem_hz < 0:
        raise CliError("--spatem-hz must not be negative")
    try:
        if args.print_node_config:
            sys.stdout.write(_node_config(args))
            return 0
        asyncio.run(_serve(args))
    except (OSError, PkiError) as exc:
        raise CliError(str(exc)) from None
    return 0


def _node_config(args: argparse.Namespace) -> str:
    """The [tlex] block for the simulator these arguments start (its ports must be fixed)."""
    if args.api_port == 0:
        raise CliError("--print-node-config needs a fixed --api-port (0 is any free port: a node could not find it)")
    directory = args.dir.resolve()
    kept = tokens(directory, args.token)
    found = facts(api_url=f"https://{args.host}:{args.api_port}{API_PREFIX}", trust_bundle=_pki(directory).trust_bundle,
                  domain=args.domain, tokens_=kept, specs_=controller_specs(args.controllers),
                  payload_types=args.payload_types, listeners={"TLSv1.2": args.tls_port, "NONE": args.plain_port})
    return node_config(found, actor=args.actor, publisher_id=args.publisher_id)


async def _serve(args: argparse.Namespace) -> None:
    simulation = await start_simulation(args.dir, controllers=args.controllers, spatem_hz=args.spatem_hz,
                                        mapem_interval=args.mapem_interval, domain=args.domain, host=args.host,
                                        api_port=args.api_port, tls_port=args.tls_port, plain_port=args.plain_port,
                                        stamp=args.stamp, phasing=args.phase, virtual=args.virtual,
                                        payload_types=args.payload_types, token=args.token)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    listeners = simulation.service.registry.listeners
    played = " (played by the service)" if args.virtual else ""
    print(f"tlex-sim: REST {simulation.service.api_url}, TCPStreaming TLS port {listeners['TLSv1.2'][1]}, "
          f"plain port {listeners['NONE'][1]}, {len(simulation.facts['controllers'])} controllers{played}; "
          f"bridge facts in {args.dir.resolve() / 'sim.json'}; a node's [tlex]: the same arguments with "
          f"--print-node-config", flush=True)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(args.duration):
                await stop.wait()
    finally:
        kinds = simulation.sent()
        detail = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
        print(f"tlex-sim: stopping; controllers sent {sum(kinds.values())} payloads ({detail}), "
              f"the service routed {simulation.service.stats.routed}", flush=True)
        await simulation.close()
