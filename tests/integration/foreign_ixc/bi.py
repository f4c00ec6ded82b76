"""The foreign interchange's Basic Interface: AMQP 1.0 over TLS 1.3 (chapter 3.3, IP_018-020).

TLS is Python's ``ssl`` (mutual authentication, the client certificate's CN is the identity,
IP_050); SASL EXTERNAL is :mod:`foreign_ixc.sasl`; AMQP is python-qpid-proton's engine fed the
decrypted bytes (no proton reactor, no proton TLS: proton cannot check a CRL). Addresses:

- one delivery target, where the configured publisher's client sends messages (it is settled
  accepted once routed);
- one source per CREATED subscription, which only the subscription's consumer may attach to. A
  message reaches a source when its application properties match the subscription's selector
  (IP_066, :mod:`foreign_ixc.selectors`), and the bytes received are the bytes sent on (IP_118).

An attach to any other address, or by anyone else, is refused with ``amqp:not-found`` or
``amqp:unauthorized-access``. :class:`Faults` can break the routing on purpose (mutants).
"""
from __future__ import annotations

import asyncio
import itertools
import ssl
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID
from proton import Collector, Condition, Connection, Delivery, Event, Link, Message, Session, Transport

from foreign_ixc.sasl import SaslServer
from foreign_ixc.selectors import Term, matches


@dataclass(frozen=True)
class RoutingFaults:
    """Ways to break the BI on purpose."""

    ignore_selector: bool = False  #: every message reaches every source
    alter_body: bool = False  #: the body is taken for UTF-8 text and sent on as a string


@dataclass
class Source:
    address: str
    owner: str
    terms: tuple[Term, ...]
    queue: deque[bytes] = field(default_factory=deque)
    links: list[tuple[Link, _AmqpConnection]] = field(default_factory=list)


def peer_cn(der: bytes | None) -> str | None:
    if not der:
        return None
    names = x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if len(names) == 1 else None


def _altered(data: bytes) -> bytes:
    message = Message()
    message.decode(data)
    if isinstance(message.body, (bytes, bytearray, memoryview)):
        message.body = bytes(message.body).decode("utf-8", "replace")
    return bytes(message.encode())


class Router:
    """Targets and sources of the BI; sources are added and removed by the II."""

    def __init__(self, delivery_address: str, publisher: str, faults: RoutingFaults) -> None:
        self.delivery_address, self.publisher, self.faults = delivery_address, publisher, faults
        self.sources: dict[str, Source] = {}

    def add_source(self, address: str, owner: str, terms: tuple[Term, ...]) -> None:
        self.sources[address] = Source(address, owner, terms)

    def remove_source(self, address: str) -> None:
        source = self.sources.pop(address, None)
        for link, connection in source.links if source else []:
            link.close()
            connection.flush()

    def may_publish(self, address: str | None, cn: str) -> Condition | None:
        if address != self.delivery_address:
            return Condition("amqp:not-found", f"no target {address!r}")
        if cn != self.publisher:
            return Condition("amqp:unauthorized-access", f"{cn} may not publish to {address}")
        return None

    def may_consume(self, address: str | None, cn: str) -> Source | Condition:
        source = self.sources.get(address or "")
        if source is None:
            return Condition("amqp:not-found", f"no source {address!r}")
        if source.owner != cn:
            return Condition("amqp:unauthorized-access", f"{cn} may not consume from {address}")
        return source

    def route(self, data: bytes) -> None:
        message = Message()
        message.decode(data)
        properties: dict[str, Any] = dict(message.properties or {})
        for source in self.sources.values():
            if self.faults.ignore_selector or matches(source.terms, properties):
                source.queue.append(_altered(data) if self.faults.alter_body else data)
                self.pump(source)

    def pump(self, source: Source) -> None:
        for link, connection in list(source.links):
            while source.queue and link.credit > 0:
                delivery = link.delivery(str(next(connection.tags)))
                link.send(source.queue.popleft())
                link.advance()
                delivery.settle()  # pre-settled: at most once, as the consumer's credit allows
            connection.flush()


class _AmqpConnection(asyncio.Protocol):
    """One client connection: TLS done by asyncio, then SASL, then proton's engine."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.tags = itertools.count()
        self.sasl = SaslServer()
        self.engine = Transport(Transport.SERVER)
        self.collector = Collector()
        self.connection = Connection()
        self.connection.collect(self.collector)
        self.engine.bind(self.connection)
        self.cn = ""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        tls = transport.get_extra_info("ssl_object")
        cn = peer_cn(tls.getpeercert(binary_form=True) if tls else None)
        if cn is None:
            transport.close()
            return
        self.cn = cn

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if not self.sasl.done:
            step = self.sasl.receive(data)
            self.transport.write(step.send)
            if step.close:
                self.transport.close()
            if step.amqp is None:
                return
            data = step.amqp
        if data:
            self.engine.push(data)
        self._events()
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.engine.close_tail()
        for source in self.router.sources.values():
            source.links = [(link, owner) for link, owner in source.links if owner is not self]

    def flush(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        while (pending := self.engine.pending()) > 0:
            self.transport.write(bytes(self.engine.peek(pending) or b""))
            self.engine.pop(pending)
        if pending < 0:
            self.transport.close()

    def _events(self) -> None:
        handlers: dict[Any, Callable[[Event], None]] = {
            Event.CONNECTION_REMOTE_OPEN: lambda e: self.connection.open(),
            Event.SESSION_REMOTE_OPEN: lambda e: _session(e).open(),
            Event.LINK_REMOTE_OPEN: lambda e: self._attach(_link(e)),
            Event.LINK_FLOW: lambda e: self._flow(_link(e)),
            Event.DELIVERY: self._delivery,
            Event.LINK_REMOTE_CLOSE: lambda e: _link(e).close(),
            Event.SESSION_REMOTE_CLOSE: lambda e: _session(e).close(),
            Event.CONNECTION_REMOTE_CLOSE: lambda e: self.connection.close(),
        }
        while (event := self.collector.peek()) is not None:
            handler = handlers.get(event.type)
            if handler is not None:
                handler(event)
            self.collector.pop()

    def _refuse(self, link: Link, condition: Condition) -> None:
        link.open()
        link.condition = condition
        link.close()

    def _attach(self, link: Link) -> None:
        if link.is_sender:  # the client receives from a source
            found = self.router.may_consume(link.remote_source.address, self.cn)
            if isinstance(found, Condition):
                return self._refuse(link, found)
            link.source.address = found.address
            link.open()
            found.links.append((link, self))
            return None
        refused = self.router.may_publish(link.remote_target.address, self.cn)
        if refused is not None:
            return self._refuse(link, refused)
        link.target.address = self.router.delivery_address
        link.open()
        link.flow(10)
        return None

    def _flow(self, link: Link) -> None:
        for source in self.router.sources.values():
            if any(attached is link for attached, _ in source.links):
                self.router.pump(source)

    def _delivery(self, event: Event) -> None:
        delivery, link = event.delivery, _link(event)
        if link.is_sender or delivery is None or not delivery.readable or delivery.partial:
            return
        data = link.recv(delivery.pending) or b""
        link.advance()
        self.router.route(bytes(data))
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        link.flow(1)


def _link(event: Event) -> Link:
    assert event.link is not None
    return event.link


def _session(event: Event) -> Session:
    assert event.session is not None
    return event.session


async def serve_bi(router: Router, context: ssl.SSLContext, host: str, port: int) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _AmqpConnection(router), host, port, ssl=context,
                                    ssl_handshake_timeout=10)
