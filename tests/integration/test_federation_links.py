"""Federation data links: our node pulls a neighbour's source into its own broker (4.2.8, IP_109)."""
from __future__ import annotations

import asyncio
import threading
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


class Relay:
    """A TCP relay in its own thread between a link and the neighbour's port that can go silent:
    ``freeze()`` stops forwarding both ways and leaves the sockets open (a half-open connection, a
    partition), ``thaw()`` forwards again (new connections only: the frozen ones stay silent)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.frozen = False
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        threading.Thread(target=self._main, daemon=True).start()
        self._ready.wait(10)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.frozen:
            return  # accepted and left silent
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if not self.frozen:
                writer.write(data)
        writer.close()

    def freeze(self) -> None:
        self.frozen = True

    def thaw(self) -> None:
        self.frozen = False


IDLE_S = 2.0  #: the links' idle time-out (the neighbour's broker sends its empty frames from a 1-s tick)


def test_silent_neighbour_detected_by_the_idle_timeout_and_logged(pki: TestPki, tmp_path: Path) -> None:
    """AMQP's idle time-out on the link: a neighbour that goes silent without closing is dropped within
    twice the time-out, ``federation_link_down`` says why, and the link is built again once it
    answers (``federation_link_up``); a refused link is logged and told to the link's owner."""
    remote = start_broker(pki, tmp_path / "remote", [TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                          [SourceSpec(address="sub-1", consumers=frozenset({LOCAL}), scope=Scope.LOCAL)])
    local = start_broker(pki, tmp_path / "local", [], [SourceSpec(address="all", consumers=frozenset({"actor-2"}))])
    relay = Relay(remote.port)
    files = TlsFiles.from_pki(pki.directory, LOCAL)
    events: list[tuple[float, str, dict]] = []
    downs: list[tuple[str, str]] = []
    federation = local.call(lambda: Federation(
        local.node.core, lambda: client_context(files), LOCAL, min_backoff=0.05, max_backoff=0.2, idle_timeout_s=IDLE_S,
        events=lambda level, kind, fields: events.append((time.monotonic(), kind, fields)),
        on_down=lambda endpoint, reason: downs.append((endpoint.source, reason))))
    try:
        local.call(lambda: federation.pull("s", [RemoteEndpoint(BROKER_CN, "127.0.0.1", relay.port, "sub-1")]))
        _wait(lambda: [kind for _, kind, _ in events] == ["federation_link_up"])
        time.sleep(2 * IDLE_S)  # quiet, but alive: empty frames keep the link up past the time-out
        assert [kind for _, kind, _ in events] == ["federation_link_up"]
        silenced = time.monotonic()
        relay.freeze()
        _wait(lambda: any(kind == "federation_link_down" for _, kind, _ in events), timeout=3 * IDLE_S)
        at, _, down = next(e for e in events if e[1] == "federation_link_down")
        assert at - silenced <= 2 * IDLE_S, at - silenced  # within twice the time-out
        assert "idle-timeout" in down["reason"] and down["source"] == "sub-1" and down["neighbour"] == BROKER_CN
        assert downs and downs[0][0] == "sub-1"
        relay.thaw()
        _wait(lambda: sum(kind == "federation_link_up" for _, kind, _ in events) == 2, timeout=5)
        local.call(lambda: federation.pull("s", [RemoteEndpoint(BROKER_CN, "127.0.0.1", remote.port, "other")]))
        _wait(lambda: any("no source 'other'" in reason for _, reason in downs))
        refused = [f for _, kind, f in events if kind == "federation_link_down" and f["source"] == "other"]
        assert refused and refused[0]["reason"] == "amqp:not-found: no source 'other'"
    finally:
        local.run(federation.close())
        relay.loop.call_soon_threadsafe(relay.loop.stop)
        local.stop()
        remote.stop()
