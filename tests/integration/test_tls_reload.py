"""Certificates and CRLs without a restart. A reload (admin ``POST /tls/reload``, SIGHUP)
applies new certificate, key and CRLs to new connections on BI and II; open connections stay,
except those whose certificate the new CRL revokes (closed with a reason, logged)."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from proton import ConnectionException
from proton.utils import BlockingConnection, LinkDetached

from certs import TestPki, create_test_pki
from certs.revocation import Revocations
from certs.tls import TlsFiles, client_context
from ii_api.peers.discovery import DiscoveryConfig
from interchange.app.config import AdminConfig, NodeConfig
from interchange.app.node import RunningNode
from interchange.ground.ports import free_port
from interchange.testing.broker_harness import complete_records, start_node_process, terminate, tls_exchange
from interchange.testing.dns_fixtures import DnsmasqServer, DnsRecords, Srv
from interchange.testing.ii_harness import (
    DOMAIN,
    WAIT_S,
    A,
    B,
    Https,
    amqp_connect,
    denm_capability,
    node_config,
    start,
    wait_for,
)
from interchange.testing.pki_fixtures import ACTOR, SERVER

OTHER_ACTOR = "actor-2"


def log_records(path: Path, event: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [r for r in complete_records(path) if r["event"] == event]


async def logged(path: Path, event: str, count: int = 1) -> list[dict[str, Any]]:
    """The ``event`` records once at least ``count`` are written (the log is written by its own thread)."""
    def enough() -> list[dict[str, Any]] | None:
        found = log_records(path, event)
        return found if len(found) >= count else None

    return await wait_for(enough, f"{count} {event} record(s) in {path.name}")


def admin_config(pki: TestPki, workdir: Path, **broker: Any) -> NodeConfig:
    config = node_config(pki, SERVER, workdir)
    return config.model_copy(update={"admin": AdminConfig(host="127.0.0.1", port=0),
                                     "broker": config.broker.model_copy(update=broker)})


async def post_reload(node: RunningNode) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://127.0.0.1:{node.admin_port}/tls/reload") as response:
            return response.status, await response.json()


def still_open(connection: BlockingConnection) -> str:
    """Use the connection: an attach to an unknown address is refused on a live connection
    (amqp:not-found); on a closed one the close's condition comes back instead."""
    try:
        connection.create_receiver("no-such-source")
    except (LinkDetached, ConnectionException) as exc:
        return str(exc)
    return "attached"


def sasl_answered(port: int, pki: TestPki, cn: str) -> bool:
    """Whether a new TLS connection as ``cn`` gets as far as the broker's SASL header."""
    data, _closed = tls_exchange(port, client_context(TlsFiles.from_pki(pki.directory, cn, with_crls=False),
                                                      check_hostname=False),
                                 b"AMQP\x03\x01\x00\x00")
    return data.startswith(b"AMQP")


def served_serial(port: int, pki: TestPki, cn: str) -> int:
    """The serial of the certificate the node presents to a new connection now."""
    context = client_context(TlsFiles.from_pki(pki.directory, cn, with_crls=False))
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as raw:
        with context.wrap_socket(raw, server_hostname=SERVER) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


async def test_reloaded_crl_closes_only_the_revoked_connections(pki_fresh: TestPki, tmp_path: Path) -> None:
    node = await start(admin_config(pki_fresh, tmp_path))
    assert node.amqps_port is not None
    revoked_bi = await asyncio.to_thread(amqp_connect, pki_fresh, ACTOR, node.amqps_port, SERVER)
    kept_bi = await asyncio.to_thread(amqp_connect, pki_fresh, OTHER_ACTOR, node.amqps_port, SERVER)
    revoked_ii, kept_ii = Https(pki_fresh, ACTOR, node), Https(pki_fresh, OTHER_ACTOR, node)
    try:
        assert (await revoked_ii.get(f"/{ACTOR}/capabilities"))[0] == 200  # keep-alive connections to the II
        assert (await kept_ii.get(f"/{OTHER_ACTOR}/capabilities"))[0] == 200
        pki_fresh.pki.revoke(pki_fresh.identity(ACTOR).serial)

        status, body = await post_reload(node)

        assert status == 200, body
        assert body["closed"] == {"bi": 1, "ii": 1} and body["revoked_serials"] == 1
        assert body["certificate"]["serial"] == f"{pki_fresh.identity(SERVER).serial:#x}"
        await wait_for(lambda: {c.identity for c in node.server.connections} == {OTHER_ACTOR},
                       "the revoked actor's BI connection to close")
        assert "unauthorized-access" in await asyncio.to_thread(still_open, revoked_bi)
        assert "not-found" in await asyncio.to_thread(still_open, kept_bi)  # alive: its attach got an answer
        with pytest.raises(aiohttp.ClientError):  # a new handshake: the new CRL refuses it
            await revoked_ii.get(f"/{ACTOR}/capabilities")
        assert (await kept_ii.get(f"/{OTHER_ACTOR}/capabilities"))[0] == 200
        assert not await asyncio.to_thread(sasl_answered, node.amqps_port, pki_fresh, ACTOR)  # new CRL: refused
        revoked = await logged(tmp_path / "node.log", "connection_revoked", 2)
        assert sorted(r["details"]["interface"] for r in revoked) == ["bi", "ii"]
        assert all("revoked by the CRL of" in r["details"]["reason"] for r in revoked)
        assert (await logged(tmp_path / "node.log", "tls_reloaded"))[0]["details"]["closed"] == {"bi": 1, "ii": 1}
    finally:
        await asyncio.to_thread(kept_bi.close)
        await revoked_ii.close()
        await kept_ii.close()
        await node.close()


async def test_rotated_certificate_serves_new_connections_and_keeps_open_ones(pki_fresh: TestPki,
                                                                               tmp_path: Path) -> None:
    node = await start(admin_config(pki_fresh, tmp_path))
    assert node.amqps_port is not None
    before = pki_fresh.identity(SERVER).serial
    connection = await asyncio.to_thread(amqp_connect, pki_fresh, ACTOR, node.amqps_port, SERVER)
    try:
        rotated = pki_fresh.pki.issue_server(SERVER)  # new key and certificate, same files
        status, body = await post_reload(node)
        assert status == 200, body
        assert body["certificate"]["serial"] == f"{rotated.serial:#x}" != f"{before:#x}"
        assert body["closed"] == {"bi": 0, "ii": 0}
        assert await asyncio.to_thread(served_serial, node.amqps_port, pki_fresh, ACTOR) == rotated.serial
        assert node.ii_port is not None
        assert await asyncio.to_thread(served_serial, node.ii_port, pki_fresh, ACTOR) == rotated.serial
        assert "not-found" in await asyncio.to_thread(still_open, connection)  # the open connection stayed
    finally:
        await asyncio.to_thread(connection.close)
        await node.close()


async def test_unusable_files_keep_the_previous_settings(pki_fresh: TestPki, tmp_path: Path) -> None:
    node = await start(admin_config(pki_fresh, tmp_path))
    assert node.amqps_port is not None
    crl = pki_fresh.crls[0]
    good = crl.read_bytes()
    try:
        crl.write_bytes(good[: len(good) // 2])  # a CRL cut short while being copied
        status, body = await post_reload(node)
        assert status == 422 and "previous settings stay in use" in body["error"] and str(crl) in body["error"]
        assert await logged(tmp_path / "node.log", "tls_reload_failed")
        connection = await asyncio.to_thread(amqp_connect, pki_fresh, ACTOR, node.amqps_port, SERVER)
        await asyncio.to_thread(connection.close)  # new connections are still served

        crl.write_bytes(good)
        other_key = pki_fresh.identity(OTHER_ACTOR).key.read_bytes()
        server_key = pki_fresh.identity(SERVER).key
        own_key = server_key.read_bytes()
        server_key.write_bytes(other_key)  # a key that does not belong to the certificate
        status, body = await post_reload(node)
        assert status == 422 and "previous settings stay in use" in body["error"]
        server_key.write_bytes(own_key)
        assert (await post_reload(node))[0] == 200
    finally:
        await node.close()


def test_revocations_match_issuer_and_serial(pki_fresh: TestPki) -> None:
    actor = x509.load_pem_x509_certificate(pki_fresh.identity(ACTOR).chain.read_bytes())
    other = x509.load_pem_x509_certificate(pki_fresh.identity(OTHER_ACTOR).chain.read_bytes())
    assert Revocations.load(pki_fresh.crls).lookup(actor) is None
    pki_fresh.pki.revoke(actor.serial_number, reason="key_compromise")
    revocations = Revocations.load(pki_fresh.crls)
    entry = revocations.lookup(actor)
    assert entry is not None and entry.serial == actor.serial_number and entry.reason == "key_compromise"
    assert revocations.lookup(other) is None
    root_listed = Revocations.load([pki_fresh.pki.crl_path("root")])  # another issuer's CRL
    assert root_listed.lookup(actor) is None
    with pytest.raises(ValueError, match="no PEM CRL"):
        Revocations.load([pki_fresh.trust_bundle])


def test_sighup_reloads_every_broker_process(pki_fresh: TestPki, tmp_path: Path) -> None:
    """A node with two broker processes, run as operators run it: SIGHUP reloads both; the revoked
    actor's connection to broker process 1 is closed by that process."""
    config = admin_config(pki_fresh, tmp_path, processes=2)
    config_path = tmp_path / "node.json"
    config_path.write_text(config.model_dump_json(), encoding="utf-8")
    process, line = start_node_process(config_path)
    try:
        worker_port = int(line.split("AMQPS port ")[1].split(",")[1])
        connection = amqp_connect(pki_fresh, ACTOR, worker_port, SERVER)
        pki_fresh.pki.revoke(pki_fresh.identity(ACTOR).serial)
        os.kill(process.pid, signal.SIGHUP)
        worker_log = tmp_path / "node.p1.log"
        deadline = time.monotonic() + WAIT_S
        while not (revoked := log_records(worker_log, "connection_revoked")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "unauthorized-access" in still_open(connection)
        assert [r["details"]["identity"] for r in revoked] == [ACTOR]
        main = log_records(tmp_path / "node.log", "tls_reloaded")
        assert main and main[0]["details"]["broker_processes_notified"] == 1
        assert log_records(worker_log, "tls_reloaded")[0]["details"]["closed"]["bi"] == 1
        assert process.poll() is None  # SIGHUP did not stop the node
        assert not sasl_answered(worker_port, pki_fresh, ACTOR)
        assert sasl_answered(worker_port, pki_fresh, OTHER_ACTOR)
    finally:
        terminate(process)


async def test_reloaded_crl_drops_federation_links_to_a_revoked_neighbour(tmp_path: Path,
                                                                           dnsmasq: DnsmasqServer) -> None:
    """The link our node opened to a neighbour's broker (4.2.8) is dropped when the reloaded CRLs
    revoke the neighbour's server certificate, logged (interface federation), and not re-opened:
    the new CRLs refuse the handshake on every retry."""
    pki = create_test_pki(tmp_path / "pki", [A, B], ["actor-a", "actor-b"])
    ports = {A: free_port(), B: free_port()}
    dnsmasq.start(DnsRecords(srv=[Srv(DOMAIN, name, port) for name, port in ports.items()],
                             hosts={name: "127.0.0.1" for name in ports}))
    assert dnsmasq.port is not None
    discovery = DiscoveryConfig(dns_server=dnsmasq.host, dns_port=dnsmasq.port, domains=(DOMAIN,), interval_s=1.0,
                                timeout_s=2.0)
    nodes = {name: await start(node_config(pki, name, tmp_path / name, ii_port=ports[name], discovery=discovery))
             for name in (A, B)}
    actor_a, actor_b = Https(pki, "actor-a", nodes[A]), Https(pki, "actor-b", nodes[B])
    try:
        assert (await actor_b.post("/actor-b/capabilities", {"capabilities": [denm_capability()]}))[0] == 200
        await wait_for(lambda: len(nodes[A].ii.neighbour_capabilities(B)) == 1, "B's capability at A")
        status, _ = await actor_a.post("/actor-a/subscriptions", {"subscriptions": [{"selector": "messageType = 'DENM'"}]})
        assert status == 200

        def links() -> list[Any]:
            return [link for runner in nodes[A].ii.outgoing.runners() for link in runner.links()]

        await wait_for(lambda: any(link.connected for link in links()), "A's federation link to B")
        pki.pki.revoke(pki.identity(B).serial)

        summary = await nodes[A].reload_tls()

        revoked = await logged(tmp_path / A / "node.log", "connection_revoked", summary["closed"]["ii"])
        links_revoked = [r["details"] for r in revoked if r["details"]["interface"] == "federation"]
        assert len(links_revoked) == 1 and links_revoked[0]["neighbour"] == B  # (and B's keep-alive HTTPS, if open)
        assert "revoked by the CRL of" in links_revoked[0]["reason"]
        await wait_for(lambda: all("certificate revoked" in (link.last_error or "") for link in links()),
                       "a reconnect refused by the new CRL")
        await asyncio.sleep(1.0)  # several retries later
        assert not any(link.connected for link in links()) and all(link.connects == 1 for link in links())
    finally:
        await actor_a.close()
        await actor_b.close()
        for node in nodes.values():
            await node.close()
