"""Two federated interchanges with traffic, for the monitoring tests (tests/integration/test_monitoring_live.py,
tests/integration/test_federation_view.py): node A publishes (its actor's DENMs, through a delivery), node B's
actor subscribes to them, so B holds a subscription at A, A a subscription of B, and B pulls over
a federation link into its actor's source, drained by a consumer. Neighbours are seeded in the II
stores (DNS is not the subject here)."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from certs import TestPki
from ii_api.peers.discovery import Neighbour
from interchange.app.config import NodeConfig
from interchange.app.node import RunningNode
from interchange.ground.ports import free_port
from interchange.testing.ii_harness import (
    DOMAIN,
    WAIT_S,
    Consumer,
    Https,
    amqp_connect,
    denm_capability,
    denm_message,
    node_config,
    seed_neighbours,
    start,
    wait_for,
)

SELECTOR = "messageType = 'DENM'"


class Publisher:
    """Sends a DENM every ``interval_s`` from a worker thread until stopped."""

    def __init__(self, pki: TestPki, cn: str, node: str, port: int, target: str, interval_s: float = 0.01) -> None:
        self.args = (pki, cn, port, node, target)
        self.interval_s = interval_s
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        pki, cn, port, name, target = self.args
        try:
            connection = amqp_connect(pki, cn, port, name)
            sender = connection.create_sender(target)
            while not self._stop.is_set():
                sender.send(denm_message(body=f"m-{self.sent}".encode()))
                self.sent += 1
                self._stop.wait(self.interval_s)
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


class Drain:
    """Takes what arrives on one source, from a worker thread, until stopped."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.consumer.receive(0.2) is not None:
                self.received += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        self.consumer.close()


@dataclass
class Pair:
    pki: TestPki
    a: RunningNode
    b: RunningNode
    actor: str
    clients: list[Https] = field(default_factory=list)
    publisher: Publisher | None = None
    drain: Drain | None = None

    async def close(self) -> None:
        if self.publisher is not None:
            await asyncio.to_thread(self.publisher.stop)
        if self.drain is not None:
            await asyncio.to_thread(self.drain.stop)
        for client in self.clients:
            await client.close()
        for node in (self.b, self.a):
            await node.close()


async def start_pair(pki: TestPki, workdir: Path, a: str, b: str, actor: str, *,
                     adapt_a: Callable[[NodeConfig], NodeConfig] = lambda c: c,
                     adapt_b: Callable[[NodeConfig], NodeConfig] = lambda c: c,
                     extra_neighbours: tuple[Neighbour, ...] = ()) -> Pair:
    """A and B started and seeded as each other's neighbours (plus ``extra_neighbours`` at B)."""
    ports = {a: free_port(), b: free_port()}
    configs = {name: node_config(pki, name, workdir / name, ii_port=ports[name]) for name in (a, b)}
    seed_neighbours(workdir / a, [Neighbour(b, "127.0.0.1", ports[b], DOMAIN)])
    seed_neighbours(workdir / b, [Neighbour(a, "127.0.0.1", ports[a], DOMAIN), *extra_neighbours])
    node_a = await start(adapt_a(configs[a]))
    try:
        node_b = await start(adapt_b(configs[b]))
    except BaseException:
        await node_a.close()
        raise
    return Pair(pki, node_a, node_b, actor)


async def federate(pair: Pair, subscription_selector: str = SELECTOR) -> None:
    """A's actor publishes DENMs through a delivery; B's actor subscribes (``subscription_selector``);
    returns once B's subscription at A is CREATED, its link connected and data arrives at B."""
    at_a, at_b = Https(pair.pki, pair.actor, pair.a), Https(pair.pki, pair.actor, pair.b)
    pair.clients += [at_a, at_b]
    status, _ = await at_a.post(f"/{pair.actor}/capabilities", {"capabilities": [denm_capability()]})
    assert status == 200
    status, body = await at_a.post(f"/{pair.actor}/deliveries", {"deliveries": [{"selector": SELECTOR}]})
    assert status == 200 and body["deliveries"][0]["status"] == "CREATED", body
    endpoint = body["deliveries"][0]["endpoints"][0]
    ii_b = pair.b.ii
    assert ii_b is not None
    await wait_for(lambda: ii_b.neighbour_capabilities(pair.a.config.name), "A's capabilities at B")
    status, body = await at_b.post(f"/{pair.actor}/subscriptions",
                                   {"subscriptions": [{"selector": subscription_selector}]})
    assert status == 200, body
    path = f"/{pair.actor}/subscriptions/{body['subscriptions'][0]['id']}"

    async def endpoints() -> list[dict[str, object]]:
        return (await at_b.get(path))[1]["endpoints"]
    source = str((await wait_for(endpoints, "the endpoints of B's actor's subscription"))[0]["source"])
    await wait_for(lambda: any(o["status"] == "CREATED" and o["links"] and all(link["connected"] for link in o["links"])
                               for o in ii_b.status()["outgoing"]), "B's subscription at A with its link up")
    assert pair.b.amqps_port is not None
    consumer = await asyncio.to_thread(Consumer, pair.pki, pair.actor, pair.b.amqps_port, pair.b.config.name, source)
    pair.drain = Drain(consumer)
    pair.publisher = Publisher(pair.pki, pair.actor, pair.a.config.name, endpoint["port"], endpoint["target"]).start()
    drain = pair.drain
    await wait_for(lambda: drain.received > 3, "messages from A at B's actor")
