"""A closed BI or II connection leaves no reference cycle of the node's objects behind: its engine, links, TLS and
SASL state are freed by their reference counts when it goes, so a burst of closed connections never waits
for a full collection of the collector (tens of milliseconds of the event loop's time per thousand
connections). Real TLS connections to a node in this process; the collector is off while they come and go,
then asked what it would have had to find."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from proton import Message

from certs import TestPki
from certs.tls import TlsFiles, client_context
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.testing.broker_harness import BROKER_CN, BrokerUnderTest, client_connection, denm, start_broker
from interchange.testing.ii_harness import A, Https, node_config, start

OURS = ("interchange", "ii_api", "certs")


@pytest.fixture
def broker(pki: TestPki, tmp_path: Path) -> Iterator[BrokerUnderTest]:
    started = start_broker(pki, tmp_path, targets=[TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                           sources=[SourceSpec(address="out", consumers=frozenset({"actor-1"}))])
    try:
        yield started
    finally:
        started.stop()


def _cycles_of_ours() -> Counter[str]:
    """The node's objects that only the collector could free now (it is off: they would wait for it)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return Counter(type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith(OURS))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_closed_connections_leave_no_cycles_of_the_node_s_objects(broker: BrokerUnderTest, pki: TestPki) -> None:
    gc.collect()
    gc.disable()
    try:
        for i in range(20):  # whole AMQP connections with a publisher and a consumer
            connection = client_connection(pki, "actor-1", broker.port)
            try:
                receiver = connection.create_receiver("out")
                connection.create_sender("in").send(denm(body=f"m{i}".encode()))
                got = receiver.receive(timeout=10)
                assert isinstance(got, Message) and got.body == f"m{i}".encode()
                receiver.accept()
            finally:
                connection.close()
        context = client_context(TlsFiles.from_pki(pki.directory, "actor-1", with_crls=False))
        for _ in range(20):  # TLS only, then gone before any AMQP
            with context.wrap_socket(socket.create_connection(("127.0.0.1", broker.port)), server_hostname=BROKER_CN):
                pass
        deadline = time.monotonic() + 10
        while broker.call(lambda: len(broker.node.server.connections)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broker.call(lambda: len(broker.node.server.connections)) == 0
        left = _cycles_of_ours()
    finally:
        gc.enable()
    assert not left, f"objects of closed connections left to the collector: {dict(left)}"


async def test_closed_ii_connections_leave_no_cycles_of_the_node_s_objects(pki: TestPki, tmp_path: Path) -> None:
    """The II's side: requests answered on connections the client then closes, and connections that go in
    the middle of a request's headers."""
    node = await start(node_config(pki, A, tmp_path / "a"))
    try:
        gc.collect()
        gc.disable()
        try:
            for _ in range(10):
                client = Https(pki, "actor-a", node)
                status, _ = await client.get("/actor-a/subscriptions")
                assert status == 200
                await client.close()
            context = client_context(TlsFiles.from_pki(pki.directory, "actor-a", with_crls=False))
            for _ in range(10):
                reader, writer = await asyncio.open_connection("127.0.0.1", node.ii_port, ssl=context,
                                                               server_hostname=A)
                writer.write(b"GET /actor-a/subscriptions HTTP/1.1\r\nHost: a\r\n")  # no blank line: headers unfinished
                await writer.drain()
                writer.close()
                with contextlib.suppress(ConnectionError, ssl.SSLError):
                    await writer.wait_closed()
            await asyncio.sleep(0.5)  # the node's side of each connection is lost meanwhile
            left = _cycles_of_ours()
        finally:
            gc.enable()
    finally:
        await node.close()
    assert not left, f"objects of closed II connections left to the collector: {dict(left)}"
