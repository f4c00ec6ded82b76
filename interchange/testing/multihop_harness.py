"""Multi-hop federations for the tests: real nodes, real DNS, the test PKI.

The topology is made with DNS: every link ``x - y`` is a domain of its own
(``<x><y>.interchange.test``) holding the SRV records of both ends, and each node discovers the
domains of its links only (IP_088/089), so its neighbours are exactly the nodes it is linked to
(IP_126: it refuses the others). :class:`MultihopFederation` starts the nodes in the test's event
loop (as :mod:`ii_harness` does), each with ``[ii.multihop]`` as given.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton import Message

from certs import TestPki
from ii_api.peers.discovery import DiscoveryConfig
from interchange.app.node import RunningNode
from interchange.broker.hop_trace import TRACE_KEY
from interchange.ground.ports import free_port
from interchange.testing.dns_fixtures import DnsmasqServer, DnsRecords, Srv
from interchange.testing.ii_harness import DOMAIN, Consumer, Https, denm_capability, node_config, start, wait_for

__all__ = ["MultihopFederation", "link_domain", "running", "trace_of"]


def link_domain(x: str, y: str) -> str:
    """The DNS domain of the link between nodes ``x`` and ``y`` (either order)."""
    first, second = sorted((x, y))
    return f"{first.split('.')[0]}{second.split('.')[0]}.{DOMAIN}"


def trace_of(message: Message) -> list[str]:
    """The hop trace a received message carries (empty without one)."""
    annotations: dict[Any, Any] = dict(message.annotations or {})
    return list(annotations.get(TRACE_KEY, []))


@dataclass
class MultihopFederation:
    """Nodes linked as ``links`` says, each with its own ``[ii.multihop]`` (``multihop[name]``)."""

    pki: TestPki
    workdir: Path
    dns: DnsmasqServer
    links: list[tuple[str, str]]
    multihop: dict[str, dict[str, Any]]
    ii_ports: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, RunningNode] = field(default_factory=dict)
    clients: list[Https] = field(default_factory=list)
    zones: set[str] = field(default_factory=set)  #: every link domain so far: answered (empty: NXDOMAIN) after a cut
    consumers: list[Consumer] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return sorted({n for link in self.links for n in link})

    def domains(self, name: str) -> tuple[str, ...]:
        return tuple(sorted(link_domain(x, y) for x, y in self.links if name in (x, y)))

    def records(self, linked: bool = True) -> DnsRecords:
        """The DNS of the links (``linked=False``: their domains, empty: nobody finds anybody)."""
        self.zones |= {link_domain(x, y) for x, y in self.links}
        srv = [Srv(link_domain(x, y), end, self.ii_ports[end]) for x, y in self.links for end in (x, y) if linked]
        return DnsRecords(srv=srv, hosts={name: "127.0.0.1" for name in self.names}, zones=sorted(self.zones))

    async def start_all(self, together: bool = False, linked: bool = True) -> None:
        """DNS, then the nodes: one after the other, or ``together`` (all at the same moment);
        ``linked=False``: unlinked in DNS until :meth:`relink`."""
        self.ii_ports = {name: free_port() for name in self.names}
        await asyncio.to_thread(self.dns.start, self.records(linked))
        if together:
            await asyncio.gather(*(self.start(name) for name in self.names))
            return
        for name in self.names:
            await self.start(name)

    async def start(self, name: str) -> RunningNode:
        assert self.dns.port is not None
        discovery = DiscoveryConfig(dns_server=self.dns.host, dns_port=self.dns.port, domains=self.domains(name),
                                    interval_s=1.0, timeout_s=2.0)
        self.nodes[name] = await start(node_config(self.pki, name, self.workdir / name, ii_port=self.ii_ports[name],
                                                   discovery=discovery, multihop=self.multihop.get(name, {})))
        return self.nodes[name]

    async def stop(self, name: str) -> None:
        await self.nodes.pop(name).close()

    async def leave(self, name: str) -> None:
        """``name`` leaves: stopped and its SRV records gone from DNS (its neighbours find it gone)."""
        self.links = [link for link in self.links if name not in link]
        await self.stop(name)
        await asyncio.to_thread(self.dns.reconfigure, self.records())

    async def relink(self, links: list[tuple[str, str]]) -> None:
        """The topology becomes ``links`` (among the running nodes and the domains they were started
        with): DNS reconfigured, the nodes find out at their next discovery round."""
        self.links = links
        await asyncio.to_thread(self.dns.reconfigure, self.records())

    def https(self, cn: str, node: str) -> Https:
        client = Https(self.pki, cn, self.nodes[node])
        self.clients.append(client)
        return client

    async def consumer(self, cn: str, node: str, source: str) -> Consumer:
        running = self.nodes[node]
        assert running.amqps_port is not None
        consumer = await asyncio.to_thread(Consumer, self.pki, cn, running.amqps_port, node, source)
        self.consumers.append(consumer)
        return consumer

    async def close(self) -> None:
        for consumer in self.consumers:
            await asyncio.to_thread(consumer.close)
        for client in self.clients:
            await client.close()
        for node in list(self.nodes.values()):
            await node.close()

    # ------------------------------------------------------------ actors
    async def publisher(self, node: str, actor: str, publisher: str, country: str = "NO") -> str:
        """Register ``actor``'s DENM capability (publicationId ``<publisher>:denm-1``) at ``node`` and
        a delivery; the target to publish to."""
        client = self.https(actor, node)
        status, _ = await client.post(f"/{actor}/capabilities", {"capabilities": [
            denm_capability(publisher=publisher, country=country, tiles=["1202021"])]})
        assert status == 200
        status, body = await client.post(f"/{actor}/deliveries", {"deliveries": [{"selector": "messageType = 'DENM'"}]})
        assert status == 200 and body["deliveries"][0]["status"] == "CREATED", body
        return str(body["deliveries"][0]["endpoints"][0]["target"])

    async def subscribe(self, node: str, actor: str, selector: str = "messageType = 'DENM'") -> str:
        """``actor``'s subscription at ``node``; its source."""
        status, body = await self.https(actor, node).post(f"/{actor}/subscriptions",
                                                          {"subscriptions": [{"selector": selector}]})
        assert status == 200, body
        return str(body["subscriptions"][0]["endpoints"][0]["source"])

    def offered(self, at: str, by: str) -> set[str]:
        """The publicationIds node ``at`` has learnt from neighbour ``by``."""
        ii = self.nodes[at].ii
        assert ii is not None
        return {c.application.publicationId for c in ii.neighbour_capabilities(by)}

    def created_links(self, node: str) -> dict[str, int]:
        """Connected federation links of ``node``, by neighbour."""
        ii = self.nodes[node].ii
        assert ii is not None
        counts: dict[str, int] = {}
        for outgoing in ii.status()["outgoing"]:
            if outgoing["status"] == "CREATED":
                connected = sum(1 for link in outgoing["links"] if link["connected"])
                counts[outgoing["neighbour"]] = counts.get(outgoing["neighbour"], 0) + connected
        return counts

    def outgoing(self, node: str) -> dict[str, int] | None:
        """``node``'s active subscriptions at neighbours, counted by neighbour, if every one is
        CREATED with all its links connected; None while any is not."""
        ii = self.nodes[node].ii
        assert ii is not None
        counts: dict[str, int] = {}
        for outgoing in ii.status()["outgoing"]:
            if outgoing["status"] != "CREATED" or not outgoing["links"] or not all(
                    link["connected"] for link in outgoing["links"]):
                return None
            counts[outgoing["neighbour"]] = counts.get(outgoing["neighbour"], 0) + 1
        return counts

    async def wait_settled(self, expected: dict[str, dict[str, int]]) -> None:
        """Until each node's subscriptions at neighbours are as ``expected`` (see :meth:`outgoing`)."""
        try:
            await wait_for(lambda: all(self.outgoing(n) == counts for n, counts in expected.items()),
                           "settled subscriptions at neighbours")
        except AssertionError as exc:
            seen = {n: self.nodes[n].ii.status()["outgoing"] for n in expected}  # type: ignore[union-attr]
            raise AssertionError(f"{exc}: expected {expected}, seen {seen}") from None

    def hop_drops(self) -> dict[str, dict[str, int]]:
        """Imported messages each running node dropped by its hop trace, by reason (loop, hop_limit)."""
        return {name: dict(node.core.observer.hop_dropped_count) for name, node in self.nodes.items()}

    async def wait_offered(self, expected: dict[tuple[str, str], Iterable[str]]) -> None:
        """Until each ``(at, by)`` has learnt exactly the publicationIds given."""
        wanted = {key: set(ids) for key, ids in expected.items()}
        await wait_for(lambda: all(self.offered(at, by) == ids for (at, by), ids in wanted.items()),
                       f"capabilities {wanted}")


@contextlib.asynccontextmanager
async def running(pki: TestPki, workdir: Path, dns: DnsmasqServer, links: list[tuple[str, str]],
                  multihop: dict[str, dict[str, Any]]) -> AsyncIterator[MultihopFederation]:
    """A started :class:`MultihopFederation`, closed on the way out."""
    federation = MultihopFederation(pki, workdir, dns, links, multihop)
    try:
        await federation.start_all()
        yield federation
    finally:
        await federation.close()
