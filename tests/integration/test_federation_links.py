"""Federation data links: our node pulls a neighbour's source into its own broker (4.2.8, IP_109)."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

from certs import TestPki
from certs.tls import TlsFiles, client_context
from ii_api.peers.federation import Federation, RemoteEndpoint
from interchange.broker.addresses import Scope, SourceSpec, TargetSpec
from interchange.broker.client import ClientConnection
from interchange.testing.broker_harness import BROKER_CN, denm, start_broker

LOCAL = "neighbour.interchange.test"  # the pulling node's own name and certificate


def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


def test_pull_routes_imported_messages_to_local_sources_only(pki: TestPki, tmp_path: Path) -> None:
    remote = start_broker(pki, tmp_path / "remote", [TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                          [SourceSpec(address="sub-1", consumers=frozenset({LOCAL}), scope=Scope.LOCAL,
                                      selector="messageType = 'DENM'")])
    local = start_broker(pki, tmp_path / "local", [], [
        SourceSpec(address="actor-2-all", consumers=frozenset({"actor-2"})),
        SourceSpec(address="to-third", consumers=frozenset({"actor-3"}), scope=Scope.LOCAL),
    ])
    files = TlsFiles.from_pki(pki.directory, LOCAL)
    federation = local.call(lambda: Federation(local.node.core, lambda: client_context(files), LOCAL,
                                               min_backoff=0.05))
    try:
        local.call(lambda: federation.pull("s1", [RemoteEndpoint(BROKER_CN, "127.0.0.1", remote.port, "sub-1")]))
        _wait(lambda: local.call(lambda: federation.status["s1"][0].connected))
        publisher = remote.connect("actor-1")
        sender = publisher.create_sender("in")
        sender.send(denm(body=b"imported"))
        publisher.close()
        _wait(lambda: local.call(lambda: federation.status["s1"][0].received) == 1)
        consumer = local.connect("actor-2")
        receiver = consumer.create_receiver("actor-2-all", credit=5)
        assert bytes(receiver.receive(timeout=5).body) == b"imported"
        receiver.accept()
        consumer.close()
        # IP_109: never served to another interchange
        assert local.call(lambda: local.node.core.sources["to-third"].depth) == 0
        assert local.call(lambda: local.node.core.sources["to-third"].enqueued) == 0
        # Stopping the pull closes the connection to the neighbour.
        local.call(lambda: federation.stop("s1"))
        _wait(lambda: remote.call(lambda: len(remote.node.server.connections)) == 0)
    finally:
        local.run(federation.close())
        local.stop()
        remote.stop()


def test_refused_link_is_retried_and_reported(pki: TestPki, tmp_path: Path) -> None:
    remote = start_broker(pki, tmp_path / "remote", [], [SourceSpec(address="other", consumers=frozenset({"x"}))])
    local = start_broker(pki, tmp_path / "local", [], [])
    files = TlsFiles.from_pki(pki.directory, LOCAL)
    federation = local.call(lambda: Federation(local.node.core, lambda: client_context(files), LOCAL,
                                               min_backoff=0.05, max_backoff=0.1))
    try:
        local.call(lambda: federation.pull("s", [RemoteEndpoint(BROKER_CN, "127.0.0.1", remote.port, "other")]))
        _wait(lambda: local.call(lambda: federation.status["s"][0].connects) >= 2)
        error = local.call(lambda: federation.status["s"][0].last_error)
        assert error is not None and "unauthorized-access" in error
    finally:
        local.run(federation.close())
        local.stop()
        remote.stop()


def test_close_cancelled_as_the_connection_drops_still_ends_cancelled(pki: TestPki, tmp_path: Path) -> None:
    """A federation link stopped at the moment its neighbour dropped the connection must stop.
    Python 3.11's ``asyncio.wait_for`` returns normally when its task is cancelled just as the awaited
    future completes; ``ClientConnection.close`` used it, so such a link went on retrying and
    ``Federation.close`` never returned (a CI run, 2026-11-26)."""
    remote = start_broker(pki, tmp_path / "remote", [], [])
    files = TlsFiles.from_pki(pki.directory, LOCAL)

    async def close_cancelled_as_lost() -> bool:
        connection = await ClientConnection.open("127.0.0.1", remote.port, client_context(files), BROKER_CN, LOCAL)
        closing = asyncio.ensure_future(connection.close())
        await asyncio.sleep(0)  # closing now waits for the neighbour's close
        connection.abort()  # the connection drops ...
        while not connection.lost.done():
            await asyncio.sleep(0)
        closing.cancel()  # ... and, in the same turn of the loop, the link is stopped
        try:
            await closing
        except asyncio.CancelledError:
            return True
        return False

    try:
        assert asyncio.run(close_cancelled_as_lost())
    finally:
        remote.stop()
