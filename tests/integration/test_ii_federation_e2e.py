"""Three interchanges on loopback, found through a real DNS server (dnsmasq SRV + A records), with
a real PKI: capability exchange, subscriptions, polling, federation links and data, end to end.

The time from an actor's subscription POST to the first message delivered from a publisher at
another interchange is measured and printed (``-s`` shows it), never asserted.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from certs import TestPki
from ii_api.peers.discovery import DiscoveryConfig
from ii_api.storage.store import Store
from interchange.app.node import RunningNode
from interchange.ground.ports import free_port
from interchange.testing.broker_harness import complete_records
from interchange.testing.dns_fixtures import DnsmasqServer, DnsRecords, Srv
from interchange.testing.ii_harness import (
    DOMAIN,
    INTERCHANGES,
    WAIT_S,
    A,
    B,
    C,
    Consumer,
    Https,
    amqp_connect,
    denm_capability,
    denm_message,
    node_config,
    publish,
    relay,
    start,
    wait_for,
)

DENM_HERE = "messageType = 'DENM' AND quadTree LIKE '%,1202021%'"
HAZELDONK = "120202130121133020"
SPAIN = "031332213323322232"


@dataclass
class Federation:
    pki: TestPki
    workdir: Path
    dns: DnsmasqServer
    ii_ports: dict[str, int]
    options: dict[str, dict[str, Any]]
    nodes: dict[str, RunningNode] = field(default_factory=dict)
    clients: list[Https] = field(default_factory=list)

    def discovery(self) -> DiscoveryConfig:
        assert self.dns.port is not None
        return DiscoveryConfig(dns_server=self.dns.host, dns_port=self.dns.port, domains=(DOMAIN,), interval_s=1.0,
                               timeout_s=2.0)

    async def start(self, name: str) -> RunningNode:
        options = self.options.get(name, {})
        self.nodes[name] = await start(node_config(self.pki, name, self.workdir / name, ii_port=self.ii_ports[name],
                                                   discovery=self.discovery(), **options))
        return self.nodes[name]

    async def stop(self, name: str) -> None:
        await self.nodes.pop(name).close()

    def https(self, cn: str, node: str) -> Https:
        client = Https(self.pki, cn, self.nodes[node])
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for node in list(self.nodes.values()):
            await node.close()


async def make_federation(pki: TestPki, workdir: Path, dns: DnsmasqServer,
                          options: dict[str, dict[str, Any]] | None = None) -> Federation:
    ports = {name: free_port() for name in INTERCHANGES}
    dns.start(DnsRecords(srv=[Srv(DOMAIN, name, port) for name, port in ports.items()],
                         hosts={name: "127.0.0.1" for name in INTERCHANGES}))
    federation = Federation(pki, workdir, dns, ports, options or {})
    for name in INTERCHANGES:
        await federation.start(name)
    return federation


@pytest.fixture
async def federation(pki: TestPki, tmp_path: Path, dnsmasq: DnsmasqServer) -> AsyncIterator[Federation]:
    # A answers subscription requests REQUESTED (as the appendix D example) so that its subscribers
    # poll to CREATED; B answers CREATED at once, and refuses selectors longer than 60 characters.
    made = await make_federation(pki, tmp_path, dnsmasq, {A: {"created_in_answer": False},
                                                          B: {"policy": {"max_selector_length": 60}}})
    try:
        yield made
    finally:
        await made.close()


async def register_publisher(client: Https, *capabilities: dict[str, Any]) -> str:
    """Register capabilities and one delivery covering them; the target to publish to."""
    status, _ = await client.post(f"/{client.cn}/capabilities", {"capabilities": list(capabilities)})
    assert status == 200
    status, body = await client.post(f"/{client.cn}/deliveries", {"deliveries": [{"selector": "messageType = 'DENM'"}]})
    assert status == 200 and body["deliveries"][0]["status"] == "CREATED"
    return str(body["deliveries"][0]["endpoints"][0]["target"])


class Publisher:
    """Publishes a DENM at Hazeldonk and one in Spain every 20 ms from a worker thread until stopped."""

    def __init__(self, pki: TestPki, cn: str, node: RunningNode, target: str, tag: str,
                 publisher: str = "NO00001", country: str = "NO") -> None:
        self.args = (pki, cn, node.amqps_port, node.config.name, target)
        self.tag, self.publisher, self.country = tag, publisher, country
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        pki, cn, port, name, target = self.args
        try:
            connection = amqp_connect(pki, cn, port, name)
            sender = connection.create_sender(target)
            while not self._stop.is_set():
                n = self.sent
                for tile, suffix in ((HAZELDONK, ""), (SPAIN, "-spain")):
                    sender.send(denm_message(self.publisher, "denm-1", tile, f"{self.tag}-{n}{suffix}".encode(),
                                             country=self.country))
                self.sent += 1
                self._stop.wait(0.02)
            connection.close()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def start(self) -> Publisher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        if self.error is not None:
            raise self.error


def drain(consumer: Consumer, seconds: float) -> list[bytes]:
    """Everything that arrives within ``seconds`` of quiet."""
    bodies = []
    while (message := consumer.receive(seconds)) is not None:
        bodies.append(bytes(message.body))
    return bodies


async def test_three_interchanges_exchange_data_without_re_export(federation: Federation) -> None:
    pki, nodes = federation.pki, federation.nodes
    actor_a = federation.https("actor-a", A)
    actor_b = federation.https("actor-b", B)
    actor_c = federation.https("actor-c", C)
    target_a = await register_publisher(actor_a, denm_capability(tiles=["1202021", "0313322"]))
    target_b = await register_publisher(actor_b, denm_capability(publisher="SE00001", country="SE",
                                                                  tiles=["1202021", "0313322"]))
    # node B imports A's DENMs for its own actor ...
    status, sub_b = await actor_b.post("/actor-b/subscriptions", {"subscriptions": [{"selector": DENM_HERE}]})
    assert status == 200
    # ... and C learns both A's and B's capabilities through the capability exchange (IP_075/094)
    await wait_for(lambda: len(nodes[C].ii.neighbour_capabilities(A)) == 1
                   and len(nodes[C].ii.neighbour_capabilities(B)) == 1, "capabilities at C")
    await wait_for(lambda: any(o["status"] == "CREATED" for o in nodes[B].ii.status()["outgoing"]),
                   "B's subscription at A")
    publisher_a = Publisher(pki, "actor-a", nodes[A], target_a, "a").start()
    publisher_b = Publisher(pki, "actor-b", nodes[B], target_b, "b", "SE00001", "SE").start()
    consumer_b = consumer_c = None
    try:
        await wait_for(lambda: publisher_a.sent > 5 and publisher_b.sent > 5, "publishers running")
        # the measured path: an actor's subscription POST at C -> first message from A delivered at C
        t0 = time.monotonic()
        status, sub_c = await actor_c.post("/actor-c/subscriptions", {"subscriptions": [{"selector": DENM_HERE}]})
        assert status == 200 and sub_c["subscriptions"][0]["status"] == "CREATED"
        source_c = sub_c["subscriptions"][0]["endpoints"][0]["source"]
        consumer_c = await asyncio.to_thread(Consumer, pki, "actor-c", nodes[C].amqps_port, C, source_c)
        first = await asyncio.to_thread(consumer_c.receive)
        assert first is not None
        while bytes(first.body).startswith(b"b-"):  # the first from A is what is measured
            first = await asyncio.to_thread(consumer_c.receive)
            assert first is not None
        elapsed = time.monotonic() - t0
        print(f"\nreactivity: local subscription POST at C -> first message from A delivered at C: "
              f"{elapsed * 1000:.0f} ms")
        outgoing = {o["neighbour"]: o for o in nodes[C].ii.status()["outgoing"]}
        assert {A, B} <= set(outgoing) and outgoing[A]["status"] == "CREATED"
        source_b = sub_b["subscriptions"][0]["endpoints"][0]["source"]
        consumer_b = await asyncio.to_thread(Consumer, pki, "actor-b", nodes[B].amqps_port, B, source_b)
        await asyncio.sleep(0.5)
    finally:  # joined off the loop: the publishers wait for the brokers' settlements
        await asyncio.to_thread(publisher_a.stop)
        await asyncio.to_thread(publisher_b.stop)
    try:
        assert consumer_c is not None and consumer_b is not None
        at_c = [bytes(first.body)] + await asyncio.to_thread(drain, consumer_c, 1.0)
        at_b = await asyncio.to_thread(drain, consumer_b, 1.0)
    finally:
        for consumer in (consumer_b, consumer_c):
            if consumer is not None:
                await asyncio.to_thread(consumer.close)
    # the DENMs at Hazeldonk from A and B arrive at C, once each; the DENMs in Spain do not
    assert any(b.startswith(b"a-") for b in at_c) and any(b.startswith(b"b-") for b in at_c)
    assert not [b for b in at_c if b.endswith(b"spain")]
    assert len(at_c) == len(set(at_c)), "a message arrived twice at C"
    # B received A's data (imported) but never served it on to C (IP_109)
    assert any(b.startswith(b"a-") for b in at_b)
    served_by_b = [s for s in nodes[B].core.sources.values() if C in s.spec.consumers]
    assert len(served_by_b) == 1 and served_by_b[0].enqueued <= publisher_b.sent
    # the subscription lists agree on both sides
    _, listed = await federation.https(C, A).get(f"/{C}/subscriptions")
    assert [s["status"] for s in listed["subscriptions"]] == ["CREATED"]


async def test_new_capability_resubscribe_delete_and_partial_failure(federation: Federation) -> None:
    pki, nodes = federation.pki, federation.nodes
    actor_a, actor_b, actor_c = (federation.https("actor-a", A), federation.https("actor-b", B),
                                 federation.https("actor-c", C))
    target_a = await register_publisher(actor_a, denm_capability())
    await register_publisher(actor_b, denm_capability(publisher="SE00001", country="SE"))
    await wait_for(lambda: nodes[C].ii.neighbour_capabilities(A) and nodes[C].ii.neighbour_capabilities(B),
                   "capabilities at C")
    # B's policy refuses selectors longer than 60 characters: partial failure, status ERROR
    long_selector = DENM_HERE + " AND causeCode >= 1"
    status, body = await actor_c.post("/actor-c/subscriptions", {"subscriptions": [{"selector": long_selector}]})
    path, source = body["subscriptions"][0]["path"], body["subscriptions"][0]["endpoints"][0]["source"]
    sub = await wait_for(lambda: _get_if(actor_c, path, "ERROR"), "ERROR at C")
    assert sub["errorMessage"].startswith(f"{B}: ILLEGAL") and sub["endpoints"][0]["source"] == source
    await wait_for(lambda: any(link["connected"] for o in nodes[C].ii.status()["outgoing"] if o["neighbour"] == A
                               for link in o["links"]), "data link to A")
    # a new capability at A reaches C (pushed), C polls at once, A says RESUBSCRIBE, C asks anew
    _, at_a = await federation.https(C, A).get(f"/{C}/subscriptions")
    first_id = at_a["subscriptions"][0]["id"]
    t0 = time.monotonic()
    _, added = await actor_a.post("/actor-a/capabilities", {"capabilities": [denm_capability(publication="denm-2")]})
    await wait_for(lambda: len(nodes[C].ii.neighbour_capabilities(A)) == 2
                   and len(nodes[B].ii.neighbour_capabilities(A)) == 2, "the new capability at B and C")
    print(f"\nreactivity: capability POST at A -> known at B and C: {(time.monotonic() - t0) * 1000:.0f} ms")
    status, delivery = await actor_a.post("/actor-a/deliveries", {"deliveries": [
        {"selector": "publicationId = 'NO00001:denm-2'"}]})
    target_a2 = delivery["deliveries"][0]["endpoints"][0]["target"]

    async def resubscribed() -> bool:
        _, now = await federation.https(C, A).get(f"/{C}/subscriptions")
        return [s["status"] for s in now["subscriptions"]] == ["CREATED"] and now["subscriptions"][0]["id"] != first_id

    await wait_for(resubscribed, "RESUBSCRIBE handled: the old subscription deleted, a new one CREATED")
    await wait_for(lambda: any(link["connected"] for o in nodes[C].ii.status()["outgoing"] if o["neighbour"] == A
                               for link in o["links"]), "data link to A again")
    consumer = await asyncio.to_thread(Consumer, pki, "actor-c", nodes[C].amqps_port, C, source)
    try:
        await asyncio.to_thread(publish, pki, "actor-a", nodes[A].amqps_port, A, target_a2,
                                [denm_message(publication="denm-2", body=b"new dataset")])
        got = await asyncio.to_thread(consumer.receive)
        assert got is not None and bytes(got.body) == b"new dataset"
        await asyncio.to_thread(publish, pki, "actor-a", nodes[A].amqps_port, A, target_a,
                                [denm_message(body=b"old dataset")])
        got = await asyncio.to_thread(consumer.receive)
        assert got is not None and bytes(got.body) == b"old dataset"
    finally:
        await asyncio.to_thread(consumer.close)
    # the actor's subscription goes: the one at A is deleted there, and its source
    assert (await actor_c.delete(path))[0] == 204

    async def gone_at_a() -> bool:
        _, now = await federation.https(C, A).get(f"/{C}/subscriptions")
        return now["subscriptions"] == []

    await wait_for(gone_at_a, "the subscription at A deleted")
    assert not [s for s in nodes[A].core.sources.values() if C in s.spec.consumers]
    await wait_for(lambda: nodes[C].ii.status()["outgoing"] == [], "nothing left at C")
    assert added["capabilities"][0]["id"]


async def _get_if(client: Https, path: str, status: str) -> dict[str, Any] | None:
    code, body = await client.get(path)
    return body if code == 200 and body["status"] == status else None


async def test_redirect_gives_the_actor_the_remote_endpoint(federation: Federation) -> None:
    pki, nodes = federation.pki, federation.nodes
    actor_a, actor_c = federation.https("actor-a", A), federation.https("actor-c", C)
    target_a = await register_publisher(actor_a, denm_capability(redirectPolicy="MANDATORY"))
    await wait_for(lambda: nodes[C].ii.neighbour_capabilities(A), "capabilities at C")
    # without a redirect nothing is requested from A (IP_133: its only capability needs one)
    _, plain = await actor_c.post("/actor-c/subscriptions", {"subscriptions": [{"selector": DENM_HERE}]})
    _, redirect = await actor_c.post("/actor-c/subscriptions", {"subscriptions": [
        {"selector": DENM_HERE, "consumerCommonName": "actor-c"}]})
    path = redirect["subscriptions"][0]["path"]

    async def remote_endpoint() -> dict[str, Any] | None:
        _, body = await actor_c.get(path)
        remote = [e for e in body["endpoints"] if e["port"] == nodes[A].amqps_port]
        return remote[0] if body["status"] == "CREATED" and remote else None

    endpoint = await wait_for(remote_endpoint, "A's endpoint in the redirected subscription")
    outgoing = nodes[C].ii.status()["outgoing"]
    assert [(o["neighbour"], o["consumerCommonName"]) for o in outgoing] == [(A, "actor-c")]
    assert (await actor_c.get(plain["subscriptions"][0]["path"]))[1]["endpoints"] == plain["subscriptions"][0]["endpoints"]
    # the actor connects to A itself, with its own certificate
    consumer = await asyncio.to_thread(Consumer, pki, "actor-c", endpoint["port"], A, endpoint["source"])
    try:
        await asyncio.to_thread(publish, pki, "actor-a", nodes[A].amqps_port, A, target_a,
                                [denm_message(body=b"direct")])
        got = await asyncio.to_thread(consumer.receive)
        assert got is not None and bytes(got.body) == b"direct"
    finally:
        await asyncio.to_thread(consumer.close)


async def test_subscriber_restart_restores_subscriptions_and_links(federation: Federation) -> None:
    pki, nodes = federation.pki, federation.nodes
    actor_a, actor_c = federation.https("actor-a", A), federation.https("actor-c", C)
    target_a = await register_publisher(actor_a, denm_capability())
    await wait_for(lambda: nodes[C].ii.neighbour_capabilities(A), "capabilities at C")
    _, body = await actor_c.post("/actor-c/subscriptions", {"subscriptions": [{"selector": DENM_HERE}]})
    source = body["subscriptions"][0]["endpoints"][0]["source"]
    await wait_for(lambda: any(link["connected"] for o in nodes[C].ii.status()["outgoing"] for link in o["links"]), "link")
    _, before = await federation.https(C, A).get(f"/{C}/subscriptions")
    federation.clients.remove(actor_c)
    await actor_c.close()
    await federation.stop(C)
    await federation.start(C)
    await wait_for(lambda: any(link["connected"] for o in nodes[C].ii.status()["outgoing"] for link in o["links"]),
                   "link after the restart")
    _, after = await federation.https(C, A).get(f"/{C}/subscriptions")
    assert after == before  # IP_106: the restored subscription is not requested again
    assert await relay(pki, "actor-a", nodes[A], target_a, [denm_message(body=b"after restart")],
                       "actor-c", nodes[C], source, count=1) == [b"after restart"]
    # A crash after the POST to A but before its answer was committed: the row is still NEW. After
    # the restart C finds its subscription in A's list (IP_107) instead of requesting a second one.
    await federation.stop(C)
    with Store.open(federation.workdir / C) as store:
        (row,) = store.outgoing.list(A)
        store.outgoing.update(row.id, status="NEW", remote_id=None, remote_path=None, endpoints=[])
    await federation.start(C)
    await wait_for(lambda: any(link["connected"] for o in nodes[C].ii.status()["outgoing"] for link in o["links"]),
                   "link after the second restart")
    _, adopted = await federation.https(C, A).get(f"/{C}/subscriptions")
    assert adopted == before


async def test_neighbours_are_persisted_and_listed_and_capabilities_reposted(
        pki: TestPki, tmp_path: Path, dnsmasq: DnsmasqServer, capsys: pytest.CaptureFixture[str]) -> None:
    from interchange.app.cli import main

    made = await make_federation(pki, tmp_path, dnsmasq, {A: {"capability_repost_s": 0.2}})
    try:
        nodes = made.nodes
        await wait_for(lambda: all(len(n.ii.neighbours) == 2 for n in nodes.values()), "every node found the others")
        # IP_091: re-posted at the configured interval even without a change
        await wait_for(lambda: nodes[A].ii.pusher_state(C) is not None and nodes[A].ii.pusher_state(C).pushes >= 4,
                       "periodic capability posts from A")
        assert await asyncio.to_thread(main, ["neighbours", "--data-dir", str(tmp_path / A)]) == 0
        out = capsys.readouterr().out
        assert B in out and C in out and A not in out.split("\n", 1)[1]
        assert str(made.ii_ports[C]) in out and "127.0.0.1" in out
    finally:
        await made.close()


def _links_up(node: RunningNode, neighbour: str) -> bool:
    return any(link["connected"] for o in node.ii.status()["outgoing"] if o["neighbour"] == neighbour
               for link in o["links"])


def _events(workdir: Path, name: str) -> list[dict[str, Any]]:
    log = workdir / "node.log"
    records = complete_records(log) if log.is_file() else []
    return [record for record in records if record.get("event") == name]


async def test_a_neighbour_that_leaves_dns_is_cut_off_and_subscribes_anew_when_back(
        pki: TestPki, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    grace = {name: {"neighbour_grace_s": 2.0} for name in INTERCHANGES}
    federation = await make_federation(pki, tmp_path, request.getfixturevalue("dnsmasq"), grace)
    try:
        nodes = federation.nodes
        actor_a, actor_b = federation.https("actor-a", A), federation.https("actor-b", B)
        target_a = await register_publisher(actor_a, denm_capability())
        await register_publisher(actor_b, denm_capability(publisher="SE00001", country="SE"))
        await wait_for(lambda: nodes[A].ii.neighbour_capabilities(B) and nodes[B].ii.neighbour_capabilities(A),
                       "capabilities exchanged")
        await actor_a.post("/actor-a/subscriptions", {"subscriptions": [{"selector": DENM_HERE + " AND "
                                                                          "originatingCountry = 'SE'"}]})
        _, sub_b = await actor_b.post("/actor-b/subscriptions", {"subscriptions": [{"selector": DENM_HERE + " AND "
                                                                                    "originatingCountry = 'NO'"}]})
        await wait_for(lambda: _links_up(nodes[A], B) and _links_up(nodes[B], A), "data links both ways")
        with Store.open(tmp_path / A, read_only=True) as store:
            (before,) = store.incoming.list(B)
        assert before.source_address is not None
        # B leaves DNS: A refuses it (IP_126), drops our subscription at B at once (it cannot be reached to
        # DELETE it), and keeps B's subscription here for the grace period only
        federation.dns.reconfigure(DnsRecords(srv=[Srv(DOMAIN, n, federation.ii_ports[n]) for n in (A, C)],
                                              hosts={A: "127.0.0.1", C: "127.0.0.1"}))
        await nodes[A].ii.discover_now()
        assert not nodes[A].ii.is_neighbour(B)
        assert nodes[A].addresses.source(before.source_address) is not None
        await wait_for(lambda: not [o for o in nodes[A].ii.status()["outgoing"] if o["neighbour"] == B],
                       "A's subscription at B stopped")
        finished = await wait_for(lambda: [e["details"]["reason"] for e in _events(tmp_path / A, "ii_subscription_finished")
                                           if e["details"]["neighbour"] == B], "the event")
        assert finished == ["the neighbour is no longer discovered in DNS"]
        with Store.open(tmp_path / A, read_only=True) as store:
            assert store.outgoing.list(B) == []
        await wait_for(lambda: nodes[A].addresses.source(before.source_address) is None, "B's source at A removed")
        with Store.open(tmp_path / A, read_only=True) as store:
            assert store.incoming.list(B) == []
        # B is back: A pushes its capabilities, B polls at once, gets 404 and subscribes anew; A asks B anew
        federation.dns.reconfigure(DnsRecords(srv=[Srv(DOMAIN, n, p) for n, p in federation.ii_ports.items()],
                                              hosts={n: "127.0.0.1" for n in INTERCHANGES}))
        await nodes[A].ii.discover_now()

        def subscribed_anew() -> bool:
            with Store.open(tmp_path / A, read_only=True) as store:
                rows = store.incoming.list(B)
            return [r.status for r in rows] == ["CREATED"] and rows[0].id != before.id

        await wait_for(subscribed_anew, "B's new subscription at A")
        await wait_for(lambda: _links_up(nodes[A], B) and _links_up(nodes[B], A), "data links both ways again")
        source_b = sub_b["subscriptions"][0]["endpoints"][0]["source"]
        assert await relay(pki, "actor-a", nodes[A], target_a, [denm_message(body=b"after the return")],
                           "actor-b", nodes[B], source_b, count=1) == [b"after the return"]
    finally:
        await federation.close()
