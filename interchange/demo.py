"""`interchange demo`: the quick-start main job on embedded defaults.

Generates (or reuses) a session-level test PKI, writes a node config, starts the Basic Interface
broker on loopback with TLS 1.3, then a demo publisher (actor-1) sends C-ITS messages and a demo
consumer (actor-2) receives through a JMS selector: only the DENM in its quadtree area arrives.
With ``--serve`` the broker keeps running afterwards.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from interchange.errors import CliError

INTERCHANGE = "a.interchange.test"
PUBLISHER = "actor-1"
CONSUMER = "actor-2"
DEMO_SELECTOR = "messageType = 'DENM' AND quadTree LIKE '%,1202021%'"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("demo", help="run the quick-start demo on loopback",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("demo-data"), help="working directory (default demo-data)")
    parser.add_argument("--port", type=int, default=0, help="AMQPS port (default: any free port)")
    parser.add_argument("--serve", action="store_true", help="keep the broker running after the demo")
    parser.set_defaults(handler=run)


def write_config(directory: Path, port: int) -> Path:
    """Create the test PKI (kept across runs) and the node config; return the config path."""
    from certs import create_test_pki

    directory = directory.resolve()
    made = create_test_pki(directory / "pki", [INTERCHANGE], [PUBLISHER, CONSUMER], exist_ok=True)
    identity = made.identity(INTERCHANGE)
    config = {
        "name": INTERCHANGE,
        "data_dir": str(directory / "var"),
        "tls": {"cert_chain": str(identity.chain), "key": str(identity.key),
                "trust_bundle": str(made.trust_bundle), "crls": [str(c) for c in made.crls]},
        "broker": {
            "host": "127.0.0.1", "port": port,
            "targets": [{"address": "publish-actor-1", "publishers": [PUBLISHER]}],
            "sources": [{"address": "subscribe-actor-2", "consumers": [CONSUMER]}],
        },
        "log": {"path": str(directory / "var" / "node.log"), "level": "info", "properties": True, "payload": True},
        "admin": {"host": "127.0.0.1", "port": 0},
    }
    path = directory / "node.json"
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return path


def _clients(directory: Path, port: int) -> list[str]:
    """Publisher and consumer, as any proton application would be written (blocking API)."""
    from proton import Message, SSLDomain
    from proton.reactor import Selector
    from proton.utils import BlockingConnection

    from certs.tls import TlsFiles, proton_ssl_domain

    def connect(cn: str) -> BlockingConnection:
        files = TlsFiles.from_pki(directory / "pki", cn, with_crls=False)
        return BlockingConnection(f"amqps://127.0.0.1:{port}", ssl_domain=proton_ssl_domain(files, SSLDomain.MODE_CLIENT),
                                  virtual_host=INTERCHANGE, allowed_mechs="EXTERNAL", timeout=10)

    def message(kind: str, tile: str, text: str) -> Message:
        props = {"publisherId": "NL00001", "publicationId": f"NL00001:{kind.lower()}-demo",
                 "originatingCountry": "NL", "protocolVersion": f"{kind}:1.3.1" if kind == "DENM" else f"{kind}:1.2.1",
                 "messageType": kind, "quadTree": f",{tile},"}
        if kind == "DENM":
            props.update(causeCode=1, subCauseCode=0)
        return Message(body=text.encode(), properties=props, inferred=True)

    lines = []
    consumer = connect(CONSUMER)
    receiver = consumer.create_receiver("subscribe-actor-2", credit=10, options=Selector(DEMO_SELECTOR))
    lines.append(f"consumer {CONSUMER} attached to subscribe-actor-2 with selector: {DEMO_SELECTOR}")
    publisher = connect(PUBLISHER)
    sender = publisher.create_sender("publish-actor-1")
    sent = [("IVIM", "120202130121133020", "speed limit 80 at Hazeldonk"),
            ("DENM", "031332213323322232", "roadworks at Valenca-Tui"),
            ("DENM", "120202130121133020", "stationary vehicle at Hazeldonk")]
    for kind, tile, text in sent:
        sender.send(message(kind, tile, text))
        lines.append(f"publisher {PUBLISHER} sent {kind} quadTree ,{tile}, : {text!r}")
    got = receiver.receive(timeout=10)
    receiver.accept()
    lines.append(f"consumer {CONSUMER} received {got.properties['messageType']} "
                 f"quadTree {got.properties['quadTree']} : {bytes(got.body).decode()!r}")
    try:
        extra = receiver.receive(timeout=1)
        lines.append(f"UNEXPECTED extra message: {bytes(extra.body)!r}")
    except Exception:  # noqa: BLE001 - proton raises Timeout: nothing else matched, as intended
        lines.append("no other message matched the selector (the IVIM and the DENM in Spain were filtered out)")
    publisher.close()
    consumer.close()
    return lines


async def _demo(directory: Path, port: int, serve: bool) -> None:
    from interchange.config import load_config
    from interchange.node import start_node

    config = load_config(write_config(directory, port))
    node = await start_node(config)
    try:
        print(f"broker {config.name} listening on amqps://127.0.0.1:{node.amqps_port} (TLS 1.3, client certificates)")
        print(f"admin/metrics: http://127.0.0.1:{node.admin_port}/metrics  log switches: /log  sources: /sources")
        for line in await asyncio.to_thread(_clients, directory, node.amqps_port):
            print("  " + line)
        print(f"PKI: {directory / 'pki'}  (interchange pki --dir {directory / 'pki'} show)")
        print(f"config: {directory / 'node.json'}  (interchange broker --config {directory / 'node.json'})")
        print(f"log: {config.log.path}")
        if serve:
            print("serving; Ctrl-C to stop")
            await asyncio.Event().wait()
    finally:
        await node.close()


def run(args: argparse.Namespace) -> int:
    from certs.errors import PkiError

    try:
        asyncio.run(_demo(args.dir, args.port, args.serve))
    except PkiError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot start the demo broker: {exc}") from None
    return 0
