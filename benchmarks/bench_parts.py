"""Micro-benchmark: the broker's connection engine and message scanner timed alone, in CPU time.

The whole-broker benchmark (bench_broker.py) spreads by +-15 % on a busy machine, too much to see
what a change to one part costs. Here each part runs in this process and only its own calls are
timed with ``time.process_time`` (time other processes take from the core is not counted):

* engine: a proton client (proton's engine, in memory, no socket, no TLS) publishes N messages of
  200 B through :class:`~interchange.broker.engine.ConnectionEngine`, whose router hands each to
  a pre-settled consumer link on the same connection; the engine's ``receive`` and
  ``take_output`` are timed, per message; and the same with an unsettled consumer link whose client
  accepts each delivery (its settlements read back by the engine: a C-Roads consumer's);
* scanner: :func:`~interchange.broker.amqp_scan.scan_message` of bench_scan.py's DENM (200 B and
  500 KB bodies, and locating only), and the pure-Python admission of distinct and repeated
  DENMs (the C accelerator off), per message.

With ``--against ROOT`` the same parts of another checkout (ROOT/interchange/broker/engine.py and
amqp_scan.py, loaded beside these) alternate with this checkout's, round by round, and the
ratio of the medians is printed: the peer of a before/after comparison.

    .venv/bin/python benchmarks/bench_parts.py [--against ../main] [--number 20000] [--rounds 11]
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from proton import Collector, Connection, Event, Link, Message, Transport

import bench_scan
from interchange.broker import admission as admission_module
from interchange.broker import amqp_scan, engine
from interchange.broker.engine import EngineLimits
from interchange.broker.message import BrokerMessage
from interchange.broker.ttl_policy import TtlPolicy


def load(name: str, path: Path) -> ModuleType:
    """Another checkout's module, loaded under its own name beside this one's."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _Publisher:
    closer = None


class _ForwardingRouter:
    """Accepts every message and hands it to the one consumer link (what a source does)."""

    def __init__(self) -> None:
        self.consumer: Any = None

    def attach_publisher(self, identity: str, address: str | None) -> _Publisher:
        return _Publisher()

    def attach_consumer(self, identity: str, address: str | None, selector: str | None, link: Any) -> None:
        self.consumer = link

    def publish(self, publisher: Any, raw: bytes | bytearray) -> None:
        if self.consumer is not None and self.consumer.can_send():
            self.consumer.send(BrokerMessage(raw, {}, None, False, "p", 0))

    def detach_publisher(self, publisher: Any) -> None: ...

    def detach_consumer(self, link: Any) -> None: ...

    def consumed(self, link: Any, message: Any) -> None: ...

    def credit_available(self, link: Any) -> None: ...

    def redeliver(self, link: Any, message: Any) -> None: ...


def engine_us_per_message(module: ModuleType, number: int, accepting: bool = False) -> float:
    """CPU µs of the engine's own calls per message published and delivered (``accepting``: the
    consumer link is unsettled and the client accepts each delivery, its settlement read back)."""
    server = module.ConnectionEngine(_ForwardingRouter(), "actor-1", EngineLimits(), lambda: None)
    transport, connection, collector = Transport(), Connection(), Collector()
    connection.collect(collector)
    transport.bind(connection)
    connection.container = "bench"
    connection.open()
    session = connection.session()
    session.open()
    sender = session.sender("in")
    sender.target.address = "bench-in"
    sender.open()
    receiver = session.receiver("out")
    receiver.source.address = "bench-out"
    receiver.snd_settle_mode = Link.SND_UNSETTLED if accepting else Link.SND_SETTLED
    receiver.open()
    receiver.flow(number)
    cpu = [0.0]
    received = [0]

    def client_events() -> None:
        while (event := collector.peek()) is not None:
            delivery = event.delivery
            if event.type == Event.DELIVERY and delivery is not None:
                if delivery.link.is_receiver and not delivery.partial:
                    delivery.link.recv(delivery.pending)
                    delivery.link.advance()
                    if accepting:
                        delivery.update(delivery.ACCEPTED)
                    delivery.settle()
                    received[0] += 1
                elif delivery.link.is_sender and delivery.updated:
                    delivery.settle()
            collector.pop()

    def pump() -> None:
        moved = True
        while moved:
            out = transport.peek(transport.pending()) if transport.pending() > 0 else b""
            if out:
                transport.pop(len(out))
            started = time.process_time()
            if out:
                server.receive(out)
            back = server.take_output()
            cpu[0] += time.process_time() - started
            view = memoryview(bytes(back))
            while view:
                size = min(transport.capacity(), len(view))
                transport.push(bytes(view[:size]))
                view = view[size:]
                client_events()
            client_events()
            moved = bool(out or back)

    pump()
    raw = Message(body=b"x" * 200, properties={"messageType": "DENM"}).encode()
    sent = 0
    while sent < number:
        for _ in range(min(50, sender.credit, number - sent)):
            sender.delivery(str(sent))
            sender.send(raw)
            sender.advance()
            sent += 1
        pump()
    server.release()
    assert received[0] == number, f"{received[0]} of {number} messages delivered"
    assert not server.router.consumer.unsettled, "a settlement not read back"
    return cpu[0] / number * 1e6


def _on_scanner(case: Callable[[ModuleType], float], parts: tuple[ModuleType, ModuleType]) -> float:
    """A scanner case run on a side's scanner module (its second part)."""
    return case(parts[1])


def scanner_cases(number: int) -> dict[str, Callable[[ModuleType], float]]:
    small, large = bench_scan.encode(200), bench_scan.encode(500_000)
    pool = bench_scan.encode_distinct(5_000)

    def timed(function: Callable[[], object], calls: int) -> float:
        return timeit.Timer(function, timer=time.process_time).timeit(number=calls) / calls * 1e6

    def admission(module: ModuleType, distinct: bool) -> float:
        # The admission module's scanner functions, swapped for the module under test.
        admission_module.scan_message = module.scan_message
        admission_module.decode_application_properties = module.decode_application_properties
        admit = admission_module.Admission(TtlPolicy(), accelerated=False).admit
        messages = itertools.cycle(pool)
        run = (lambda: admit(next(messages), "p", False, None, 0)) if distinct else (
            lambda: admit(pool[0], "p", False, None, 0))
        run()
        return timed(run, number)

    return {
        "scan_message, DENM 200 B": lambda m: timed(lambda: m.scan_message(small), number),
        "scan_message, DENM 500 KB": lambda m: timed(lambda: m.scan_message(large), max(1, number // 10)),
        "scan_message, locate only": lambda m: timed(lambda: m.scan_message(small, decode_properties=False), number),
        "admission (Python), distinct": lambda m: admission(m, True),
        "admission (Python), repeated": lambda m: admission(m, False),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another checkout's root: its engine and scanner alternate with these")
    parser.add_argument("--number", type=int, default=20_000, help="messages per round")
    parser.add_argument("--rounds", type=int, default=11, help="rounds; the median (and best) are reported")
    args = parser.parse_args()
    sides: dict[str, tuple[ModuleType, ModuleType]] = {"this": (engine, amqp_scan)}
    if args.against is not None:
        broker = args.against / "interchange" / "broker"
        sides["against"] = (load("against_engine", broker / "engine.py"), load("against_amqp_scan", broker / "amqp_scan.py"))
    cases: dict[str, Callable[[tuple[ModuleType, ModuleType]], float]] = {
        "engine, 200 B through a consumer link": lambda parts: engine_us_per_message(parts[0], args.number),
        "engine, the same, each one accepted": lambda parts: engine_us_per_message(parts[0], args.number, True)}
    for name, scan in scanner_cases(args.number).items():
        cases[name] = partial(_on_scanner, scan)
    print(f"CPU µs per message, median (best) of {args.rounds} rounds of {args.number}; sides alternate each round")
    for name, case in cases.items():
        figures: dict[str, list[float]] = {side: [] for side in sides}
        for index in range(args.rounds):
            for side in (sides if index % 2 == 0 else reversed(list(sides))):
                figures[side].append(case(sides[side]))
        line = "  ".join(f"{side} {statistics.median(v):7.2f} ({min(v):6.2f})" for side, v in figures.items())
        if "against" in figures:
            line += f"  this/against {statistics.median(figures['this']) / statistics.median(figures['against']):.3f}"
        print(f"{name:<38} {line}")


if __name__ == "__main__":
    main()
