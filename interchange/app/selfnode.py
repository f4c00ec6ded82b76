"""``interchange interop --self``: the demo's two-node federation on loopback, and the kit's target on it.

The demo's pieces plus what the kit needs: the refusal certificates and their CRL, the identity
``kit.interchange.test`` (a neighbour of A, IP_126), actor-1's delivery and the demo's BI traffic.
``tweak`` lets a caller change the node configs before they start; :class:`SelfFederation` owns
the nodes and the DNS server; the kit's ``--self`` gets :func:`start_self` from
:mod:`interchange.app.cli`. Details: docs/interop-kit.md ("The kit's own target").
"""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from certs import create_test_pki
from certs.tls import TlsFiles
from interchange.app.config import load_config
from interchange.app.demo import write_configs
from interchange.app.demo_dns import DemoDns, SrvRecord
from interchange.app.node import RunningNode, start_node
from interchange.ground.ports import free_port
from interop_kit import badcerts
from interop_kit.demo_data import DOMAIN, INTERCHANGE, LOOPBACK, NODES, PUBLISHER, demo_traffic, register_demo_datasets
from interop_kit.model import Delivery, Target

KIT_NAME = "kit.interchange.test"
READY_S = 30.0

ConfigTweak = Callable[[dict[str, dict[str, Any]], Path], None]


@dataclass
class SelfFederation:
    """Running nodes A and B, the DNS server, and the kit's target (node A)."""

    directory: Path
    dns: DemoDns
    nodes: dict[str, RunningNode] = field(default_factory=dict)
    target: Target | None = None

    async def close(self) -> None:
        for node in reversed(list(self.nodes.values())):
            await node.close()
        self.dns.close()


def _apply(tweak: ConfigTweak | None, paths: dict[str, Path], pki_dir: Path) -> None:
    if tweak is None:
        return
    configs = {name: json.loads(path.read_text(encoding="utf-8")) for name, path in paths.items()}
    tweak(configs, pki_dir)
    for name, path in paths.items():
        path.write_text(json.dumps(configs[name], indent=2) + "\n", encoding="utf-8")


async def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READY_S
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"--self: timed out waiting for {what}")
        await asyncio.sleep(0.05)


def _target(directory: Path, node: RunningNode, dns_port: int, delivery_address: str | None) -> Target:
    pki = directory / "pki"
    assert node.ii_port is not None and node.amqps_port is not None
    return Target(
        name=INTERCHANGE, ii_url=f"https://{INTERCHANGE}:{node.ii_port}", bi_host=INTERCHANGE,
        bi_port=node.amqps_port, identity=TlsFiles.from_pki(pki, KIT_NAME, with_crls=False), address=LOOPBACK,
        domain=DOMAIN, dns_server=LOOPBACK, dns_port=dns_port, pki=pki,
        delivery=None if delivery_address is None else Delivery(
            TlsFiles.from_pki(pki, PUBLISHER, with_crls=False), delivery_address, INTERCHANGE, node.amqps_port),
        traffic=demo_traffic(),
    )


async def start_self(directory: Path, tweak: ConfigTweak | None = None, *, delivery: bool = True) -> SelfFederation:
    """Start the federation in ``directory`` (PKI kept, node state fresh) and point a Target at A.

    Without ``delivery`` actor-1 registers nothing (its client must verify A's certificate, which
    a tweak may have broken) and the target has no delivery endpoint: the BI traffic checks skip.
    """
    directory = directory.resolve()
    ii_ports = {name: free_port() for name in NODES}
    records = [SrvRecord(DOMAIN, name, port) for name, port in {**ii_ports, KIT_NAME: free_port()}.items()]
    dns = DemoDns(records, {record.target: LOOPBACK for record in records})
    federation = SelfFederation(directory, dns)
    try:
        dns_port = await dns.start()
        paths = write_configs(directory, dns_port, ii_ports, 0)
        create_test_pki(directory / "pki", [KIT_NAME], [], exist_ok=True)
        badcerts.prepare(directory / "pki")  # the refusal certificates and the CRL the nodes load at start
        _apply(tweak, paths, directory / "pki")
        for name in NODES:
            federation.nodes[name] = await start_node(load_config(paths[name]))
        node = federation.nodes[INTERCHANGE]
        ii = node.ii
        assert ii is not None
        await _until(lambda: ii.is_neighbour(KIT_NAME), f"{INTERCHANGE} to discover {KIT_NAME}")
        address = await register_demo_datasets(directory, PUBLISHER, INTERCHANGE, node.ii_port or 0) if delivery else None
        federation.target = _target(directory, node, dns_port, address)
    except BaseException:
        await federation.close()
        raise
    return federation
