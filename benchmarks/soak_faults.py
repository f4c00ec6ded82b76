"""A soak of faults together (not a test): one node process, its data directory on a small tmpfs,
for ``--minutes``:

- a steady client: durable DENMs at ``--rate`` to target ``in``, a consumer on source ``all``
  (publish-to-receive latency; every accepted message must arrive);
- stalled clients: ``interchange.testing.stalled_clients`` over and over (``--stalled`` connections
  per interface that stop in each stage of the preamble, BI and II, closed by the node's deadlines);
- fuzzed connections: ``interchange.testing.fuzz_clients`` (TLS, SASL, open, links, mangled
  transfers, random frames, then an abort), ``--fuzz`` at a time, over and over;
- one disk-full episode (a filler file takes the tmpfs's last byte for ``--full-s`` seconds: durable
  messages are refused with a reason meanwhile) and two SIGKILLs of the node, each started again.

Prints the timeline, then: published, accepted, refused, received, lost (accepted, never received:
goal 0), duplicates, latency p50/p99 of the steady client (all, and before the first fault), and
the node's RSS (first and last quarter, peak: goal flat). Needs root (mount).

    .venv/bin/python benchmarks/soak_faults.py [--minutes 10] [--rate 50]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from proton import Timeout
from proton.utils import SendException

from certs import TestPki
from certs.tls import TlsFiles, client_context
from ii_api.settings.config import IIConfig
from interchange.app.config import BrokerConfig, LogConfig, NodeConfig, StoreConfig, TlsConfig
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.ground.ports import free_port
from interchange.testing.broker_harness import BROKER_CN, NodeProcess
from interchange.testing.fuzz_clients import Churn, churn
from interchange.testing.harness import amqp_client, body_bytes, denm, make_pki


class Soak:
    """The node, the clients' threads and what they saw."""

    def __init__(self, pki: TestPki, work: Path, disk: Path, args: argparse.Namespace) -> None:
        self.pki, self.disk, self.args = pki, disk, args
        identity = pki.identity(BROKER_CN)
        self.bi_port, self.ii_port = free_port(), free_port()
        self.config = NodeConfig(
            name=BROKER_CN, data_dir=disk,
            tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle,
                          crls=list(pki.crls)),
            broker=BrokerConfig(host="127.0.0.1", port=self.bi_port, store=StoreConfig(segment_bytes=64 * 1024),
                                targets=[TargetSpec(address="in", publishers=frozenset({"actor-1"}))],
                                sources=[SourceSpec(address="all", consumers=frozenset({"actor-2"}))]),
            log=LogConfig(path=work / "node.log", level="info", properties=False),
            ii=IIConfig(host="127.0.0.1", port=self.ii_port, public_host="127.0.0.1"))
        self.node = NodeProcess(self.config)
        self.started = time.monotonic()
        self.stop = threading.Event()  #: the publisher and the hostile clients stop
        self.done = threading.Event()  #: the consumer and the sampler stop (after the drain)
        self.lock = threading.Lock()
        self.published = 0
        self.accepted: set[int] = set()
        self.refused = 0
        self.received: dict[int, float] = {}  #: seq -> latency ms (first delivery)
        self.duplicates = 0
        self.first_fault_ns: int | None = None
        self.fault_seq = 0  #: the last seq published before the first fault
        self.rss: list[tuple[float, float]] = []
        self.events: list[tuple[float, str]] = []

    def event(self, text: str) -> None:
        self.events.append((round(time.monotonic() - self.started, 1), text))
        print(f"  {self.events[-1][0]:7.1f} s  {text}", flush=True)

    # ------------------------------------------------------------ the steady client
    def publish(self) -> None:
        interval, due, seq = 1.0 / self.args.rate, time.monotonic(), 0
        connection, sender = None, None
        while not self.stop.is_set():
            if connection is None or sender is None:
                try:
                    connection = amqp_client(self.pki, "actor-1", self.bi_port, BROKER_CN, 5.0)
                    sender = connection.create_sender("in")
                except Exception:
                    connection = None
                    time.sleep(0.2)
                    continue
            seq += 1
            body = f"{seq}|{time.time_ns()}|".encode().ljust(100, b".")
            message = denm(body=body)
            message.durable, message.ttl = True, 1800.0
            with self.lock:
                self.published += 1
            try:
                sender.send(message, timeout=5.0)
                with self.lock:
                    self.accepted.add(seq)
            except SendException:
                with self.lock:
                    self.refused += 1
            except (Timeout, Exception):  # the connection broke (a kill): not accepted, reconnect
                with contextlib.suppress(Exception):
                    connection.close()
                connection = None
            due += interval
            time.sleep(max(0.0, due - time.monotonic()))

    def consume(self) -> None:
        while not self.done.is_set():
            try:
                connection = amqp_client(self.pki, "actor-2", self.bi_port, BROKER_CN, 5.0)
                receiver = connection.create_receiver("all", credit=200)
            except Exception:
                time.sleep(0.2)
                continue
            try:
                while not self.done.is_set():
                    try:
                        message = receiver.receive(timeout=0.5)
                    except Timeout:
                        continue
                    self._received(body_bytes(message))
                    receiver.accept()
            except Exception:  # the connection broke: reconnect
                time.sleep(0.2)
            finally:
                with contextlib.suppress(Exception):
                    connection.close()

    def _received(self, body: bytes) -> None:
        seq, sent_ns = (int(x) for x in body.split(b"|", 2)[:2])
        with self.lock:
            if seq in self.received:
                self.duplicates += 1
            else:
                self.received[seq] = (time.time_ns() - sent_ns) / 1e6

    # ------------------------------------------------------------ the hostile clients
    def stalled(self) -> None:
        while not self.stop.is_set():
            subprocess.run([sys.executable, "-m", "interchange.testing.stalled_clients", "--bi",
                            f"127.0.0.1:{self.bi_port}", "--ii", f"127.0.0.1:{self.ii_port}", "--count",
                            str(self.args.stalled), "--pki", str(self.pki.directory), "--server-name", BROKER_CN,
                            "--trickle-s", "0.5", "--path", "/actor-1/subscriptions"],
                           capture_output=True, check=False, timeout=120)

    def fuzz(self) -> None:
        context = client_context(TlsFiles.from_pki(self.pki.directory, "actor-1", with_crls=False))
        fuzz = Churn("127.0.0.1", self.bi_port, context, BROKER_CN, bytes(denm().encode()))
        while not self.stop.is_set():
            with contextlib.suppress(Exception):
                asyncio.run(churn(fuzz, self.args.fuzz, concurrency=5))
            time.sleep(0.5)

    def sample(self) -> None:
        while not self.done.is_set():
            with contextlib.suppress(Exception):
                self.rss.append((time.monotonic() - self.started, self.node.rss_mb()))
            self.done.wait(2.0)

    # ------------------------------------------------------------ the faults
    def fault(self) -> None:
        if self.first_fault_ns is None:
            self.first_fault_ns = time.time_ns()
            with self.lock:
                self.fault_seq = self.published

    def disk_full(self) -> None:
        self.fault()
        filler = self.disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        chunk = 1 << 20
        with contextlib.suppress(OSError):
            while chunk:
                try:
                    os.write(fd, bytes(chunk))
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    chunk //= 2
        os.close(fd)
        self.event(f"disk full ({os.statvfs(self.disk).f_bavail} blocks free)")
        time.sleep(self.args.full_s)
        filler.unlink()
        self.event("disk space back")

    def kill(self) -> None:
        self.fault()
        pid = self.node.process.pid
        os.kill(pid, signal.SIGKILL)
        self.node.process.wait()
        self.event(f"kill -9 (pid {pid})")
        self.node = NodeProcess(self.config)
        self.event(f"restarted (pid {self.node.process.pid})")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def run(soak: Soak, minutes: float, drain_s: float) -> None:
    duration = minutes * 60
    threads = [threading.Thread(target=t, daemon=True)
               for t in (soak.consume, soak.publish, soak.stalled, soak.fuzz, soak.sample)]
    for thread in threads:
        thread.start()
    steps = [(0.25, soak.disk_full), (0.45, soak.kill), (0.75, soak.kill)]
    for at, step in steps:
        time.sleep(max(0.0, soak.started + at * duration - time.monotonic()))
        step()
    time.sleep(max(0.0, soak.started + duration - time.monotonic()))
    soak.event("stop publishing")
    soak.stop.set()  # the hostile clients too; the consumer drains
    threads[1].join(30)
    deadline = time.monotonic() + drain_s
    while time.monotonic() < deadline:
        with soak.lock:
            if soak.accepted <= soak.received.keys():
                break
        time.sleep(0.2)
    soak.event("drained" if soak.accepted <= soak.received.keys() else "drain time over")
    soak.done.set()


def report(soak: Soak) -> None:
    with soak.lock:
        lost = sorted(soak.accepted - soak.received.keys())
        latencies = list(soak.received.values())
        steady = [ms for seq, ms in soak.received.items() if seq <= soak.fault_seq]
    print(f"published {soak.published}, accepted {len(soak.accepted)}, refused {soak.refused}, "
          f"received {len(soak.received)}, duplicates {soak.duplicates}")
    print(f"accepted durable messages lost: {len(lost)}{' ' + str(lost[:20]) if lost else ''}")
    print(f"latency ms p50/p99: all {percentile(latencies, 0.5):.2f}/{percentile(latencies, 0.99):.2f}, "
          f"before the first fault {percentile(steady, 0.5):.2f}/{percentile(steady, 0.99):.2f} ({len(steady)})")
    values = [mb for _, mb in soak.rss]
    quarter = max(1, len(values) // 4)
    if values:
        print(f"node RSS MB: first quarter {sum(values[:quarter]) / quarter:.1f}, last quarter "
              f"{sum(values[-quarter:]) / quarter:.1f}, peak {max(values):.1f} ({len(values)} samples)")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=50.0, help="steady durable messages per second")
    parser.add_argument("--stalled", type=int, default=50, help="stalled connections per interface per round")
    parser.add_argument("--fuzz", type=int, default=100, help="fuzzed connections per round")
    parser.add_argument("--full-s", type=float, default=20.0, help="how long the disk stays full")
    parser.add_argument("--disk-mb", type=int, default=64, help="the data directory's tmpfs")
    parser.add_argument("--drain", type=float, default=60.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="soak-faults-"))
    disk = work / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.disk_mb}m,mode=0700", "tmpfs", str(disk)], check=True)
    print(f"soak of faults: {args.minutes:g} min, {args.rate:g} durable msgs/s, in {work}; "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    soak = None
    try:
        soak = Soak(make_pki(work / "pki"), work, disk, args)
        run(soak, args.minutes, args.drain)
        report(soak)
    finally:
        if soak is not None:
            soak.node.stop()
        subprocess.run(["umount", "-l", str(disk)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
