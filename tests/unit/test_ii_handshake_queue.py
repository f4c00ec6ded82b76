"""The II's TLS termination (ii_api.http.tls_site) runs handshake steps in a HandshakeQueue's turns (its
``loop`` mode; on the worker: tests/unit/test_handshake_worker.py),
not in ``data_received``, while an established connection's requests are served at once; a
connection closed while it waits is skipped. Real TLS in memory (no sockets), a budget of 0 (one step
per loop turn)."""
from __future__ import annotations

import asyncio

from certs import TestPki
from certs.tls import client_context, server_context
from ii_api.http.tls_site import TlsServerProtocol
from interchange.broker.handshake_queue import HandshakeQueue
from interchange.testing.pki_fixtures import ACTOR, SERVER, files_for
from interchange.testing.memory_transport import MemoryTlsClient, MemoryTransport

TIMEOUTS = (10.0, 10.0, 10.0)  #: handshake, headers, body: none passes in these tests


class Inner(asyncio.Protocol):
    """Stands for aiohttp's request handler: records what reached it in plaintext."""

    def __init__(self) -> None:
        self.made = False
        self.data = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made = True

    def data_received(self, data: bytes) -> None:
        self.data += data


class Connection:
    def __init__(self, pki: TestPki, queue: HandshakeQueue) -> None:
        self.inner, self.raw = Inner(), MemoryTransport()
        self.server = TlsServerProtocol(lambda: self.inner, server_context(files_for(pki, SERVER)),
                                        lambda *_: None, None, TIMEOUTS, queue)
        self.client = MemoryTlsClient(client_context(files_for(pki, ACTOR)), SERVER)
        self.server.connection_made(self.raw)


async def turn(queue: HandshakeQueue) -> None:
    """Until the queue's next turn ran (a budget of 0: one step)."""
    stepped = queue.stepped
    for _ in range(100):
        if queue.stepped != stepped:
            return
        await asyncio.sleep(0)
    raise AssertionError("no handshake turn ran")


def test_handshake_steps_wait_for_the_queue_and_an_established_connection_does_not(pki_main: TestPki) -> None:
    async def main() -> None:
        queue = HandshakeQueue(budget_s=0.0, thread="loop")
        first = Connection(pki_main, queue)
        first.server.data_received(first.client.step())  # ClientHello
        assert first.raw.out == b"" and len(queue) == 1  # not in data_received: in the queue's turn
        await turn(queue)
        assert first.raw.out and len(queue) == 0  # ServerHello ... server Finished
        first.server.data_received(first.client.step(first.raw.take()))  # client certificate, Finished
        assert not first.inner.made
        await turn(queue)
        assert first.inner.made and first.client.obj.version() == "TLSv1.3"

        arriving = [Connection(pki_main, queue) for _ in range(3)]
        for connection in arriving:
            connection.server.data_received(connection.client.step())
        assert len(queue) == 3 and all(c.raw.out == b"" for c in arriving)
        # an established connection's request is served at once, ahead of the waiting handshakes
        first.server.data_received(first.client.send(b"GET / HTTP/1.1\r\n\r\n"))
        assert first.inner.data == b"GET / HTTP/1.1\r\n\r\n" and len(queue) == 3
        await turn(queue)  # a budget of 0: one step per turn, in arrival order
        assert [bool(c.raw.out) for c in arriving] == [True, False, False]
        arriving[1].raw.close()  # closed while waiting (its deadline, the peer): skipped
        await turn(queue)
        assert [bool(c.raw.out) for c in arriving] == [True, False, False] and len(queue) == 1
        await turn(queue)
        assert [bool(c.raw.out) for c in arriving] == [True, False, True] and len(queue) == 0
        assert queue.stepped == 5

    asyncio.run(main())


def test_input_arriving_while_queued_is_fed_in_one_step(pki_main: TestPki) -> None:
    async def main() -> None:
        queue = HandshakeQueue(budget_s=0.0, thread="loop")
        connection = Connection(pki_main, queue)
        hello = connection.client.step()
        connection.server.data_received(hello[:10])
        connection.server.data_received(hello[10:])  # the rest of the ClientHello, same turn
        assert len(queue) == 1
        await turn(queue)
        connection.server.data_received(connection.client.step(connection.raw.take()))
        await turn(queue)
        assert connection.inner.made and not connection.raw.closed and queue.stepped == 2

    asyncio.run(main())
