"""`interchange demo`: the quick-start main job, a small federation on loopback.

Two interchanges, ``a.interchange.test`` and ``b.interchange.test``, find each other through DNS
SRV, exchange capabilities and subscriptions over HTTPS and federate data over AMQPS; of three
messages published at A, only the DENM at Hazeldonk reaches ``actor-2`` at B (README, "What the
demo does"). At the end the federation's own logs are audited with Spark (ingest, validate,
report: the governance user's part; ``--no-audit`` skips it, and so does a node without the
``[spark]`` extra, saying so). ``--serve`` keeps everything running. The PKI under ``--dir`` is
kept across runs; each run starts the nodes from an empty state (``<dir>/<interchange>/var`` and
the logs cleared). Names and datasets are :mod:`interop_kit.demo_data`; the actors are clients of
:mod:`interchange.actor`, their settings written to ``<dir>/actors/<actor>.toml`` for
``interchange actor`` (docs/actors.md).
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from certs import create_test_pki
from certs.errors import PkiError
from ii_api.wire.models import Delivery, LocalSubscription
from interchange.actor import Actor, OutgoingMessage, capability_from_json
from interchange.app.config import load_config
from interchange.app.demo_dns import DemoDns, SrvRecord
from interchange.app.node import RunningNode, start_node
from interchange.ground.errors import CliError
from interchange.ground.ports import free_port
from interop_kit.demo_data import (
    CONSUMER,
    DEMO_DELIVERY,
    DEMO_SELECTOR,
    DOMAIN,
    HAZELDONK,
    INTERCHANGE,
    NODES,
    PUBLISHER,
    STEP_S,
    SUBSCRIBER,
    VALENCA,
    actor_settings,
    demo_capabilities,
    demo_properties,
)

def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("demo", help="run the quick-start demo: a two-interchange federation on loopback",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("demo-data"), help="working directory (default demo-data)")
    parser.add_argument("--port", type=int, default=0, help="AMQPS port of interchange A (default: any free port)")
    parser.add_argument("--serve", action="store_true", help="keep the federation running after the demo")
    parser.add_argument("--no-audit", dest="audit", action="store_false",
                        help="skip the audit of the federation's own logs at the end (Spark: ingest, validate, report)")
    parser.set_defaults(handler=run)


def write_configs(directory: Path, dns_port: int, ii_ports: dict[str, int], amqps_port: int) -> dict[str, Path]:
    """Create the test PKI (kept across runs) and one node config per interchange."""
    made = create_test_pki(directory / "pki", list(NODES), [PUBLISHER, CONSUMER], exist_ok=True)
    paths = {}
    for name in NODES:
        identity = made.identity(name)
        home = directory / name
        shutil.rmtree(home / "var", ignore_errors=True)  # every run starts from an empty II state
        (home / "node.log").unlink(missing_ok=True)
        config = {
            "name": name,
            "data_dir": str(home / "var"),
            "tls": {"cert_chain": str(identity.chain), "key": str(identity.key),
                    "trust_bundle": str(made.trust_bundle), "crls": [str(c) for c in made.crls]},
            "broker": {"host": "127.0.0.1", "port": amqps_port if name == INTERCHANGE else 0},
            "log": {"path": str(home / "node.log"), "level": "info", "properties": True, "payload": True},
            "admin": {"host": "127.0.0.1", "port": 0},
            "ii": {"host": "127.0.0.1", "port": ii_ports[name], "public_host": "127.0.0.1",
                   "retry_min_s": 0.1, "retry_max_s": 2.0,
                   "discovery": {"dns_server": "127.0.0.1", "dns_port": dns_port, "domains": [DOMAIN],
                                 "interval_s": 60},
                   # IP_068: what the demo's actors may do, and nobody else
                   "actors": {"default": "deny", "rules": [
                       {"cn": PUBLISHER, "publish_message_types": ["DENM", "IVIM"], "publisher_ids": ["NL00001"]},
                       {"cn": CONSUMER, "subscribe_message_types": ["DENM"]}]}},
        }
        home.mkdir(parents=True, exist_ok=True)
        paths[name] = home / "node.json"
        paths[name].write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return paths


async def _traffic(publisher: Actor, delivery: Delivery, consumer: Actor, subscription: LocalSubscription) -> list[str]:
    """actor-2 listens at B, actor-1 publishes at A (the actors' library, :mod:`interchange.actor`)."""
    lines = []
    listener = await consumer.listen(subscription, credit=10)
    lines.append(f"consumer {CONSUMER} attached at {SUBSCRIBER} to {subscription.endpoints[0].source}")
    for kind, tile, text in (("IVIM", HAZELDONK, "speed limit 80 at Hazeldonk"),
                             ("DENM", VALENCA, "roadworks at Valenca-Tui"),
                             ("DENM", HAZELDONK, "stationary vehicle at Hazeldonk")):
        outcome = await publisher.publish(OutgoingMessage.build(demo_properties(kind, tile), text.encode()), delivery)
        lines.append(f"publisher {PUBLISHER} sent {kind} quadTree ,{tile}, at {INTERCHANGE}: {text!r} ({outcome})")
    got = await listener.next(STEP_S)
    got.accept()
    lines.append(f"consumer {CONSUMER} received at {SUBSCRIBER}, from {INTERCHANGE}: {got.properties['messageType']} "
                 f"quadTree {got.properties['quadTree']} : {got.body.decode()!r}")
    try:
        extra = await listener.next(1.0)
        lines.append(f"UNEXPECTED extra message: {extra.body!r}")
    except TimeoutError:
        lines.append("no other message matched the selector (the IVIM and the DENM in Spain were filtered out)")
    return lines


def write_actor_settings(directory: Path, nodes: dict[str, RunningNode]) -> dict[str, Path]:
    """``<dir>/actors/<actor>.toml``: each demo actor's settings for ``interchange actor`` (docs/actors.md)."""
    paths = {}
    for actor, name in ((PUBLISHER, INTERCHANGE), (CONSUMER, SUBSCRIBER)):
        paths[actor] = directory / "actors" / f"{actor}.toml"
        paths[actor].parent.mkdir(parents=True, exist_ok=True)
        settings = actor_settings(directory, actor, name, nodes[name].ii_port or 0)
        paths[actor].write_text(settings.to_toml(), encoding="utf-8")
    return paths


async def _until(predicate: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + STEP_S
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise CliError(f"demo: timed out waiting for {what}")
        await asyncio.sleep(0.02)
    return value


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


async def _demo(directory: Path, port: int, serve: bool) -> None:
    directory = directory.resolve()
    ii_ports = {name: free_port() for name in NODES}
    dns = DemoDns([SrvRecord(DOMAIN, name, ii_ports[name]) for name in NODES], {name: "127.0.0.1" for name in NODES})
    dns_port = await dns.start()
    configs = write_configs(directory, dns_port, ii_ports, port)
    nodes: dict[str, RunningNode] = {}
    actors: list[Actor] = []
    try:
        for name in NODES:
            nodes[name] = await start_node(load_config(configs[name]))
        a, b = nodes[INTERCHANGE], nodes[SUBSCRIBER]
        a_ii, b_ii = a.ii, b.ii  # locals, so that the lambdas below see them narrowed
        assert a_ii is not None and b_ii is not None and a.amqps_port and b.amqps_port
        print(f"DNS: _ixc._tcp.{DOMAIN} SRV records on udp://127.0.0.1:{dns_port}")
        for name, node in nodes.items():
            print(f"interchange {name}: II https://127.0.0.1:{node.ii_port} (mutual TLS 1.3), "
                  f"AMQPS amqps://127.0.0.1:{node.amqps_port}, metrics http://127.0.0.1:{node.admin_port}/metrics")
        await _until(lambda: b_ii.is_neighbour(INTERCHANGE) and a_ii.is_neighbour(SUBSCRIBER), "discovery")
        print(f"  discovery: {SUBSCRIBER} found {', '.join(n.name for n in b_ii.neighbours)}; "
              f"{INTERCHANGE} found {', '.join(n.name for n in a_ii.neighbours)}")
        publisher = Actor(actor_settings(directory, PUBLISHER, INTERCHANGE, a.ii_port or 0))
        consumer = Actor(actor_settings(directory, CONSUMER, SUBSCRIBER, b.ii_port or 0))
        actors += [publisher, consumer]
        registered = await publisher.api.add_capabilities([capability_from_json(c) for c in demo_capabilities()])
        print(f"  {PUBLISHER} registered {len(registered)} capabilities at {INTERCHANGE} (DENM, IVIM)")
        delivery = await publisher.create_delivery(DEMO_DELIVERY)
        print(f"  {PUBLISHER} delivery {delivery.status.value}: publish to target {delivery.endpoints[0].target}")
        await _until(lambda: len(b_ii.neighbour_capabilities(INTERCHANGE)) == 2, "capability exchange")
        print(f"  capability exchange: {SUBSCRIBER} knows {INTERCHANGE}'s 2 capabilities")
        started = time.monotonic()
        subscription = await consumer.subscribe(DEMO_SELECTOR)
        print(f"  {CONSUMER} subscription at {SUBSCRIBER} {subscription.status.value}: {DEMO_SELECTOR!r} -> source "
              f"{subscription.endpoints[0].source}")
        await _until(lambda: any(link["connected"] for o in b_ii.status()["outgoing"] for link in o["links"]),
                     "the subscription at A and its data link")
        print(f"  {SUBSCRIBER} subscribed at {INTERCHANGE}: CREATED, data link up "
              f"{(time.monotonic() - started) * 1000:.0f} ms after {CONSUMER}'s POST")
        for line in await _traffic(publisher, delivery, consumer, subscription):
            print("  " + line)
        for actor in actors:  # their links go: with --serve, what comes next is for the reader's own actors
            await actor.close()
        actors.clear()
        settings = write_actor_settings(directory, nodes)
        _print_where_to_look(directory, nodes, settings)
        if serve:
            print("serving; Ctrl-C to stop")
            await asyncio.Event().wait()
    finally:
        for actor in actors:
            await actor.close()
        for node in reversed(list(nodes.values())):
            await node.close()
        dns.close()


def _print_where_to_look(directory: Path, nodes: dict[str, Any], settings: dict[str, Path]) -> None:
    a, b = nodes[INTERCHANGE], nodes[SUBSCRIBER]
    rows = [("AT", "NEIGHBOUR", "SELECTOR", "STATUS", "LINKS")]
    for o in b.ii.status()["outgoing"]:
        rows.append((SUBSCRIBER, o["neighbour"], o["selector"], o["status"] or o["phase"],
                     f"{sum(link['connected'] for link in o['links'])} connected"))
    print("subscriptions requested by the II:")
    for line in _table(rows):
        print("  " + line)
    served = [(INTERCHANGE, address, ", ".join(sorted(s.spec.consumers)), s.spec.scope.value)
              for address, s in a.core.sources.items() if address.startswith("ii-sub-")]
    print("sources served to other interchanges:")
    for line in _table([("AT", "SOURCE", "CONSUMERS", "SCOPE"), *served]):
        print("  " + line)
    identity = directory / "pki" / "issued" / CONSUMER
    print(f"PKI: {directory / 'pki'}  (interchange pki --dir {directory / 'pki'} show)")
    for name in NODES:
        print(f"{name}: config {directory / name / 'node.json'}, log {directory / name / 'node.log'}, "
              f"neighbours: interchange neighbours --data-dir {directory / name / 'var'}, "
              f"subscriptions: interchange subscriptions --config {directory / name / 'node.json'}")
    print(f"the actor API, e.g. {CONSUMER}'s subscriptions: curl --cert {identity / 'chain.pem'} --key "
          f"{identity / 'key.pem'} --cacert {directory / 'pki' / 'trust.pem'} --resolve "
          f"{SUBSCRIBER}:{b.ii_port}:127.0.0.1 https://{SUBSCRIBER}:{b.ii_port}/{CONSUMER}/subscriptions")
    print(f"OpenAPI: https://{SUBSCRIBER}:{b.ii_port}/openapi.json (any certificate of the PKI)")
    print(f"the actors' settings for `interchange actor` (docs/actors.md): {settings[PUBLISHER]} and "
          f"{settings[CONSUMER]}, e.g. interchange actor whoami --config {settings[CONSUMER]}")


def audit_logs(directory: Path) -> None:
    """The governance user's part: the federation's own logs audited with Spark (ingest, validate,
    report), the report's path and the findings per severity printed. Skipped, with the reason,
    when the node runs without the ``[spark]`` extra."""
    try:
        pipeline = importlib.import_module("spark.pipeline")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("pyspark", "py4j", "pandas", "pyarrow", "jinja2", "matplotlib"):
            raise
        print(f"audit skipped: the [spark] extra is not installed ({exc.name} missing)")
        return
    logs = [str(directory / name / "node.log") for name in NODES if (directory / name / "node.log").is_file()]
    print(f"auditing the federation's own logs with Spark ({', '.join(logs)}) ...", flush=True)
    result = pipeline.audit(logs, directory / "audit", title="C-Roads interchange demo: audit of its own logs")
    for line in result.lines():
        print(line)


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(_demo(args.dir, args.port, args.serve))
    except PkiError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot start the demo: {exc}") from None
    if getattr(args, "audit", True):
        audit_logs(args.dir.resolve())
    return 0
