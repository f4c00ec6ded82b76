"""``interchange tlex-demo``: a simulated traffic light's SPATEM reaches a C-ITS actor at a neighbour.

The federation of ``interchange demo`` (A and B on loopback, DNS SRV discovery, mutual TLS 1.3),
plus a streaming-service simulator with one fake controller (``NLSM0001``, intersection 5-100, at
Hazeldonk) and the TLEX bridge configured in A's node config (``[tlex]``): the bridge registers the
controller's SPATEM/MAPEM/SSEM capabilities at A, ``actor-2`` subscribes at B to
``messageType = 'SPATEM'``, B subscribes at A, and the controller's SPATEMs, published by the bridge
at A, arrive at ``actor-2`` at B with their C-Roads properties and the payload bytes unchanged.
With ``--serve`` the nodes and the simulator keep running (Ctrl-C stops them) and their addresses
are printed; without it, everything stops at the end and only the files left behind are named.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from certs import create_test_pki
from certs.errors import PkiError
from ii_api.wire.models import LocalSubscription
from interchange.actor import Actor
from interchange.app.config import load_config
from interchange.app.demo import _until as until
from interchange.app.demo import write_configs
from interchange.app.demo_dns import DemoDns, SrvRecord
from interchange.app.node import RunningNode, start_node
from interchange.bridges.tlex.payloads import kind_of
from interchange.bridges.tlex.sim_cli import start_simulation
from interchange.ground.errors import CliError
from interchange.ground.ports import free_port
from interop_kit.demo_data import CONSUMER, DOMAIN, INTERCHANGE, NODES, PUBLISHER, STEP_S, SUBSCRIBER
from interop_kit.demo_data import actor_settings

BRIDGE = "tlex-bridge"
SELECTOR = "messageType = 'SPATEM'"
HAZELDONK = (51.485992, 4.735311)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("tlex-demo", help="demo: a simulated traffic light's SPATEM at a neighbour's actor",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("demo-data"), help="working directory (default demo-data)")
    parser.add_argument("--serve", action="store_true",
                        help="keep the nodes and the simulator running afterwards (Ctrl-C stops them)")
    parser.set_defaults(handler=run)


def add_bridge(directory: Path, config_path: Path, facts: dict[str, Any]) -> None:
    """Give A's node config a [tlex] section for the simulator's controller."""
    made = create_test_pki(directory / "pki", list(NODES), [PUBLISHER, CONSUMER, BRIDGE], exist_ok=True)
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tlex"] = {
        "api_url": facts["api_url"], "authorization": facts["broker_authorization"],
        "server_name": facts["server_name"], "trust_bundle": facts["trust_bundle"], "domain": facts["domain"],
        "actor": str(made.identity(BRIDGE).directory), "publisher_id": "NL00001", "originating_country": "NL",
        "repetition_ms": {"SPATEM": 500},
        "controllers": [{"tlc_id": c["tlc_id"], "intersections": c["intersections"],
                         "latitude": HAZELDONK[0], "longitude": HAZELDONK[1]} for c in facts["controllers"]]}
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def agree(config_path: Path, rules: list[dict[str, Any]]) -> None:
    """IP_068: this demo's actor agreements go before the base demo's (the first matching rule applies)."""
    config = json.loads(config_path.read_text(encoding="utf-8"))
    actors = config["ii"]["actors"]
    actors["rules"] = rules + actors["rules"]
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


async def receive_spatem(consumer: Actor, subscription: LocalSubscription) -> list[str]:
    """actor-2 at B takes one SPATEM."""
    listener = await consumer.listen(subscription, credit=10)
    message = await listener.next(STEP_S)
    message.accept()
    body = message.body
    props = ", ".join(f"{k}={v!r}" for k, v in sorted(message.properties.items()))
    return [f"{CONSUMER} received at {SUBSCRIBER} a {kind_of(body[1])} from the simulated traffic light via "
            f"{INTERCHANGE} (ttl {(message.ttl_ms or 0) / 1000:g} s): {props}",
            f"payload ({len(body)} bytes, unchanged): {body[:40]!r}..."]


async def _demo(directory: Path, serve: bool = False) -> None:
    directory = directory.resolve()
    simulation = await start_simulation(directory / "tlex-sim", controllers=1, spatem_hz=2.0, mapem_interval=5.0)
    ii_ports = {name: free_port() for name in NODES}
    dns = DemoDns([SrvRecord(DOMAIN, name, ii_ports[name]) for name in NODES], {name: "127.0.0.1" for name in NODES})
    nodes: dict[str, RunningNode] = {}
    consumer: Actor | None = None
    try:
        configs = write_configs(directory, await dns.start(), ii_ports, 0)
        add_bridge(directory, configs[INTERCHANGE], simulation.facts)
        agree(configs[INTERCHANGE], [{"cn": BRIDGE, "publish_message_types": ["SPATEM", "MAPEM", "SSEM"],
                                      "publisher_ids": ["NL00001"], "subscribe_message_types": ["SREM"]}])
        agree(configs[SUBSCRIBER], [{"cn": CONSUMER, "subscribe_message_types": ["DENM", "SPATEM"]}])
        print(f"tlex-sim: REST {simulation.service.api_url}, controller NLSM0001 (intersection 5-100) at Hazeldonk")
        for name in NODES:
            nodes[name] = await start_node(load_config(configs[name]))
        a, b = nodes[INTERCHANGE], nodes[SUBSCRIBER]
        assert a.tlex is not None and b.ii is not None and b.amqps_port
        b_ii = b.ii
        print(f"{INTERCHANGE}: TLEX bridge up as actor {BRIDGE}, target {a.tlex.target}")
        await until(lambda: b_ii.is_neighbour(INTERCHANGE), "discovery")
        await until(lambda: any(c.application.messageType == "SPATEM"
                                for c in b_ii.neighbour_capabilities(INTERCHANGE)), "the bridge's capabilities at B")
        print(f"{SUBSCRIBER} knows {INTERCHANGE}'s traffic-light capabilities (SPATEM, MAPEM, SSEM of NLSM0001)")
        consumer = Actor(actor_settings(directory, CONSUMER, SUBSCRIBER, b.ii_port or 0))
        subscription = await consumer.subscribe(SELECTOR)
        source = subscription.endpoints[0].source
        print(f"{CONSUMER} subscribed at {SUBSCRIBER}: {SELECTOR!r} -> source {source}")
        await until(lambda: any(link["connected"] for o in b_ii.status()["outgoing"] for link in o["links"]),
                    "B's subscription at A and its data link")
        for line in await receive_spatem(consumer, subscription):
            print("  " + line)
        print(f"logs: {directory / INTERCHANGE / 'node.log'} (tlex_* events), {directory / SUBSCRIBER / 'node.log'}")
        if serve:
            print(f"metrics: http://127.0.0.1:{a.admin_port}/metrics (tlex_*); the bridge's view: "
                  f"http://127.0.0.1:{a.admin_port}/federation; the simulator: {simulation.service.api_url} "
                  f"(tokens in {directory / 'tlex-sim' / 'tokens.json'})")
            print("serving; Ctrl-C to stop")
            await asyncio.Event().wait()
    finally:
        if consumer is not None:
            await consumer.close()
        for node in reversed(list(nodes.values())):
            await node.close()
        dns.close()
        await simulation.close()


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_demo(args.dir, args.serve))
    except PkiError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot start the demo: {exc}") from None
    return 0
