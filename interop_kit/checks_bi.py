"""Chapter 3.3 checks of the Basic Interface, with proton's blocking client in a worker thread.

IP_020/IP_050: the kit attaches with SASL EXTERNAL (identity = its client certificate) to the
source of the CREATED subscription (Table 15 endpoint). With a delivery endpoint (``--delivery-*``)
it publishes two messages there: one whose application properties do not match the
subscription's selector, then one that does. IP_066: only the matching one arrives; IP_118: its
body (all 256 byte values and a random tail, in an AMQP data section) arrives byte for byte.
"""
from __future__ import annotations

import asyncio
import ipaddress
import os
from dataclasses import dataclass
from typing import Any

from proton import Message, SSLDomain, Timeout
from proton.utils import BlockingConnection, BlockingReceiver

from certs.tls import TlsFiles, proton_ssl_domain
from ii_api.wire.models import Endpoint as SubscriptionEndpoint
from interop_kit.checks_ii import created_subscription
from interop_kit.model import Check, CheckFailed, CheckSkipped, Delivery, Findings, Target

BI_TIMEOUT_S = 10.0
QUIET_S = 1.5  #: how long no further message must arrive after the matching one


@dataclass(frozen=True)
class Exchange:
    received: bytes | None
    expected: bytes
    extra: bytes | None


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _route(target: Target, host: str, port: int) -> tuple[str, int, str]:
    """(address to connect to, port, name the certificate must carry) for a BI endpoint."""
    connect = target.connect_host(host) if host.lower() in (target.name.lower(), target.bi_host.lower()) else host
    return connect, port, target.name if _is_address(host) else host


def _connect(identity: TlsFiles, target: Target, host: str, port: int) -> BlockingConnection:
    connect, port, name = _route(target, host, port)
    return BlockingConnection(f"amqps://{connect}:{port}", ssl_domain=proton_ssl_domain(identity, SSLDomain.MODE_CLIENT),
                              virtual_host=name, allowed_mechs="EXTERNAL", timeout=BI_TIMEOUT_S)


def _attach(target: Target, endpoint: SubscriptionEndpoint) -> str:
    assert endpoint.host is not None and endpoint.port is not None and endpoint.source is not None
    connection = _connect(target.identity, target, endpoint.host, endpoint.port)
    try:
        connection.create_receiver(endpoint.source, credit=1)
    finally:
        connection.close()
    return f"attached to {endpoint.source} at {endpoint.host}:{endpoint.port} (SASL EXTERNAL)"


async def attach(target: Target, findings: Findings) -> str:
    subscription = created_subscription(findings, endpoints=True)
    lines = [await asyncio.to_thread(_attach, target, endpoint) for endpoint in subscription.endpoints]
    return "; ".join(lines)


def _message(properties: dict[str, Any], body: bytes) -> Message:
    return Message(body=body, properties=properties, inferred=True)


def _body(message: Message) -> bytes:
    """The body as bytes (a data section); anything else is shown as its repr, which cannot match."""
    body = message.body
    return bytes(body) if isinstance(body, (bytes, bytearray, memoryview)) else repr(body).encode()


def _settle(receiver: BlockingReceiver) -> None:
    """Accept the message just received, unless it came settled: a broker may send pre-settled
    (at most once; AMQP 1.0 part 2.7.3, mixed settle mode), and there is nothing to accept then."""
    if receiver.fetcher is not None and receiver.fetcher.unsettled:
        receiver.accept()


def _exchange(target: Target, delivery: Delivery, endpoint: SubscriptionEndpoint, matching: dict[str, Any],
              mismatching: dict[str, Any]) -> Exchange:
    assert endpoint.host is not None and endpoint.port is not None and endpoint.source is not None
    expected = bytes(range(256)) + os.urandom(64)
    consumer = _connect(target.identity, target, endpoint.host, endpoint.port)
    publisher = _connect(delivery.identity, target, delivery.host, delivery.port)
    try:
        receiver = consumer.create_receiver(endpoint.source, credit=10)
        sender = publisher.create_sender(delivery.address)
        sender.send(_message({**matching, **mismatching}, b"interop-kit: must not arrive " + os.urandom(8)))
        sender.send(_message(matching, expected))
        try:
            got = receiver.receive(timeout=BI_TIMEOUT_S)
            _settle(receiver)
            received = _body(got)
        except Timeout:
            return Exchange(None, expected, None)
        try:
            more = receiver.receive(timeout=QUIET_S)
            _settle(receiver)
            extra: bytes | None = _body(more)
        except Timeout:
            extra = None
        return Exchange(received, expected, extra)
    finally:
        publisher.close()
        consumer.close()


async def _traffic(target: Target, findings: Findings) -> Exchange:
    subscription = created_subscription(findings, endpoints=True)
    if target.delivery is None or target.traffic is None:
        raise CheckSkipped("needs a delivery endpoint (--delivery-address/--delivery-cert/--delivery-key) to publish")
    if "traffic" not in findings.values:
        findings.values["traffic"] = await asyncio.to_thread(
            _exchange, target, target.delivery, subscription.endpoints[0], target.traffic.matching,
            target.traffic.mismatching)
    traffic: Exchange = findings.values["traffic"]
    return traffic


async def selector_honoured(target: Target, findings: Findings) -> str:
    traffic = await _traffic(target, findings)
    if traffic.received is None:
        raise CheckFailed(f"the matching message did not arrive within {BI_TIMEOUT_S:g} s")
    if traffic.received.startswith(b"interop-kit: must not arrive"):
        raise CheckFailed("the message that does not match the subscription's selector was delivered")
    if traffic.extra is not None:
        raise CheckFailed(f"a second message arrived: {traffic.extra[:40]!r}")
    return "only the message matching the selector arrived"


async def byte_exact(target: Target, findings: Findings) -> str:
    traffic = await _traffic(target, findings)
    if traffic.received is None:
        raise CheckFailed(f"the published message did not arrive within {BI_TIMEOUT_S:g} s")
    if traffic.received != traffic.expected and traffic.extra != traffic.expected:
        raise CheckFailed(f"body changed in transit: sent {len(traffic.expected)} bytes, received "
                          f"{len(traffic.received)} ({traffic.received[:16]!r}...)")
    return f"{len(traffic.expected)} bytes received unchanged"


def bi_checks() -> list[Check]:
    return [
        Check("bi.attach", "IP_020", "SASL EXTERNAL attach to the CREATED subscription's source", attach, "bi"),
        Check("bi.selector-honoured", "IP_066", "only messages matching the subscription's selector arrive",
              selector_honoured, "bi"),
        Check("bi.byte-exact", "IP_118", "a published message's body arrives byte for byte", byte_exact, "bi"),
    ]
