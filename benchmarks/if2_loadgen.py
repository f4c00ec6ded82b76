"""IF2 load generator that is not the bottleneck: AMQP 0-9-1 publishers and consumers in N separate
processes (pika's BlockingConnection, TLS 1.3, SASL EXTERNAL, one connection each), so that the
generator scales past one Python core. Used by ``bench_if2.py --processes N``; on its own it measures
RabbitMQ's own topic routing flat out (the peer every IF2 figure is compared with):

    .venv/bin/python benchmarks/if2_loadgen.py [--messages 100000] [--publishers 2] [--consumers 2]

Publishers: ``count`` messages each to ``exchange`` with ``key`` (no confirms: as fast as RabbitMQ
takes them, as the peer), optionally paced at ``rate`` msgs/s each on a fixed grid whose slot
time is the stamp (coordinated omission avoided: a late publisher shows up as latency). A body is
``<send ns>:<publisher>:<index>:`` + padding to ~100 bytes. Consumers: competing consumers on one
queue (auto-ack, prefetch window) that keep ``(sent ns, received ns, publisher, index)`` per body;
the caller counts lost and duplicated messages from the (publisher, index) pairs. Every process
reports its own CPU (``resource.getrusage``), so a run shows the generator's cost per message.
``CConsumers`` are the same competing consumers as C processes (``loadgen/if2_consume.c``, rabbitmq-c:
the same TLS 1.3 client certificate, SASL EXTERNAL, prefetch, auto-ack and (sent, received, publisher,
index) records, at a tenth of pika's CPU per message), so that RabbitMQ alone is measured with a
consumer as cheap as the C AMQP 1.0 one the bridge's import is measured with. ``c_publish`` (through
``PublisherKind``) runs the publishers as C processes (``loadgen/if2_publish.c``, rabbitmq-c: the same
bodies, routing key and properties, one TLS record per message as pika's) in confirm mode with at
most 1,000 unconfirmed each, every nack, return or missing confirm counted as failed.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pika

#: A body's padding (a small DENM is ~100 bytes).
PADDING = b"\x00" * 64


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom a generator process connects (picklable: each process builds its context)."""
    host: str
    port: int
    pki_dir: str
    cn: str
    server_name: str


@dataclass
class ProcessReport:
    role: str
    messages: int
    cpu_s: float
    pairs: list[tuple[int, int, int, int]] = field(default_factory=list)  # consumers: sent, received, pub, idx
    failed: int = 0  # C publishers: not confirmed by RabbitMQ (nacked, returned, or no confirm at the end)


def _connect(endpoint: Endpoint) -> pika.BlockingConnection:
    from certs.tls import TlsFiles, client_context  # in the child: an SSLContext does not pickle

    context = client_context(TlsFiles.from_pki(endpoint.pki_dir, endpoint.cn, with_crls=False),
                             server_name=endpoint.server_name)
    params = pika.ConnectionParameters(host=endpoint.host, port=endpoint.port, virtual_host="/",
                                       credentials=pika.credentials.ExternalCredentials(),
                                       ssl_options=pika.SSLOptions(context, endpoint.server_name),
                                       heartbeat=0, blocked_connection_timeout=120)
    return pika.BlockingConnection(params)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def publisher(endpoint: Endpoint, exchange: str, key: str, number: int, count: int, rate: float,
              start: Any, out: Any) -> None:
    """Publish ``count`` bodies (flat out, or ``rate`` msgs/s on a grid) once ``start`` is set."""
    connection = _connect(endpoint)
    channel = connection.channel()
    props = pika.BasicProperties(expiration="60000", headers={})
    start.wait()
    cpu0, t0, interval = _cpu_s(), time.time_ns(), (1e9 / rate if rate else 0.0)
    for index in range(count):
        if interval:
            slot = t0 + int(index * interval)
            delay = (slot - time.time_ns()) / 1e9
            if delay > 0:
                time.sleep(delay)
            stamp = slot
        else:
            stamp = time.time_ns()
        channel.basic_publish(exchange, key, b"%d:%d:%d:" % (stamp, number, index) + PADDING, props)
    connection.process_data_events(0)
    connection.close()
    out.put(ProcessReport("publisher", count, _cpu_s() - cpu0))


def consumer(endpoint: Endpoint, queue: str, prefetch: int, ready: Any, stop: Any, counts: Any,
             slot: int, out: Any) -> None:
    """Consume ``queue`` (auto-ack) until ``stop`` is set; ``counts[slot]`` follows what arrived."""
    connection = _connect(endpoint)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    pairs: list[tuple[int, int, int, int]] = []
    cpu0 = _cpu_s()

    def on_message(_ch: Any, _method: Any, _props: Any, body: bytes) -> None:
        sent, pub, idx, _ = body.split(b":", 3)
        pairs.append((int(sent), time.time_ns(), int(pub), int(idx)))

    channel.basic_consume(queue, on_message, auto_ack=True)
    ready.release()
    while not stop.is_set():
        connection.process_data_events(time_limit=0.05)
        counts[slot] = len(pairs)
    connection.close()
    out.put(ProcessReport("consumer", len(pairs), _cpu_s() - cpu0, pairs))


@dataclass
class Run:
    """One flat-out or paced run: rates, latency, loss, duplicates and the generator's own CPU."""
    sent: int
    received: int
    lost: int
    duplicated: int
    rate: float  # received / (last receive - first send)
    p50_ms: float
    p99_ms: float
    publisher_cpu_us: float  # per message, all publisher processes
    consumer_cpu_us: float  # per message, all consumer processes (0 when the sink is not ours)
    publish_failed: int = 0  # publishes RabbitMQ did not confirm (C publishers; pika's do not ask)
    first_sent_ns: int = 0  # the traffic's span: the first send's stamp (time.time_ns) ...
    last_received_ns: int = 0  # ... to the last receive's


def summarize(sent_per_publisher: int, publishers: int, pairs: list[tuple[int, int, int, int]],
              reports: list[ProcessReport]) -> Run:
    seen = Counter((pub, idx) for _, _, pub, idx in pairs)
    unique = len(seen)
    sent = sent_per_publisher * publishers
    lat = sorted((r - s) / 1e6 for s, r, _, _ in pairs) or [0.0]
    span = (max(r for _, r, _, _ in pairs) - min(s for s, _, _, _ in pairs)) / 1e9 if pairs else 0.0
    cpu = {role: sum(r.cpu_s for r in reports if r.role == role) for role in ("publisher", "consumer")}
    return Run(sent, len(pairs), sent - unique, len(pairs) - unique, len(pairs) / span if span > 0 else 0.0,
               statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))],
               cpu["publisher"] / max(1, sent) * 1e6, cpu["consumer"] / max(1, len(pairs)) * 1e6,
               sum(r.failed for r in reports if r.role == "publisher"),
               min(s for s, _, _, _ in pairs) if pairs else 0, max(r for _, r, _, _ in pairs) if pairs else 0)


class Consumers:
    """``n`` consumer processes on ``queue``; ``collect`` stops them once ``expected`` arrived (or idle)."""

    def __init__(self, endpoint: Endpoint, queue: str, n: int, prefetch: int = 2000) -> None:
        ctx = mp.get_context("spawn")
        self.out, self.stop, self.counts = ctx.Queue(), ctx.Event(), ctx.Array("q", n, lock=False)
        ready = ctx.Semaphore(0)
        self.procs = [ctx.Process(target=consumer, args=(endpoint, queue, prefetch, ready, self.stop, self.counts,
                                                          i, self.out), daemon=True) for i in range(n)]
        for proc in self.procs:
            proc.start()
        for _ in self.procs:
            if not ready.acquire(timeout=60):
                raise RuntimeError("a consumer process did not start")

    def collect(self, expected: int, timeout: float, idle: float = 3.0) -> list[ProcessReport]:
        wait_for(lambda: sum(self.counts), expected, timeout, idle)
        self.stop.set()
        reports = [self.out.get(timeout=60) for _ in self.procs]
        for proc in self.procs:
            proc.join(10)
        return reports


def wait_for(received: Callable[[], int], expected: int, timeout: float, idle: float) -> None:
    """Until ``received()`` reached ``expected`` (then 0.3 s more), stayed put ``idle`` s, or ``timeout``."""
    deadline, last, last_change = time.monotonic() + timeout, -1, time.monotonic()
    while time.monotonic() < deadline:
        total = received()
        if total >= expected:
            time.sleep(0.3)  # a duplicate, if any, would arrive now
            return
        if total != last:
            last, last_change = total, time.monotonic()
        elif time.monotonic() - last_change > idle:
            return
        time.sleep(0.02)


#: if2_consume's record: sent ns, received ns (CLOCK_REALTIME, as time.time_ns), publisher, index.
SAMPLE = struct.Struct("=qqii")


class CConsumers:
    """``n`` if2_consume processes on ``queue`` (the interface of ``Consumers``); each appends its
    records to its own file, whose size ``collect`` follows, and stops on SIGTERM with a JSON report."""

    def __init__(self, binary: Path, endpoint: Endpoint, queue: str, n: int, prefetch: int = 2000,
                 ack_every: int = 0) -> None:
        from certs.tls import TlsFiles

        files = TlsFiles.from_pki(endpoint.pki_dir, endpoint.cn, with_crls=False)
        self.dir = Path(tempfile.mkdtemp(prefix="if2-consume-"))
        self.samples = [self.dir / f"{i}.samples" for i in range(n)]
        common = [str(binary), "--host", endpoint.host, "--port", str(endpoint.port), "--identity", endpoint.cn,
                  "--cert", str(files.cert_chain), "--key", str(files.key), "--ca", str(files.trust_bundle),
                  "--queue", queue, "--prefetch", str(prefetch), "--ack-every", str(ack_every)]
        self.procs = [subprocess.Popen([*common, "--samples", str(path)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
                      for path in self.samples]
        for proc in self.procs:
            assert proc.stderr is not None
            if proc.stderr.readline().strip() != "READY":
                out, err = proc.communicate(timeout=10)
                raise RuntimeError(f"a C consumer did not start: {out.strip()} {err.strip()}")

    def _received(self) -> int:
        return sum(path.stat().st_size // SAMPLE.size for path in self.samples if path.exists())

    def collect(self, expected: int, timeout: float, idle: float = 3.0) -> list[ProcessReport]:
        wait_for(self._received, expected, timeout, idle)
        reports = []
        for proc, path in zip(self.procs, self.samples):
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
            report = json.loads(out)
            if report["errors"] or proc.returncode:
                print(f"# C consumer: {report['errors']} ({err.strip()})", file=sys.stderr)
            pairs = [(s, r, p, i) for s, r, p, i in SAMPLE.iter_unpack(path.read_bytes())]
            reports.append(ProcessReport("consumer", len(pairs), float(report["cpu_s"]), pairs))
            path.unlink()
        self.dir.rmdir()
        return reports


@dataclass(frozen=True)
class ConsumerKind:
    """Which competing consumers read RabbitMQ's queues: ``binary`` (if2_consume) or, when None, pika;
    ``ack_every`` > 0: the C consumers acknowledge (multiple, every that many deliveries and whenever
    their input is drained) with ``prefetch``, as the IF2 bridge does, instead of auto-ack."""
    binary: Path | None = None
    ack_every: int = 0
    prefetch: int = 2000

    def start(self, endpoint: Endpoint, queue: str, n: int) -> Consumers | CConsumers:
        if self.binary is None:
            return Consumers(endpoint, queue, n)
        return CConsumers(self.binary, endpoint, queue, n, self.prefetch, self.ack_every)

    def __str__(self) -> str:
        acks = f", acks every {self.ack_every}, prefetch {self.prefetch}" if self.ack_every else ""
        return "Python (pika)" if self.binary is None else f"C ({self.binary.name}, rabbitmq-c{acks})"


def publish(endpoint: Endpoint, exchange: str, key: str, publishers: int, per_publisher: int,
            rate: float = 0.0, before_go: Callable[[], object] | None = None) -> list[ProcessReport]:
    """Run ``publishers`` processes, ``per_publisher`` messages each (``rate`` msgs/s each, 0: flat out);
    ``before_go`` is called once all are connected, just before they start (e.g. a barrier shared with
    another load that must start at the same time)."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=publisher, args=(endpoint, exchange, key, i, per_publisher, rate, start, out),
                         daemon=True) for i in range(publishers)]
    for proc in procs:
        proc.start()
    time.sleep(1.0)  # connected (TLS handshake) before the clock starts
    if before_go is not None:
        before_go()
    start.set()
    reports = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join(10)
    return reports


def c_publish(binary: Path, endpoint: Endpoint, exchange: str, key: str, publishers: int, per_publisher: int,
              rate: float = 0.0, window: int = 1000,
              before_go: Callable[[], object] | None = None) -> list[ProcessReport]:
    """``publish`` with if2_publish processes (rabbitmq-c): the same bodies, routing key and properties,
    in confirm mode with at most ``window`` unconfirmed each; all connected (READY) before any starts
    (``before_go`` then, as ``publish``'s)."""
    from certs.tls import TlsFiles

    files = TlsFiles.from_pki(endpoint.pki_dir, endpoint.cn, with_crls=False)
    common = [str(binary), "--host", endpoint.host, "--port", str(endpoint.port), "--identity", endpoint.cn,
              "--cert", str(files.cert_chain), "--key", str(files.key), "--ca", str(files.trust_bundle),
              "--exchange", exchange, "--routing-key", key, "--messages", str(per_publisher), "--rate", str(rate),
              "--window", str(window), "--timeout", str(120 + per_publisher * publishers / 500)]
    procs = [subprocess.Popen([*common, "--publisher", str(i)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(publishers)]
    for proc in procs:
        assert proc.stderr is not None
        if proc.stderr.readline().strip() != "READY":
            out, err = proc.communicate(timeout=10)
            raise RuntimeError(f"a C publisher did not connect: {out.strip()} {err.strip()}")
    if before_go is not None:
        before_go()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        report = json.loads(out)
        if report["errors"] or report["failed"] or proc.returncode:
            print(f"# C publisher: {report['failed']} of {report['messages']} not confirmed ({report['nacked']} "
                  f"nacked, {report['returned']} returned) {report['errors']} {err.strip()}", file=sys.stderr)
        reports.append(ProcessReport("publisher", int(report["published"]), float(report["cpu_s"]),
                                     failed=int(report["failed"])))
    return reports


@dataclass(frozen=True)
class PublisherKind:
    """Which publishers feed RabbitMQ's exchanges: ``binary`` (if2_publish, confirm mode) or, when None,
    pika (no confirms)."""
    binary: Path | None = None

    def publish(self, endpoint: Endpoint, exchange: str, key: str, publishers: int, per_publisher: int,
                rate: float = 0.0, before_go: Callable[[], object] | None = None) -> list[ProcessReport]:
        if self.binary is None:
            return publish(endpoint, exchange, key, publishers, per_publisher, rate, before_go)
        return c_publish(self.binary, endpoint, exchange, key, publishers, per_publisher, rate,
                         before_go=before_go)

    def __str__(self) -> str:
        return "Python (pika)" if self.binary is None else f"C ({self.binary.name}, rabbitmq-c, confirms)"


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def declare(endpoint: Endpoint, exchange: str, queue: str | None, key: str = "#") -> None:
    """A durable topic exchange and (unless None) an empty queue bound to it with ``key``."""
    connection = _connect(endpoint)
    channel = connection.channel()
    channel.exchange_declare(exchange, "topic", durable=True)
    if queue is not None:
        channel.queue_declare(queue, arguments={"x-max-length": 1_000_000, "x-message-ttl": 600_000})
        channel.queue_purge(queue)
        channel.queue_bind(queue, exchange, key)
    connection.close()


def publish_one(endpoint: Endpoint, exchange: str, key: str) -> None:
    """One body (publisher -1, index -1) from this process: to prime a route, not measured."""
    connection = _connect(endpoint)
    connection.channel().basic_publish(exchange, key, b"%d:-1:-1:" % time.time_ns() + PADDING,
                                       pika.BasicProperties(expiration="60000", headers={}))
    connection.close()


def print_run(label: str, run: Run, extra: str = "") -> None:
    print(f"{label:<26} {run.sent:>7} {run.received:>7} {run.lost:>5} {run.duplicated:>5} {run.rate:>9.0f} "
          f"{run.p50_ms:>8.2f} {run.p99_ms:>9.2f} {run.publisher_cpu_us:>8.1f} {run.consumer_cpu_us:>8.1f}{extra}")


HEADER = (f"{'run':<26} {'sent':>7} {'recv':>7} {'lost':>5} {'dup':>5} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>9} "
          f"{'pub µs':>8} {'cons µs':>8}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages of the flat-out run (all publishers)")
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--paced", type=int, default=2000, help="messages of the paced run (0: none)")
    parser.add_argument("--rate", type=float, default=200.0, help="msgs/s of the paced run (all publishers)")
    args = parser.parse_args(argv)
    from certs import create_test_pki
    from interchange.testing import rabbitmq

    rabbitmq.ensure_installed()
    with tempfile.TemporaryDirectory(prefix="if2-loadgen-") as tmp:
        work = Path(tmp)
        pki = create_test_pki(work / "pki", ["rabbitmq.if2.test"], ["if2-backoffice"])
        ident = pki.identity("rabbitmq.if2.test")
        broker = rabbitmq.RabbitMQ(work / "rabbitmq", pki_files={"chain": ident.chain, "key": ident.key,
                                                                 "trust": pki.trust_bundle},
                                   user="if2-backoffice", log=lambda *_: None)
        broker.start()
        try:
            endpoint = Endpoint("127.0.0.1", broker.port, str(pki.directory), "if2-backoffice", "rabbitmq.if2.test")
            declare(endpoint, "IVI", "bench-ivi")
            assert broker.beam_pid is not None
            print(f"# load {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores; RabbitMQ {rabbitmq.version()}; "
                  f"pika {pika.__version__}; {args.publishers} publisher and {args.consumers} consumer processes")
            print(HEADER + f" {'rabbit µs':>10}")
            for label, total, rate in (("rabbitmq flat out", args.messages, 0.0),
                                       (f"rabbitmq paced {args.rate:.0f}/s", args.paced, args.rate)):
                if not total:
                    continue
                per = max(1, total // args.publishers)
                consumers = Consumers(endpoint, "bench-ivi", args.consumers)
                beam0 = cpu_s(broker.beam_pid)
                pubs = publish(endpoint, "IVI", "IVI.1_2_1.RWS.0.1.2", args.publishers, per, rate / args.publishers)
                cons = consumers.collect(per * args.publishers, timeout=120 + total / 1000)
                pairs = [p for r in cons for p in r.pairs]
                run = summarize(per, args.publishers, pairs, pubs + cons)
                print_run(label, run, f" {(cpu_s(broker.beam_pid) - beam0) / max(1, run.received) * 1e6:>10.1f}")
        finally:
            broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
