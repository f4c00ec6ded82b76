"""The federation soak: three interchanges found through real DNS (the federation harness,
:mod:`interop_kit.federation`), the test PKI, a publisher at interchange 1 sending a realistic mix
(DENM, IVIM, SPATEM/MAPEM, CAM) as durable messages, consumers at interchanges 2 and 3 subscribed
with selectors, so every delivery crosses one federation hop. Midway one consumer disconnects and
comes back, and one interchange is killed (SIGKILL) and started again. The report, per
subscription: published, accepted, delivered, lost within TTL, duplicates, publish-to-receive
latency p50/p99 (all messages, and before the first fault), plus each node's memory over time.

``benchmarks/soak_federation.py`` runs it for minutes (figures in docs/reliability.md); the test
suite runs a short one and asserts that nothing accepted is lost.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton import Message, SSLDomain, Timeout
from proton.utils import BlockingConnection

from certs.errors import PkiError
from certs.pki import Pki
from certs.tls import TlsFiles, proton_ssl_domain
from interchange.actor import Actor, capability_from_json
from interchange.ground.errors import CliError
from interop_kit import federation
from interop_kit.demo_data import HAZELDONK, actor_settings
from interop_kit.soak_ledger import Ledger, StreamSpec, SubscriptionReport, SubscriptionSpec

__all__ = ["SoakPlan", "SoakResult", "STREAMS", "SUBSCRIPTIONS", "run_soak"]

PUBLISHER = federation.ACTOR
PUBLISHER_ID = "NL00001"
TILE = HAZELDONK
TTL_S = 120.0  #: longer than any outage in the run: nothing accepted may expire undelivered
STEP_S = 30.0


def _stream(name: str, message_type: str, share: float, body_bytes: int, version: str,
            **extra: Any) -> StreamSpec:
    properties = {"publisherId": PUBLISHER_ID, "publicationId": f"{PUBLISHER_ID}:soak-{name}",
                  "originatingCountry": "NL", "protocolVersion": f"{message_type}:{version}",
                  "messageType": message_type, "quadTree": f",{TILE},", **extra}
    application: dict[str, Any] = {k: v for k, v in properties.items() if k not in ("quadTree", "causeCode",
                                                                                    "subCauseCode", "id",
                                                                                    "stationType")}
    application["quadTree"] = [TILE[:7]]
    return StreamSpec(name, message_type, properties, {"application": application, "metadata": {}}, share, body_bytes)


#: The publisher's mix: traffic lights dominate, as at a city's interchange.
STREAMS = (
    _stream("denm", "DENM", 0.10, 300, "1.3.1", causeCode=1, subCauseCode=0),
    _stream("ivim", "IVIM", 0.10, 600, "1.2.1"),
    _stream("spatem", "SPATEM", 0.40, 200, "1.3.1", id=",1,"),
    _stream("mapem", "MAPEM", 0.10, 1500, "1.3.1", id=",1,"),
    _stream("cam", "CAM", 0.30, 200, "1.4.1", stationType=5),
)

#: node 1 and 2 are interchanges 2 and 3 (0 is the publisher's): every delivery crosses one hop.
SUBSCRIPTIONS = (
    SubscriptionSpec("hazards@3", 2, "soak-c1", "messageType IN ('DENM', 'IVIM')", frozenset({"denm", "ivim"})),
    SubscriptionSpec("signals@3", 2, "soak-c2", "messageType IN ('SPATEM', 'MAPEM')", frozenset({"spatem", "mapem"})),
    SubscriptionSpec("denm@2", 1, "soak-c3", "messageType = 'DENM' AND quadTree LIKE '%,1202021%'",
                     frozenset({"denm"})),
    SubscriptionSpec("cam@2", 1, "soak-c4", "messageType = 'CAM'", frozenset({"cam"})),
)


@dataclass(frozen=True)
class SoakPlan:
    """What happens when, as fractions of ``duration_s``."""

    duration_s: float = 600.0
    rate: float = 200.0  #: messages per second, all streams together
    pause_subscription: str = "hazards@3"  #: its consumer disconnects ...
    pause_at: float = 0.30
    resume_at: float = 0.60  #: ... and comes back
    kill_node: int = 2  #: SIGKILLed and started again (index into the federation's nodes)
    kill_at: float = 0.45
    drain_s: float = 60.0  #: after the last publish, how long consumers may take to catch up
    prefix: str = "127.0.20"


@dataclass
class SoakResult:
    plan: SoakPlan
    subscriptions: list[SubscriptionReport]
    memory_mb: dict[str, list[tuple[float, float]]]  #: node -> (seconds since start, RSS MB)
    events: list[tuple[float, str]] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return sum(s.lost for s in self.subscriptions)


def _rss_mb(pid: int | None) -> float | None:
    """Resident memory of ``pid`` and its children (the node's broker processes)."""
    if pid is None:
        return None
    total = 0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for one in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{one}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024 if total else None


class _Run:
    """The threads of one soak: a publisher, one consumer per subscription, a memory sampler."""

    def __init__(self, state: federation.FederationState, plan: SoakPlan, target: str,
                 sources: dict[str, str]) -> None:
        self.state, self.plan, self.target, self.sources = state, plan, target, sources
        self.ledger = Ledger(SUBSCRIPTIONS)
        self.lock = threading.Lock()
        self.stop_publishing = threading.Event()
        self.stop_consuming = threading.Event()
        self.paused = {s.name: threading.Event() for s in SUBSCRIPTIONS}
        self.started = time.monotonic()
        self.memory: dict[str, list[tuple[float, float]]] = {n.name: [] for n in state.nodes}
        self.events: list[tuple[float, str]] = []
        self.first_fault_ns: int | None = None

    def event(self, text: str) -> None:
        self.events.append((round(time.monotonic() - self.started, 1), text))
        if self.first_fault_ns is None and text.startswith(("pause", "kill")):
            self.first_fault_ns = time.time_ns()

    def connect(self, cn: str, node: federation.NodeState) -> BlockingConnection:
        files = TlsFiles.from_pki(self.state.pki, cn, with_crls=False)
        return BlockingConnection(f"amqps://{node.address}:{node.amqps_port}", timeout=5.0,
                                  ssl_domain=proton_ssl_domain(files, SSLDomain.MODE_CLIENT),
                                  virtual_host=node.name, allowed_mechs="EXTERNAL")

    def publish(self) -> None:
        order = itertools.cycle([s for s in STREAMS for _ in range(round(s.share * 20))])
        interval, due, seq = 1.0 / self.plan.rate, time.monotonic(), 0
        connection: BlockingConnection | None = None
        sender: Any = None
        while not self.stop_publishing.is_set():
            if connection is None:
                try:
                    connection = self.connect(PUBLISHER, self.state.nodes[0])
                    sender = connection.create_sender(self.target)
                except Exception:  # noqa: BLE001 - proton raises several kinds while a node is down
                    connection = None
                    time.sleep(0.2)
                    continue
            stream = next(order)
            seq += 1
            accepted = self._send_one(sender, stream, seq)
            if accepted is None:
                with contextlib.suppress(Exception):
                    connection.close()
                connection = None
            due += interval
            time.sleep(max(0.0, due - time.monotonic()))
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.close()

    def _send_one(self, sender: Any, stream: StreamSpec, seq: int) -> bool | None:
        """Send one durable message; its outcome (None: the connection broke)."""
        now = time.time_ns()
        body = f"{seq}|{now}|".encode().ljust(stream.body_bytes, b".")
        with self.lock:
            self.ledger.publish(seq, stream.name, now, int(TTL_S * 1e9))
        message = Message(body=body, properties=stream.properties, durable=True, ttl=TTL_S, inferred=True)
        try:
            sender.send(message, timeout=5.0)
            accepted: bool | None = True
        except Timeout:
            accepted = None
        except Exception as exc:  # noqa: BLE001 - SendException: refused/released; others: connection lost
            accepted = False if type(exc).__name__ == "SendException" else None
        with self.lock:
            self.ledger.settle(seq, bool(accepted))
        return accepted

    def consume(self, spec: SubscriptionSpec) -> None:
        node = self.state.nodes[spec.node]
        while not self.stop_consuming.is_set():
            if self.paused[spec.name].is_set():
                time.sleep(0.1)
                continue
            try:
                connection = self.connect(spec.consumer, node)
                receiver = connection.create_receiver(self.sources[spec.name], credit=200)
            except Exception:  # noqa: BLE001 - the node is down or starting
                time.sleep(0.2)
                continue
            try:
                self._receive(spec, receiver)
            except Exception:  # noqa: BLE001 - the connection broke: reconnect
                time.sleep(0.2)
            finally:
                with contextlib.suppress(Exception):
                    connection.close()

    def _receive(self, spec: SubscriptionSpec, receiver: Any) -> None:
        while not self.stop_consuming.is_set() and not self.paused[spec.name].is_set():
            try:
                message = receiver.receive(timeout=0.5)
            except Timeout:
                continue
            now = time.time_ns()
            head = bytes(message.body).split(b"|", 2)
            if head[0] != b"probe":
                with self.lock:
                    self.ledger.receive(spec.name, int(head[0]), now)
            else:
                with self.lock:
                    self.ledger.receive(spec.name, 0, now)
            receiver.accept()

    def sample_memory(self) -> None:
        while not self.stop_consuming.is_set():
            for node in self.state.nodes:
                rss = _rss_mb(node.pid)
                if rss is not None:
                    self.memory[node.name].append((round(time.monotonic() - self.started, 1), round(rss, 1)))
            self.stop_consuming.wait(1.0)


async def _register(state: federation.FederationState) -> tuple[str, dict[str, str]]:
    """The publisher's capabilities and delivery at interchange 1; each consumer's subscription."""
    directory = Path(state.directory)
    first = state.nodes[0]
    async with Actor(actor_settings(directory, PUBLISHER, first.name, first.ii_port, first.address)) as publisher:
        await publisher.api.add_capabilities([capability_from_json(s.capability) for s in STREAMS])
        delivery = await publisher.create_delivery(f"publisherId = '{PUBLISHER_ID}' AND publicationId LIKE '%:soak-%'")
    sources = {spec.name: await _subscribe(state, spec) for spec in SUBSCRIPTIONS}
    return delivery.endpoints[0].target, sources


async def _subscribe(state: federation.FederationState, spec: SubscriptionSpec) -> str:
    node = state.nodes[spec.node]
    settings = actor_settings(Path(state.directory), spec.consumer, node.name, node.ii_port, node.address)
    async with Actor(settings) as consumer:
        subscription = await consumer.subscribe(spec.selector, timeout_s=STEP_S)
    return subscription.endpoints[0].source


def _issue_consumers(state: federation.FederationState) -> None:
    pki = Pki(state.pki)
    for spec in SUBSCRIPTIONS:
        try:
            pki.identity(spec.consumer)
        except PkiError:  # the PKI is kept across runs: issue once
            pki.issue_client(spec.consumer, ca=federation.INTERMEDIATES[spec.node % 2])  # as its node


def _warm_up(run: _Run) -> None:
    """Probe messages until every subscription received one (the federation links are up)."""
    connection = run.connect(PUBLISHER, run.state.nodes[0])
    try:
        sender = connection.create_sender(run.target)
        deadline = time.monotonic() + 2 * STEP_S
        while any(0 not in run.ledger.received[s.name] for s in SUBSCRIPTIONS):
            if time.monotonic() > deadline:
                missing = [s.name for s in SUBSCRIPTIONS if 0 not in run.ledger.received[s.name]]
                raise CliError(f"soak: no probe arrived for {', '.join(missing)} within {2 * STEP_S:g} s")
            for stream in STREAMS:
                sender.send(Message(body=b"probe|", properties=stream.properties, ttl=5.0, inferred=True))
            time.sleep(0.5)
    finally:
        connection.close()
    with run.lock:
        for received in run.ledger.received.values():
            received.clear()


def _kill_and_restart(run: _Run, index: int) -> None:
    node = run.state.nodes[index]
    run.event(f"kill -9 {node.name} (pid {node.pid})")
    if node.pid is not None:
        os.kill(node.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(node.pid, 0)
    node.pid = federation.spawn_node(node)
    federation.save_state(run.state)
    federation.wait_up(run.state)
    run.event(f"{node.name} restarted (pid {node.pid}), listening")


def _timeline(run: _Run) -> Iterator[tuple[float, Callable[[], None]]]:
    plan = run.plan
    pause = run.paused[plan.pause_subscription]

    def pause_consumer() -> None:
        run.event(f"pause consumer of {plan.pause_subscription}")
        pause.set()

    def resume_consumer() -> None:
        run.event(f"resume consumer of {plan.pause_subscription}")
        pause.clear()

    steps = [(plan.pause_at, pause_consumer), (plan.kill_at, lambda: _kill_and_restart(run, plan.kill_node)),
             (plan.resume_at, resume_consumer)]
    yield from sorted(steps, key=lambda step: step[0])


def _drive(run: _Run) -> int:
    """Publish for the plan's duration with its faults, then drain; the drain's end (ns)."""
    threads = [threading.Thread(target=run.consume, args=(s,), daemon=True) for s in SUBSCRIPTIONS]
    threads.append(threading.Thread(target=run.sample_memory, daemon=True))
    for thread in threads:
        thread.start()
    _warm_up(run)
    publisher = threading.Thread(target=run.publish, daemon=True)
    began = time.monotonic()
    publisher.start()
    for at, step in _timeline(run):
        time.sleep(max(0.0, began + at * run.plan.duration_s - time.monotonic()))
        step()
    time.sleep(max(0.0, began + run.plan.duration_s - time.monotonic()))
    run.stop_publishing.set()
    publisher.join(STEP_S)
    run.event("publishing stopped")
    deadline = time.monotonic() + run.plan.drain_s
    while time.monotonic() < deadline and not _all_arrived(run):
        time.sleep(0.2)
    drained = time.time_ns()
    run.event("drained" if _all_arrived(run) else "drain time over")
    run.stop_consuming.set()
    for thread in threads:
        thread.join(STEP_S)
    return drained


def _all_arrived(run: _Run) -> bool:
    with run.lock:
        return all(r.lost == 0 and r.expired == 0 for r in run.ledger.report(time.time_ns()))


def run_soak(directory: Path, plan: SoakPlan) -> SoakResult:
    """Start a three-node federation in ``directory``, run ``plan`` against it, stop it, report."""
    state = federation.up(directory, 3, prefix=plan.prefix)
    try:
        _issue_consumers(state)
        target, sources = asyncio.run(_register(state))
        run = _Run(state, plan, target, sources)
        drained = _drive(run)
        with run.lock:
            reports = run.ledger.report(drained, run.first_fault_ns)
        return SoakResult(plan, reports, run.memory, run.events)
    finally:
        federation.down(directory)
