"""The node's own AMQP client (federation): TLS 1.3 + SASL EXTERNAL + proton engine in client mode,
against our broker."""
from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from certs import TestPki
from certs.tls import TlsFiles, client_context
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.client import ClientConnection
from interchange.testing.broker_harness import BROKER_CN, denm, start_broker

NEIGHBOUR = "neighbour.interchange.test"


def test_receiver_link_gets_filtered_messages_byte_exact(pki: TestPki, tmp_path: Path) -> None:
    broker = start_broker(pki, tmp_path, [TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                          [SourceSpec(address="for-neighbour", consumers=frozenset({NEIGHBOUR}))])
    try:
        context = client_context(TlsFiles.from_pki(pki.directory, NEIGHBOUR))
        received: list[bytes] = []
        got_two = asyncio.Event()

        async def scenario() -> tuple[str | None, str | None]:
            conn = await ClientConnection.open("127.0.0.1", broker.port, context, BROKER_CN, "neighbour")

            def on_message(raw: bytes) -> None:
                received.append(raw)
                if len(received) == 2:
                    got_two.set()

            state = conn.open_receiver("for-neighbour", on_message, selector="causeCode = 2")
            refused = conn.open_receiver("no-such-source", lambda raw: None)
            await asyncio.sleep(0.2)
            await asyncio.to_thread(publish)
            await asyncio.wait_for(got_two.wait(), 10)
            await asyncio.sleep(0.1)
            await conn.close()
            return state.error, refused.error

        messages = [denm(causeCode=1, body=b"one"), denm(causeCode=2, body=b"two"), denm(causeCode=2, body=b"three")]

        def publish() -> None:
            conn = broker.connect("actor-1")
            sender = conn.create_sender("in")
            for m in messages:
                sender.send(m)
            conn.close()

        ok_error, refused_error = asyncio.run(scenario())
        assert ok_error is None
        assert refused_error is not None and refused_error.startswith("amqp:not-found")
        assert received == [bytes(messages[1].encode()), bytes(messages[2].encode())]
    finally:
        broker.stop()


def test_client_refused_without_grant_or_trust(pki: TestPki, tmp_path: Path) -> None:
    broker = start_broker(pki, tmp_path, [], [SourceSpec(address="s", consumers=frozenset({"actor-9"}))])
    try:
        context = client_context(TlsFiles.from_pki(pki.directory, NEIGHBOUR))

        async def scenario() -> str | None:
            conn = await ClientConnection.open("127.0.0.1", broker.port, context, BROKER_CN, "neighbour")
            state = conn.open_receiver("s", lambda raw: None)
            for _ in range(100):
                if state.closed:
                    break
                await asyncio.sleep(0.02)
            await conn.close()
            return state.error

        error = asyncio.run(scenario())
        assert error is not None and error.startswith("amqp:unauthorized-access")

        async def wrong_name() -> None:
            await ClientConnection.open("127.0.0.1", broker.port, context, "other.interchange.test", "n")

        with pytest.raises(ssl.SSLCertVerificationError):
            asyncio.run(wrong_name())  # the server certificate does not carry that name
    finally:
        broker.stop()
