"""Where the IF2 bridge's RabbitMQ link connects (IF2 6.1: the broker and its virtual host), and the
properties of what it publishes (Table 4: the ttl as ``expiration``; not persistent; marked as ours),
and when a session sends its batched acks."""
from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from interchange.bridges.if2.amqp091 import Delivery
from interchange.bridges.if2.config import If2Config
from interchange.bridges.if2.rabbit import ACK_DELAY_S, RabbitLink, Session, outgoing


def link(url: str) -> RabbitLink:
    config = If2Config(url=url, actor="if2-bridge", tls={"cert_chain": Path("c"), "key": Path("k"),
                                                         "trust_bundle": Path("t")},
                       providers=[{"name": "RWS", "publisher_id": "NL00001", "coverage": ["1202"]}])
    return RabbitLink(config, ssl.create_default_context(), lambda *_: None, lambda *_: None)


@pytest.mark.parametrize(("url", "where"), [
    ("amqps://if2.example.nl:5671/production", ("if2.example.nl", 5671, True, "production")),
    ("amqps://if2.example.nl/production", ("if2.example.nl", 5671, True, "production")),
    ("amqp://127.0.0.1:5672", ("127.0.0.1", 5672, False, "/")),
    ("amqps://rabbit/%2F", ("rabbit", 5671, True, "/")),
    ("amqps://rabbit/dev%2Fif2", ("rabbit", 5671, True, "dev/if2")),
])
def test_host_port_tls_and_virtual_host_from_the_url(url: str, where: tuple[str, int, bool, str]) -> None:
    rabbit = link(url)
    assert (rabbit.host, rabbit.port, rabbit.tls, rabbit.vhost) == where


def test_published_properties() -> None:
    properties = outgoing({"lat": 51.9, "lon": 4.4}, 59_999, "a.interchange.test/if2")
    assert (properties.expiration, properties.delivery_mode, properties.app_id) == ("59999", 1, "a.interchange.test/if2")
    assert properties.headers == {"lat": 51.9, "lon": 4.4}
    assert outgoing({}, None, "x").expiration is None and outgoing({}, -3, "x").expiration == "0"


class _Client:
    """What a :class:`Session` sends its acks through: the frames, and each write."""

    def __init__(self) -> None:
        self.closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.frames: list[tuple[str, int, bool]] = []
        self.writes = 0

    def ack(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        self.frames.append(("ack", delivery_tag, multiple))

    def reject(self, channel: int, delivery_tag: int) -> None:
        self.frames.append(("reject", delivery_tag, False))

    def flush(self) -> None:
        self.writes += 1


def _deliveries(n: int) -> list[Delivery]:
    return [Delivery(2, tag, False, "DENM", "k", None, b"") for tag in range(1, n + 1)]


def test_acks_wait_for_a_batch_or_the_delay_and_never_pass_one_in_flight() -> None:
    async def run() -> None:
        client = _Client()
        session = Session(client, set(), ack_batch=3)  # type: ignore[arg-type]
        d = _deliveries(8)
        session.window.received_all(d)
        session.settle_all(d[:2], True)  # fewer than the batch: held for the delay
        await asyncio.sleep(0)
        assert client.frames == []
        await asyncio.sleep(ACK_DELAY_S * 2)
        assert client.frames == [("ack", 2, True)] and client.writes == 1
        session.settle(d[3], True)
        session.settle_all(d[4:6], True)  # a batch due, but d[2] is still in flight: nothing passes it
        await asyncio.sleep(ACK_DELAY_S * 2)
        assert client.frames == [("ack", 2, True)]
        session.settle(d[2], False)
        await asyncio.sleep(0)  # due at once (a batch): one write for the reject and the ack after it
        assert client.frames[1:] == [("reject", 3, False), ("ack", 6, True)] and client.writes == 2
        session.settle_all(d[6:], True)
        client.closed.set_result("gone")  # nothing is sent on a closed connection: RabbitMQ redelivers
        await asyncio.sleep(ACK_DELAY_S * 2)
        assert client.writes == 2

    asyncio.run(run())
