"""Helpers for the Improved Interface tests: nodes with the II on loopback, HTTPS clients with the
test PKI's certificates, AMQP actors, bounded waits.

Nodes run in the test's own event loop (pytest-asyncio); proton's blocking clients run in worker
threads (``asyncio.to_thread``) so that they never block the nodes.
"""
from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, overload

import aiohttp
from proton import Message
from proton.reactor import Selector
from proton.utils import BlockingConnection

from certs import TestPki
from certs.tls import TlsFiles, client_context
from ii_api.peers.discovery import DiscoveryConfig, Neighbour
from ii_api.settings.config import IIConfig
from ii_api.storage.store import MIGRATIONS, Store
from interchange.app.config import BrokerConfig, LogConfig, NodeConfig, TlsConfig
from interchange.app.node import RunningNode, start_node
from interchange.testing.broker_harness import complete_records
from interchange.testing.harness import A, B, C, amqp_client, body_bytes, denm

__all__ = ["A", "B", "C", "DOMAIN", "INTERCHANGES", "Consumer", "Https", "amqp_connect", "denm_capability", "denm_message",
           "ivim_capability", "node_config", "publish", "relay", "schema_1_database", "seed_neighbours", "start",
           "wait_for"]

INTERCHANGES = (A, B, C)  #: the II tests' federation
DOMAIN = "interchange.test"
WAIT_S = 20.0  # bound of every wait in these tests
T = TypeVar("T")


def node_config(pki: TestPki, name: str, workdir: Path, *, ii_port: int = 0, amqps_port: int = 0,
                discovery: DiscoveryConfig | None = None, **ii: Any) -> NodeConfig:
    identity = pki.identity(name)
    ii.setdefault("poll_interval_s", 300.0)
    ii.setdefault("retry_min_s", 0.1)
    ii.setdefault("retry_max_s", 1.0)
    ii.setdefault("federation_backoff_s", 0.1)
    return NodeConfig(
        name=name, data_dir=workdir,
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle,
                      crls=list(pki.crls)),
        broker=BrokerConfig(host="127.0.0.1", port=amqps_port),
        log=LogConfig(path=workdir / "node.log", level="info", properties=True, payload=False),
        ii=IIConfig(host="127.0.0.1", port=ii_port, public_host="127.0.0.1", discovery=discovery, **ii),
    )


def seed_neighbours(data_dir: Path, neighbours: Iterable[Neighbour]) -> None:
    """Record neighbours as if discovery had found them (used where DNS is not the subject)."""
    with Store.open(data_dir) as store:
        store.neighbours.upsert(list(neighbours))


def schema_1_database(path: Path) -> sqlite3.Connection:
    """A new II database as schema version 1 made it (before grants and departures were stored):
    its CREATE statements, which a migration never changes, and nothing newer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_ms INTEGER NOT NULL)")
    for statement in dict(MIGRATIONS)[1]:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (1, 0)")
    conn.commit()
    return conn


async def start(config: NodeConfig) -> RunningNode:
    return await asyncio.wait_for(start_node(config), WAIT_S)


@overload
async def wait_for(predicate: Callable[[], Awaitable[T]], what: str, timeout: float = WAIT_S) -> T: ...


@overload
async def wait_for(predicate: Callable[[], T], what: str, timeout: float = WAIT_S) -> T: ...


async def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Poll ``predicate`` (sync or async) until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.02)


def logged(node: RunningNode, event: str) -> list[dict[str, Any]]:
    """The details of every ``event`` record the node's log file holds now (whole lines only)."""
    records = complete_records(Path(node.config.log.path))  # type: ignore[arg-type]
    return [record["details"] for record in records if record["event"] == event]


async def wait_logged(node: RunningNode, event: str, count: int) -> list[dict[str, Any]]:
    """Wait for ``count`` ``event`` records in the log: the log's writer thread writes a moment after
    the event happened (lines are handed over in batches), so a count elsewhere can run ahead of it."""
    deadline = time.monotonic() + WAIT_S
    while len(found := logged(node, event)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S:g} s waiting for {count} {event!r} records in the log"
                                 f" ({len(found)} there)")
        await asyncio.sleep(0.02)
    return found


class Https:
    """An HTTPS client with one certificate of the test PKI, talking to one node's II."""

    def __init__(self, pki: TestPki, cn: str, node: RunningNode, *, timeout_s: float = WAIT_S) -> None:
        self.cn = cn
        self.node = node
        self._context = client_context(TlsFiles.from_pki(pki.directory, cn, with_crls=False))
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))

    @property
    def base(self) -> str:
        assert self.node.ii_port is not None and self.node.ii is not None
        return f"https://127.0.0.1:{self.node.ii_port}{self.node.ii.base}"

    async def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        """(status, parsed JSON or None) for ``method`` on ``path`` (relative to the base, or absolute)."""
        url = path if path.startswith("https://") else self.base + path
        kwargs: dict[str, Any] = {"ssl": self._context, "server_hostname": self.node.config.name, "params": params}
        if raw is not None:
            kwargs["data"] = raw
            kwargs["headers"] = {"Content-Type": "application/json"}
        elif body is not None:
            kwargs["json"] = body
        async with self._session.request(method, url, **kwargs) as response:
            data = await response.read()
            return response.status, json.loads(data) if data else None

    async def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        return await self.request("POST", path, body, **kwargs)

    async def delete(self, path: str) -> tuple[int, Any]:
        return await self.request("DELETE", path)

    async def close(self) -> None:
        await self._session.close()


# ------------------------------------------------------------------------------------- bodies
def denm_capability(publisher: str = "NO00001", publication: str = "denm-1", tiles: Iterable[str] = ("1202021",),
                    country: str = "NO", **metadata: Any) -> dict[str, Any]:
    return {"application": {"messageType": "DENM", "publisherId": publisher,
                            "publicationId": f"{publisher}:{publication}", "originatingCountry": country,
                            "protocolVersion": "DENM:1.3.1", "quadTree": list(tiles), "causeCode": [1, 2]},
            "metadata": metadata}


def ivim_capability(publisher: str = "NO00001", publication: str = "ivim-1", tiles: Iterable[str] = ("1202021",),
                    country: str = "NO") -> dict[str, Any]:
    return {"application": {"messageType": "IVIM", "publisherId": publisher,
                            "publicationId": f"{publisher}:{publication}", "originatingCountry": country,
                            "protocolVersion": "IVIM:1.2.1", "quadTree": list(tiles)},
            "metadata": {}}


def denm_message(publisher: str = "NO00001", publication: str = "denm-1", tile: str = "120202130121133020",
                 body: bytes = b"denm", cause: int = 1, country: str = "NO") -> Message:
    """A DENM of ``publisher``'s ``publication`` in ``tile`` (see :func:`harness.denm`)."""
    return denm(f",{tile},", body, publisherId=publisher, publicationId=f"{publisher}:{publication}",
                originatingCountry=country, causeCode=cause)


# ------------------------------------------------------------------------------------- AMQP actors
def amqp_connect(pki: TestPki, cn: str, port: int, server_name: str) -> BlockingConnection:
    """An actor's connection to the node ``server_name`` (see :func:`harness.amqp_client`)."""
    return amqp_client(pki, cn, port, server_name, WAIT_S)


def publish(pki: TestPki, cn: str, port: int, server_name: str, target: str, messages: Iterable[Message]) -> list[str]:
    """Send ``messages`` to ``target``; the outcome of each ('accepted' / the rejection)."""
    from proton import Delivery
    from proton.utils import SendException

    connection = amqp_connect(pki, cn, port, server_name)
    outcomes = []
    try:
        sender = connection.create_sender(target)
        for message in messages:
            try:
                sender.send(message)
                outcomes.append("accepted")
            except SendException as exc:
                outcomes.append("rejected" if exc.state == Delivery.REJECTED else str(exc.state))
    finally:
        connection.close()
    return outcomes


class Consumer:
    """A blocking receiver on one source, driven from a worker thread."""

    def __init__(self, pki: TestPki, cn: str, port: int, server_name: str, source: str,
                 selector: str | None = None) -> None:
        self.connection = amqp_connect(pki, cn, port, server_name)
        options = Selector(selector) if selector else None
        self.receiver = self.connection.create_receiver(source, credit=100, options=options)

    def receive(self, timeout: float = WAIT_S) -> Message | None:
        from proton import Timeout

        try:
            message = self.receiver.receive(timeout=timeout)
        except Timeout:
            return None
        self.receiver.accept()
        return message

    def close(self) -> None:
        self.connection.close()


async def relay(pki: TestPki, publisher: str, at: RunningNode, target: str, messages: Iterable[Message],
                consumer: str, node: RunningNode, source: str, *, count: int, quiet_s: float = 0.0) -> list[bytes]:
    """Attach ``consumer`` to ``source`` at ``node``, publish ``messages`` as ``publisher`` to ``target``
    at ``at`` (each must be accepted), and return the bodies of the first ``count`` messages received,
    plus one more if it arrives within ``quiet_s``."""
    assert node.amqps_port is not None and at.amqps_port is not None
    receiver = await asyncio.to_thread(Consumer, pki, consumer, node.amqps_port, node.config.name, source)
    try:
        sent = list(messages)
        outcomes = await asyncio.to_thread(publish, pki, publisher, at.amqps_port, at.config.name, target, sent)
        assert outcomes == ["accepted"] * len(sent), outcomes
        bodies: list[bytes] = []
        for _ in range(count):
            got = await asyncio.to_thread(receiver.receive)
            assert got is not None, f"timed out waiting for message {len(bodies) + 1} of {count}"
            bodies.append(body_bytes(got))
        if quiet_s and (extra := await asyncio.to_thread(receiver.receive, quiet_s)) is not None:
            bodies.append(body_bytes(extra))
        return bodies
    finally:
        await asyncio.to_thread(receiver.close)
