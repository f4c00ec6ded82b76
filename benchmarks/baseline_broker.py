"""A deliberately straightforward AMQP 1.0 broker: the benchmark's baseline peer (not a product).

It does what the generic brokers do, written the obvious way on proton's ``MessagingHandler`` +
``Container``: every message published to an address is decoded in full (``event.message``) and
every consumer link attached to that address (topic semantics) evaluates its own JMS selector
(the ``apache.org:selector-filter:string`` source filter) on it with the reference interpreter
:func:`jms_selectors.reference.evaluate`; matching messages are re-encoded and sent, or queued
(bounded) while the link has no credit. No validation, no routing index, no shards.

This is our own baseline ("the MessagingHandler broker" of docs/performance.md), used by
``benchmarks/bench_broker.py`` when no other AMQP 1.0 broker with selectors can be run here.

    .venv/bin/python benchmarks/baseline_broker.py --pki DIR --cn broker.interchange.test [--port 0]
    .venv/bin/python benchmarks/baseline_broker.py --plain [--port 5672]

It prints ``BASELINE port N`` on stdout once listening.
"""
from __future__ import annotations

import argparse
import sys
from collections import deque
from pathlib import Path

from proton import Described, SSLDomain, symbol, ulong
from proton.handlers import MessagingHandler
from proton.reactor import Container

import jms_selectors
from interchange.ground.ports import free_port
from jms_selectors.reference import evaluate

SELECTOR_SYMBOL = symbol("apache.org:selector-filter:string")
SELECTOR_CODE = ulong(0x0000468C00000004)
QUEUE_LIMIT = 10_000


class Consumer:
    __slots__ = ("link", "ast", "queue")

    def __init__(self, link, ast) -> None:
        self.link = link
        self.ast = ast
        self.queue: deque = deque()


def link_selector(link) -> str | None:
    data = link.remote_source.filter
    data.rewind()
    filters = data.get_object() if data.next() else None
    if isinstance(filters, dict):
        for value in filters.values():
            if isinstance(value, Described) and value.descriptor in (SELECTOR_SYMBOL, SELECTOR_CODE):
                return str(value.value)
    return None


class BaselineBroker(MessagingHandler):
    def __init__(self, url: str, ssl_domain: SSLDomain | None, mechs: str) -> None:
        super().__init__(prefetch=1000, auto_accept=True, auto_settle=True)
        self.url = url
        self.ssl_domain = ssl_domain
        self.mechs = mechs
        self.consumers: dict[str, list[Consumer]] = {}
        self.by_link: dict = {}

    def on_start(self, event) -> None:
        event.container.listen(self.url, self.ssl_domain)

    def on_connection_bound(self, event) -> None:
        sasl = event.transport.sasl()
        sasl.allowed_mechs(self.mechs)

    def on_link_opening(self, event) -> None:
        link = event.link
        if link.is_sender:
            address = link.remote_source.address
            text = link_selector(link)
            ast = None
            if text:
                try:
                    ast = jms_selectors.compile(text).ast
                except jms_selectors.SelectorError as exc:
                    link.condition = _condition("amqp:invalid-field", str(exc))
                    link.close()
                    return
            link.source.copy(link.remote_source)
            link.target.copy(link.remote_target)
            link.snd_settle_mode = link.remote_snd_settle_mode
            consumer = Consumer(link, ast)
            self.consumers.setdefault(address, []).append(consumer)
            self.by_link[link] = consumer
        else:
            link.target.copy(link.remote_target)
            link.source.copy(link.remote_source)

    def _forget(self, link) -> None:
        consumer = self.by_link.pop(link, None)
        if consumer is not None:
            for group in self.consumers.values():
                if consumer in group:
                    group.remove(consumer)

    def on_link_closing(self, event) -> None:
        self._forget(event.link)

    def on_connection_closing(self, event) -> None:
        for link in list(self.by_link):
            if link.connection == event.connection:
                self._forget(link)

    def on_disconnected(self, event) -> None:
        for link in list(self.by_link):
            if link.connection == event.connection:
                self._forget(link)

    def on_message(self, event) -> None:
        message = event.message
        properties = message.properties or {}
        for consumer in self.consumers.get(event.link.target.address, ()):
            if consumer.ast is not None and evaluate(consumer.ast, properties) is not True:
                continue
            if consumer.queue or consumer.link.credit <= 0:
                consumer.queue.append(message)
                if len(consumer.queue) > QUEUE_LIMIT:
                    consumer.queue.popleft()
            else:
                consumer.link.send(message)

    def on_sendable(self, event) -> None:
        consumer = self.by_link.get(event.link)
        if consumer is None:
            return
        link = consumer.link
        while consumer.queue and link.credit > 0:
            link.send(consumer.queue.popleft())


def _condition(name: str, description: str):
    from proton import Condition

    return Condition(name, description)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = a free port (printed)")
    parser.add_argument("--pki", type=Path, help="test PKI directory (certs.create_test_pki)")
    parser.add_argument("--cn", default="broker.interchange.test", help="server identity in the PKI")
    parser.add_argument("--plain", action="store_true", help="plain AMQP with SASL ANONYMOUS instead of TLS")
    args = parser.parse_args(argv)
    port = args.port
    if port == 0:  # proton's Container does not report the bound port: pick a free one first
        port = free_port(args.host)
    if args.plain:
        domain, mechs, url = None, "ANONYMOUS", f"amqp://{args.host}:{port}"
    else:
        if args.pki is None:
            parser.error("--pki is needed for TLS (or use --plain)")
        from certs.tls import TlsFiles, proton_ssl_domain

        files = TlsFiles.from_pki(args.pki, args.cn, with_crls=False)
        domain, mechs, url = proton_ssl_domain(files, SSLDomain.MODE_SERVER), "EXTERNAL", f"amqps://{args.host}:{port}"
    container = Container(BaselineBroker(url, domain, mechs))
    container.container_id = "baseline-broker"
    print(f"BASELINE port {port}", flush=True)
    try:
        container.run()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
