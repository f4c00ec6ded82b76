"""A real broker on 127.0.0.1 with a real test PKI, and proton clients speaking to it over TLS 1.3.

The broker runs in its own thread and event loop (as in production: one loop for the node), so
tests can use proton's blocking client API from the test thread.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from proton import Delivery, Handler, Message
from proton.reactor import Selector
from proton.utils import BlockingConnection

from certs import TestPki
from interchange.testing.paths import REPO_ROOT
from interchange.app.config import BrokerConfig, LogConfig, NodeConfig, TlsConfig
from interchange.app.node import RunningNode, start_node
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.testing.harness import BROKER_CN, amqp_client, body_bytes, denm, make_pki

__all__ = ["BROKER_CN", "BrokerUnderTest", "RawCollector", "client_connection", "denm", "ivim", "make_pki", "selector_option",
           "start_broker", "tls_exchange", "wait_for_records"]

STEP_TIMEOUT = 10.0
#: A node start waits for its worker processes as long as the node itself does (processes.START_TIMEOUT_S):
#: on the shared 2-core machine, starting 2-3 Python processes alone can take ~10 s.
START_TIMEOUT = 60.0

T = TypeVar("T")


@dataclass
class BrokerUnderTest:
    """A started node: its loop thread, ports, and handles on its core."""

    pki: TestPki
    node: RunningNode
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    log_path: Path

    @property
    def port(self) -> int:
        assert self.node.amqps_port is not None
        return self.node.amqps_port

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the broker's loop thread and return its result."""
        async def wrapper() -> T:
            return fn()
        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(STEP_TIMEOUT)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(STEP_TIMEOUT)

    def connect(self, cn: str, **kwargs: Any) -> BlockingConnection:
        """A proton BlockingConnection authenticated as ``cn`` (SASL EXTERNAL over TLS 1.3)."""
        return client_connection(self.pki, cn, self.port, **kwargs)

    def stop(self) -> None:
        try:
            self.run(self.node.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(STEP_TIMEOUT)
            self.loop.close()


@contextlib.contextmanager
def running_broker(pki: TestPki, workdir: Path, targets: Iterable[TargetSpec] = (),
                   sources: Iterable[SourceSpec] = (), **options: Any) -> Iterator[BrokerUnderTest]:
    """:func:`start_broker`, stopped when the block ends (e.g. in a fixture: ``with ... as b: yield b``)."""
    broker = start_broker(pki, workdir, targets, sources, **options)
    try:
        yield broker
    finally:
        broker.stop()


def client_connection(pki: TestPki, cn: str, port: int, **kwargs: Any) -> BlockingConnection:
    """A client of the broker under test (see :func:`harness.amqp_client`)."""
    return amqp_client(pki, cn, port, BROKER_CN, STEP_TIMEOUT, **kwargs)


def start_broker(pki: TestPki, workdir: Path, targets: Iterable[TargetSpec] = (),
                 sources: Iterable[SourceSpec] = (), *, log_options: dict[str, Any] | None = None,
                 **broker_options: Any) -> BrokerUnderTest:
    """A node on 127.0.0.1 logging to ``workdir/node.log`` (debug, properties and payload on; ``log_options``
    overrides [log] keys, e.g. rotation)."""
    identity = pki.identity(BROKER_CN)
    log_path = workdir / "node.log"
    config = NodeConfig(
        name=BROKER_CN,
        data_dir=workdir,
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle,
                      crls=list(pki.crls)),
        broker=BrokerConfig(host="127.0.0.1", targets=list(targets), sources=list(sources),
                            **{"port": 0, **broker_options}),
        log=LogConfig(**{"path": log_path, "level": "debug", "properties": True, "payload": True, **(log_options or {})}),
    )
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready = threading.Event()

    def main() -> None:
        asyncio.set_event_loop(loop)

        async def boot() -> None:
            try:
                started["node"] = await start_node(config)
            except BaseException as exc:  # reported to the test thread
                started["error"] = exc
            finally:
                ready.set()

        loop.create_task(boot())
        loop.run_forever()

    thread = threading.Thread(target=main, name="broker-loop", daemon=True)
    thread.start()
    if not ready.wait(START_TIMEOUT):
        raise TimeoutError("broker did not start")
    if "error" in started:
        raise started["error"]
    return BrokerUnderTest(pki, started["node"], loop, thread, log_path)


def receive_from_every_process(pki: TestPki, ports: list[int], source: str, count: int, cn: str = "actor-2",
                                timeout: float = 20.0) -> list[bytes]:
    """Up to ``count`` bodies ``cn`` reads from ``source`` over one link per broker process (in
    arrival order per link), within ``timeout`` seconds."""
    connections = [client_connection(pki, cn, port) for port in ports]
    got: list[bytes] = []
    try:
        receivers = [connection.create_receiver(source, credit=50) for connection in connections]
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for receiver in receivers:
                try:
                    message = receiver.receive(timeout=0.2)
                except Exception:  # proton.Timeout: nothing from this process yet
                    continue
                receiver.accept()
                got.append(body_bytes(message))
        return got
    finally:
        for connection in connections:
            connection.close()


def tls_exchange(port: int, context: ssl.SSLContext, payload: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
    """Send raw ``payload`` over TLS; (everything the broker answers, whether it closed within ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=BROKER_CN) as tls:
            tls.sendall(payload)
            data = b""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    chunk = tls.recv(4096)
                except socket.timeout:
                    return data, False
                except (ssl.SSLError, OSError):
                    return data, True
                if not chunk:
                    return data, True
                data += chunk
            return data, False


def ivim(quad_tree: str = ",031332213323322232,", **extra: Any) -> Message:
    properties: dict[str, Any] = {
        "publisherId": "ES00002",
        "publicationId": "ES00002:ivim-1",
        "originatingCountry": "ES",
        "protocolVersion": "IVIM:1.2.1",
        "messageType": "IVIM",
        "quadTree": quad_tree,
    }
    properties.update(extra)
    return Message(body=b"\x10ivim", properties=properties, inferred=True)


def send_raw(conn: BlockingConnection, address: str, payloads: list[bytes], name: str | None = None) -> list[Delivery]:
    """Send already-encoded messages as they are (one sender link, named ``name``) and wait for
    the broker's outcome of each."""
    sender = conn.create_sender(address, name=name)
    deliveries = []
    for i, raw in enumerate(payloads):
        delivery = sender.link.delivery(f"t{i}")
        sender.link.send(raw)
        sender.link.advance()
        deliveries.append(delivery)
    conn.wait(lambda: all(d.remote_state for d in deliveries), timeout=10, msg="no dispositions")
    return deliveries


class RawCollector(Handler):
    """Receives deliveries as raw bytes (to check byte-exact forwarding) and accepts them."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: list[bytes] = []

    def on_delivery(self, event) -> None:  # noqa: ANN001 - proton event
        delivery, link = event.delivery, event.link
        if delivery.readable and not delivery.partial:
            self.raw.append(bytes(link.recv(delivery.pending)))
            link.advance()
            delivery.update(Delivery.ACCEPTED)
            delivery.settle()


def selector_option(text: str) -> Selector:
    return Selector(text)


def start_node_process(config_path: Path) -> tuple[subprocess.Popen, str]:
    """``python -m interchange broker --config ...`` as operators run it (so that it can be signalled), and
    the line it prints once listening ("... AMQPS port <ports>, plain ..."); its stderr if it stops instead."""
    process = subprocess.Popen([sys.executable, "-m", "interchange", "broker", "--config", str(config_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    assert process.stdout is not None
    line = process.stdout.readline()
    if "AMQPS port" not in line:
        process.kill()
        raise AssertionError(line + (process.stderr.read() if process.stderr else ""))
    return process, line


class NodeProcess:
    """A node run as operators run it, from ``config`` (written to ``<data_dir>/node.json``): its BI
    and II ports, its stderr read as it comes (a full pipe would stop it), its resident memory."""

    def __init__(self, config: NodeConfig) -> None:
        path = config.data_dir / "node.json"
        path.write_text(config.model_dump_json())
        self.log = config.log.path
        self.process, line = start_node_process(path)
        words = line.replace(",", "").split()
        self.bi_port = int(words[words.index("AMQPS") + 2])
        ii = words[words.index("(HTTPS)") + 2]
        self.ii_port = int(ii) if ii.isdigit() else None
        self.stderr: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def rss_mb(self) -> float:
        """The node process's resident memory (VmRSS) in MB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def stop(self) -> None:
        terminate(self.process)


def terminate(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """Stop a node process as an operator does (SIGTERM: graceful), killing it if it does not stop in time."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def complete_records(path: Path) -> list[dict[str, Any]]:
    """The JSON log's records so far; a last line still being written by the log's thread is left out."""
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line]


def wait_for_records(broker: BrokerUnderTest, wanted: Callable[[dict], bool], failure: str, timeout: float = 5.0) -> list[dict]:
    """The log records ``wanted`` selects, once there are any (the log is written by a thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = complete_records(broker.log_path)
        found = [r for r in records if wanted(r)]
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(failure)
