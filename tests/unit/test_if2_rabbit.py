"""Where the IF2 bridge's RabbitMQ link connects (IF2 6.1: the broker and its virtual host), and the
properties of what it publishes (Table 4: the ttl as ``expiration``; not persistent; marked as ours)."""
from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from interchange.bridges.if2.config import If2Config
from interchange.bridges.if2.rabbit import RabbitLink, outgoing


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
