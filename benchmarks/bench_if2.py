"""IF2 bridge benchmark (a script, not a test): messages per second and added latency through the
bridge, IF2 publisher -> C-Roads consumer and C-Roads publisher -> IF2 consumer, against RabbitMQ's
own topic routing (IF2 publisher -> IF2 consumer) in the same run.

Set-up: a private RabbitMQ (interchange/testing/rabbitmq.py: Debian's rabbitmq-server, TLS 1.3,
SASL EXTERNAL) and a node with the II and the IF2 bridge (``interchange broker --config``, its own
process), all on 127.0.0.1 with a generated test PKI. This process runs the clients in one asyncio
loop: an IF2 back-office (aio-pika, a Table 3 queue) and a C-ITS actor (the node's own AMQP 1.0
client, TLS 1.3 + SASL EXTERNAL). Every body carries its send time (time.time_ns); latency is
receive time minus that. CPU per message: utime + stime of the node process and of RabbitMQ's
beam.smp over each phase, divided by its messages (less sensitive to a loaded machine than rates).

Scenarios (each: a throughput phase, N messages published as fast as the publisher can, rate =
N / (last receive - first send); and a latency phase, M messages paced at a fixed rate, p50/p99):

- ``rabbitmq``: back-office -> IVI exchange -> back-office queue (RabbitMQ alone, the reference; the
  bridge imports only DENM in this set-up, so it does no work here);
- ``if2->croads``: back-office -> DENM exchange -> bridge -> BI -> C-ITS actor (selector subscription);
- ``croads->if2``: C-ITS actor -> BI -> bridge -> SPAT exchange -> back-office queue.

    .venv/bin/python benchmarks/bench_if2.py [--messages 3000] [--paced 400 --rate 200] [--json FILE]

With ``--processes P [--consumers C]`` the IF2 side is the multi-process generator of
``if2_loadgen.py`` (P publisher processes, C consumer processes, every body naming its publisher
and index): the same scenarios, plus lost and duplicated counts and the generator's own
CPU per message, so a run shows whether the generator was the bottleneck, and each flat-out phase's
CPU by process (publishers, consumers or the C-ITS actor, RabbitMQ, the node; µs per message and CPU
seconds) with each bridge path's extra over RabbitMQ alone, and the node's event-loop wake-ups per message
(fewer: more messages per read and per write). The import's C-Roads consumer is the C
load generator (``--import-consumer c``, accepting each delivery; ``c-presettled``: sent settled, as
RabbitMQ alone's auto-ack consumers; ``python``: this process), the export's C-ITS actor too
(``--actor``); both report their own CPU. The consumers at RabbitMQ (RabbitMQ alone's, and the
export's IF2 back-office) are C processes too (``--rabbit-consumer c``: ``loadgen/if2_consume.c``,
rabbitmq-c, auto-ack as pika's; ``python``: pika processes), so each side of a ratio is measured
with consumers of the same cost; and so are the publishers at RabbitMQ (RabbitMQ alone's, and the
import's IF2 back-office: ``--rabbit-publisher c``, ``loadgen/if2_publish.c``, rabbitmq-c in confirm
mode, at most 1,000 unconfirmed each, the unconfirmed counted per phase; ``python``: pika processes,
no confirms), as the export's C-ITS actor publishes in C. ``--rabbit-ack-every N`` makes RabbitMQ
alone's C consumers acknowledge as the bridge does (``basic.ack`` multiple every N deliveries and
whenever their input is drained, ``--prefetch`` unacknowledged) instead of auto-ack: with
``--consumers 1`` RabbitMQ alone then does what the import asks of it, less the node.
Its phases: flat out (``--messages``), then each of ``--rates`` msgs/s for ``--paced-s`` seconds on
a grid whose slot is the stamp (coordinated omission avoided); ``--rounds N`` repeats RabbitMQ
alone, import and export N times (alternated; ``--directions import`` leaves the export out);
``--tree DIR`` runs the node from another checkout (a before/after pair in one session);
``--profile P`` samples the node with py-spy over each flat-out phase (``--profile-rate`` samples a
second) and prints where its time goes (``profile_categories.py``). The bridge's queues are bounded
at 1,000,000 here: IF2's default of 10,000 would drop what a flat-out publisher puts ahead.
``--rabbitmq-busy-wait`` sets the Erlang VM's scheduler busy waiting of the private RabbitMQ:
``none`` (the default: RabbitMQ's own start-up default, and its runtime guide's advice where the
CPUs are shared, as here) or ``erlang-default`` (the VM's own thresholds, idle schedulers spin); the
run prints the thresholds its ``beam.smp`` was started with.
Whether a round's ratio is the bridge's or the host's: ``--control`` adds RabbitMQ alone again right after the
round's first (``rabbitmq-again``; and ``rabbitmq-short`` with the export's flat-out count), measured as the bridge
is, an A/A ratio beside the bridge's; ``--bracket`` (the default with ``--processes``; ``--no-bracket``: the order
before) runs the flat-out phases first with RabbitMQ alone after each, and takes each ratio against the mean of
its two neighbours too; every phase reports the rest of the host (``host_cpu.py``: other processes by process,
steal, and the machine's idle while its messages flowed), a phase with others and steal at 0.1 cores or more
marked DISTURBED (benchmarks/README.md, "IF2: the bridge or the host?").
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
from proton import Message

from certs import TestPki, create_test_pki
from certs.tls import TlsFiles, client_context
from interchange.broker.client import ClientConnection
from interchange.testing import rabbitmq
from interchange.testing.harness import body_bytes
import host_cpu  # (this script's folder)
import if2_loadgen as loadgen  # (this script's folder)
import profile_categories as categories  # (this script's folder)
import node_process  # (this script's folder)
from node_process import actor_api, start_node

LOADGEN_SRC = node_process.ROOT / "benchmarks" / "loadgen" / "loadgen.c"
LOADGEN_BIN = node_process.ROOT / "build" / "loadgen"
CONSUME_SRC = LOADGEN_SRC.with_name("if2_consume.c")
CONSUME_BIN = LOADGEN_BIN.with_name("if2_consume")  # build.sh builds it next to the load generator
PUBLISH_SRC, PUBLISH_BIN = LOADGEN_SRC.with_name("if2_publish.c"), LOADGEN_BIN.with_name("if2_publish")
AMQP_091_HEADER = LOADGEN_SRC.with_name("if2_amqp.h")  # if2_consume's and if2_publish's connection
NODE, RABBIT, BRIDGE, BACKOFFICE, ACTOR = ("a.interchange.test", "rabbitmq.if2.test", "if2-bridge",
                                          "if2-backoffice", "croads-actor")
TILE = "120202130121133020"
DENM_KEY = "DENM.1_2_1.RWS.5." + ".".join(TILE)
IVI_KEY = "IVI.1_2_1.RWS.0." + ".".join(TILE)  # the baseline's: an exchange the bridge does not import
SPATEM_PROPS = {"messageType": "SPATEM", "protocolVersion": "SPATEM:2.1.1", "publisherId": "NL00001",
                "publicationId": "NL00001:spat-bench", "originatingCountry": "NL", "quadTree": f",{TILE},"}
#: ``--floor``'s plain BI path: an actor of its own publishing IVIM (a type the bridge neither imports nor
#: exports here, so the bridge does no work for it) to its own IVIM subscription, with eight properties as
#: the import's BI DENMs have (the two integer DENM codes as two string IVIM lists: the C generator's
#: ``--property`` puts strings)
PLAIN = "bi-plain"
PLAIN_PROPS = {"messageType": "IVIM", "protocolVersion": "IVIM:2.0.0", "publisherId": "NL00001",
               "publicationId": "NL00001:if2-IVI-1_2_1", "originatingCountry": "NL", "quadTree": f",{TILE},",
               "iviType": ",1,", "pictogramCategoryCode": ",557,"}


@dataclass
class Result:
    scenario: str
    phase: str
    messages: int
    rate: float  # messages per second
    p50_ms: float
    p99_ms: float
    node_cpu_us: float = 0.0  # node process (BI + II + bridge) CPU per message
    rabbit_cpu_us: float = 0.0  # RabbitMQ (beam.smp) CPU per message
    lost: int = -1  # counted with --processes (every body names its publisher and index); -1: not counted
    duplicated: int = -1
    gen_cpu_us: float = 0.0  # the load generator's CPU per message (both ends: 0-9-1 processes, 1.0 client)
    round: int = 1  # (--rounds: RabbitMQ alone and the bridge alternated)
    pub_cpu_us: float = 0.0  # of gen_cpu_us: the publishing end (pika processes, or the C-ITS actor)
    cons_cpu_us: float = 0.0  # of gen_cpu_us: the consuming end (pika processes, or the C-ITS actor)
    pub_failed: int = 0  # publishes RabbitMQ did not confirm (C publishers ask; pika's do not)
    others_cpu_us: float = 0.0  # the machine's busy CPU per message outside the node, RabbitMQ and the clients
    steal_us: float = 0.0  # the machine's steal per message (the host ran something else on its CPUs)
    node_wakeups: float = 0.0  # the node's event-loop thread: times it slept and was woken, per message
    bench_us: float = 0.0  # this process's CPU per message (the benchmark's own: its threads, the Python clients)
    reaped_us: float = 0.0  # CPU per message of the client processes that ended in the phase, all of it (start-up,
    # connecting and waiting included: their own reports, pub_cpu_us and cons_cpu_us, count less)
    slot: int = 0  # the phase's place in the run (1, 2, ...: --bracket's neighbours)
    wall_s: float = 0.0  # the phase's wall time as host_cpu measured it (from its CPU readings to its result)
    others_cores: float = 0.0  # the rest of the host over the phase (host_cpu): other processes' CPU, cores
    steal_cores: float = 0.0  # steal over the phase, cores
    idle_cores: float = -1.0  # the machine's idle while the messages flowed (first send to last receive), cores:
    # a phase bound by the CPUs leaves ~0 (host_cpu.Sampler; -1: not known, a span under 40 ms)
    traffic_steal_cores: float = -1.0  # the machine's steal while the messages flowed, cores
    irq_cores: float = 0.0  # the machine's irq and softirq over the phase, cores
    others_top: str = ""  # the largest other processes (comm pid cores)
    load1: float = 0.0  # the 1-minute load average at the phase's end
    disturbed: bool = False  # others + steal >= host_cpu.DISTURBED_CORES


def cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads) in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wakeups(pid: int) -> int:
    """How often the process's main thread (the node's event loop) gave up the CPU to wait, each a wake-up
    later (``voluntary_ctxt_switches``: nearly all of them epoll waits that found nothing ready)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def machine_cpu() -> tuple[float, float]:
    """The machine's busy CPU seconds (all processes, all cores: user, nice, system, irq, softirq) and its
    steal (time this virtual machine's CPUs were runnable but the host ran something else), from /proc/stat."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


@dataclass(frozen=True)
class Usage:
    """One reading at a phase's start: ``values`` the CPU seconds of the node and of RabbitMQ, the node's
    wake-ups (:func:`wakeups`), the machine's busy and steal seconds (:func:`machine_cpu`); ``host`` every
    process's CPU (host_cpu: the rest of the host over the phase); ``own`` this process's CPU seconds and
    those of its children that ended and were waited for (``os.times``)."""
    values: list[float]
    host: host_cpu.Snapshot
    own: tuple[float, float] = (0.0, 0.0)


def own_cpu() -> tuple[float, float]:
    """This process's CPU seconds (user + system), and its ended, waited-for children's."""
    times = os.times()
    return times.user + times.system, times.children_user + times.children_system


def usage(pids: tuple[int, int]) -> Usage:
    return Usage([*(cpu_s(pid) for pid in pids), float(wakeups(pids[0])), *machine_cpu()], host_cpu.snapshot(),
                 own_cpu())


def stats(scenario: str, phase: str, sends: list[int], receives: list[int]) -> Result:
    lat = sorted((r - s) / 1e6 for s, r in zip(sends, receives))
    span = (max(receives) - min(sends)) / 1e9
    return Result(scenario, phase, len(lat), len(lat) / span if span > 0 else 0.0, statistics.median(lat),
                  lat[min(len(lat) - 1, int(len(lat) * 0.99))])


def stamp(index: int) -> bytes:
    return b"%d:%d:" % (time.time_ns(), index) + b"\x00" * 64  # ~100 bytes, like a small DENM


def sent_at(body: bytes) -> int:
    return int(body.split(b":", 1)[0])


# ------------------------------------------------------------------ set-up
def node_config(pki: TestPki, broker: rabbitmq.RabbitMQ, workdir: Path, bi_door: str = "amqps",
                prefetch: int = 1000) -> Path:
    ident, bridge = pki.identity(NODE), pki.identity(BRIDGE)
    config = {
        "name": NODE, "data_dir": str(workdir / "var"),
        "tls": {"cert_chain": str(ident.chain), "key": str(ident.key), "trust_bundle": str(pki.trust_bundle),
                "crls": [str(c) for c in pki.crls]},
        "broker": {"host": "127.0.0.1", "port": 0},
        "log": {"path": str(workdir / "node.log"), "level": "warning", "properties": False, "payload": False},
        "ii": {"host": "127.0.0.1", "port": 0, "public_host": "127.0.0.1"},
        "if2": {"url": broker.url, "server_name": RABBIT, "actor": BRIDGE,
                "tls": {"cert_chain": str(bridge.chain), "key": str(bridge.key), "trust_bundle": str(pki.trust_bundle)},
                "providers": [{"name": "RWS", "publisher_id": "NL00001", "coverage": ["1202"]}],
                "imports": {"DENM": ["#"]}, "exports": {"SPAT": ["#"]}, "prefetch": prefetch, "bi_door": bi_door,
                "queue_max_length": 1_000_000},  # flat out, RabbitMQ queues what the bridge has not taken yet
    }
    path = workdir / "node.json"
    path.write_text(json.dumps(config))
    return path


async def actor_setup(pki: TestPki, ii_port: int) -> tuple[str, str]:
    """The C-ITS actor's delivery target (SPATEM) and its DENM subscription's source."""
    async with actor_api(pki.directory, ACTOR, NODE, ii_port) as post:
        cap = {"application": {**{k: v for k, v in SPATEM_PROPS.items() if k != "quadTree"}, "quadTree": ["1202"]}}
        await post("/capabilities", {"name": ACTOR, "capabilities": [cap]})
        delivery = await post("/deliveries", {"name": ACTOR, "deliveries": [{"selector": "TRUE"}]})
        sub = await post("/subscriptions", {"name": ACTOR, "subscriptions": [{"selector": "messageType = 'DENM'"}]})
    return delivery["deliveries"][0]["endpoints"][0]["target"], sub["subscriptions"][0]["endpoints"][0]["source"]


async def plain_setup(pki: TestPki, ii_port: int) -> tuple[str, str]:
    """``--floor``'s plain BI path: the delivery target and the IVIM subscription's source of PLAIN."""
    async with actor_api(pki.directory, PLAIN, NODE, ii_port) as post:
        cap = {"application": {**{k: v for k, v in PLAIN_PROPS.items() if k not in ("quadTree", "iviType",
                                                                                   "pictogramCategoryCode")},
                               "quadTree": ["1202"]}}
        await post("/capabilities", {"name": PLAIN, "capabilities": [cap]})
        delivery = await post("/deliveries", {"name": PLAIN, "deliveries": [{"selector": "TRUE"}]})
        sub = await post("/subscriptions", {"name": PLAIN, "subscriptions": [{"selector": "messageType = 'IVIM'"}]})
    return delivery["deliveries"][0]["endpoints"][0]["target"], sub["subscriptions"][0]["endpoints"][0]["source"]


def bi_sizes() -> tuple[int, int]:
    """The bytes of one BI message of the import (the bridge's DENM of DENM_KEY with a 60 s expiration and
    a stamp's body) and of ``--floor``'s plain path (PLAIN_PROPS, the same body and ttl), as encoded."""
    from interchange.bridges.if2 import bi_message, keys

    body = stamp3(0)
    providers = keys.ProviderTable.of([("RWS", "NL00001")])
    imported = bi_message.message(bi_message.application_properties(
        keys.croads_properties(keys.envelope_of(DENM_KEY, 60_000, {}), providers)), body, 60_000)
    plain = Message(body=body, properties=PLAIN_PROPS, inferred=True, ttl=60.0).encode()
    return len(imported), len(plain)


# ------------------------------------------------------------------ scenarios
class BackOffice:
    def __init__(self, connection: Any, channel: Any) -> None:
        self.connection, self.channel = connection, channel
        self.received: list[tuple[int, int]] = []  # (sent, received) ns
        self.wanted = 0
        self.done = asyncio.Event()

    @classmethod
    async def connect(cls, pki: TestPki, broker: rabbitmq.RabbitMQ) -> "BackOffice":
        context = client_context(TlsFiles.from_pki(pki.directory, BACKOFFICE, with_crls=False), server_name=RABBIT)
        connection = await aio_pika.connect(broker.url + "?auth=external", ssl_context=context)
        return cls(connection, await connection.channel())

    async def bind(self, exchange: str) -> Any:
        await self.channel.set_qos(prefetch_count=1000)
        queue = await self.channel.declare_queue("", exclusive=True, auto_delete=True,
                                                 arguments={"x-max-length": 100_000, "x-message-ttl": 600_000})
        await queue.bind(exchange, routing_key="#")
        await queue.consume(self._on_message, no_ack=True)
        return queue

    async def _on_message(self, message: Any) -> None:
        self.received.append((sent_at(message.body), time.time_ns()))
        if len(self.received) >= self.wanted:
            self.done.set()

    def expect(self, count: int) -> None:
        self.received, self.wanted = [], count
        self.done.clear()

    async def publish(self, exchange: Any, index: int, key: str = DENM_KEY) -> None:
        await exchange.publish(aio_pika.Message(stamp(index), headers={}, expiration=60), routing_key=key)


class CroadsActor:
    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.received: list[tuple[int, int]] = []
        self.keys: list[list[bytes]] = []  # (publisher, index) of each body, for loss and duplicates
        self.wanted = 0
        self.done = asyncio.Event()

    def on_message(self, raw: bytes) -> None:
        message = Message()
        message.decode(raw)
        body = body_bytes(message)
        self.received.append((sent_at(body), time.time_ns()))
        self.keys.append(body.split(b":", 3)[1:3])
        if len(self.received) >= self.wanted:
            self.done.set()

    def expect(self, count: int) -> None:
        self.received, self.keys, self.wanted = [], [], count
        self.done.clear()


async def drive(send: Any, count: int, rate: float | None, slots: bool = False) -> None:
    """``count`` sends: flat out (100 in flight at a time) or paced at ``rate`` msgs/s. With ``slots``
    a paced send is given its slot on the grid (ns) to stamp, so a late sender shows up as latency
    (coordinated omission avoided, as the IF2 generator does)."""
    interval = 1.0 / rate if rate else 0.0
    start, start_ns = time.monotonic(), time.time_ns()
    if not interval:
        for first in range(0, count, 100):
            await asyncio.gather(*(send(i) for i in range(first, min(first + 100, count))))
    for i in range(count if interval else 0):
        await (send(i, start_ns + int(i * interval * 1e9)) if slots else send(i))
        await asyncio.sleep(max(0.0, start + (i + 1) * interval - time.monotonic()))


async def run_phase(name: str, phase: str, count: int, rate: float | None, send: Any, sink: Any,
                    pids: tuple[int, int]) -> Result:
    sink.expect(count)
    cpu0 = [cpu_s(pid) for pid in pids]
    await drive(send, count, rate)
    await asyncio.wait_for(sink.done.wait(), 120)
    pairs = sink.received[:count]
    result = stats(name, phase, [s for s, _ in pairs], [r for _, r in pairs])
    result.node_cpu_us, result.rabbit_cpu_us = ((cpu_s(pid) - c) / count * 1e6 for pid, c in zip(pids, cpu0))
    return result


async def scenarios(pki: TestPki, broker: rabbitmq.RabbitMQ, amqps: int, ii: int, args: argparse.Namespace,
                    pids: tuple[int, int]) -> list[Result]:
    target, source = await actor_setup(pki, ii)
    office = await BackOffice.connect(pki, broker)
    publisher = await office.connection.channel()  # no confirms: as fast as RabbitMQ takes them
    denm = await publisher.declare_exchange("DENM", aio_pika.ExchangeType.TOPIC, durable=True)
    await publisher.declare_exchange("SPAT", aio_pika.ExchangeType.TOPIC, durable=True)
    ivi = await publisher.declare_exchange("IVI", aio_pika.ExchangeType.TOPIC, durable=True)
    context = client_context(TlsFiles.from_pki(pki.directory, ACTOR, with_crls=False))
    amqp = await ClientConnection.open("127.0.0.1", amqps, context, NODE, "bench-actor")
    actor = CroadsActor(amqp)
    results = []
    try:
        # 1. RabbitMQ alone: IVI exchange (the bridge imports only DENM here) -> a Table 3 queue
        baseline = await office.bind("IVI")
        for phase, count, rate in (("throughput", args.messages, None), ("latency", args.paced, args.rate)):
            results.append(await run_phase("rabbitmq", phase, count, rate,
                                           lambda i: office.publish(ivi, i, IVI_KEY), office, pids))
        await baseline.delete(if_unused=False, if_empty=False)
        await office.channel.close()
        office.channel = await office.connection.channel()
        # 2. IF2 -> C-Roads through the bridge
        amqp.open_receiver(source, actor.on_message, credit=1000)
        actor.expect(1)  # the first one registers the capability (not measured); the bridge may still be binding
        for _ in range(30):
            await office.publish(denm, -1)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(actor.done.wait()), 1.0)
            if actor.done.is_set():
                break
        await asyncio.wait_for(actor.done.wait(), 1.0)
        for phase, count, rate in (("throughput", args.messages, None), ("latency", args.paced, args.rate)):
            results.append(await run_phase("if2->croads", phase, count, rate,
                                           lambda i: office.publish(denm, i), actor, pids))
        # 3. C-Roads -> IF2 through the bridge (every body differs: no republishing suppression)
        await office.bind("SPAT")
        sender = amqp.open_sender(target)

        async def send_spatem(i: int) -> None:
            message = Message(body=stamp(i), properties=SPATEM_PROPS, inferred=True, ttl=60.0)
            if args.confirm_each or i % 200 == 199:
                outcome = await amqp.publish(sender, message.encode())
                assert outcome.accepted, outcome
            else:
                while not amqp.engine.send(sender, message.encode()):
                    await asyncio.sleep(0.001)
                amqp.flush()
        for phase, count, rate in (("throughput", args.messages, None), ("latency", args.paced, args.rate)):
            results.append(await run_phase("croads->if2", phase, count, rate, send_spatem, office, pids))
    finally:
        await amqp.close()
        await office.connection.close()
    return results


# ------------------------------------------------------------------ the same, IF2 side in processes
def stamp3(index: int, at_ns: int | None = None) -> bytes:
    """Publisher 0 (the C-Roads actor), sent at ``at_ns`` (its slot when paced) or now."""
    return b"%d:0:%d:" % (at_ns or time.time_ns(), index) + loadgen.PADDING


def mp_result(name: str, phase: str, run: loadgen.Run, start: Usage, pids: tuple[int, int],
              pub_cpu_us: float, cons_cpu_us: float) -> Result:
    host = host_cpu.delta(start.host, host_cpu.snapshot())
    traffic = host_cpu.sampler().over(run.first_sent_ns, run.last_received_ns)
    mine, reaped = ((now - then) / max(1, run.received) * 1e6 for now, then in zip(own_cpu(), start.own))
    cpu0 = start.values
    node, rabbit = ((cpu_s(pid) - c) / max(1, run.received) * 1e6 for pid, c in zip(pids, cpu0))
    woken = (wakeups(pids[0]) - cpu0[2]) / max(1, run.received) if len(cpu0) > 2 else 0.0
    others = steal = 0.0
    if len(cpu0) > 4:
        busy, stolen = machine_cpu()
        steal = (stolen - cpu0[4]) / max(1, run.received) * 1e6
        others = (busy - cpu0[3]) / max(1, run.received) * 1e6 - (node + rabbit + pub_cpu_us + cons_cpu_us)
    return Result(name, phase, run.received, run.rate, run.p50_ms, run.p99_ms, node, rabbit, run.lost,
                  run.duplicated, pub_cpu_us + cons_cpu_us, pub_cpu_us=pub_cpu_us, cons_cpu_us=cons_cpu_us,
                  pub_failed=run.publish_failed, node_wakeups=woken, others_cpu_us=others, steal_us=steal,
                  bench_us=mine, reaped_us=reaped,
                  wall_s=host.wall_s, others_cores=host.others_cores, steal_cores=host.steal_cores,
                  irq_cores=host.irq_cores,
                  others_top=", ".join(f"{comm} {pid} {cores:.2f}" for comm, pid, cores in host.top),
                  load1=host.load1, disturbed=host.disturbed, idle_cores=traffic[0] if traffic else -1.0,
                  traffic_steal_cores=traffic[1] if traffic else -1.0)


def rabbit_phase(endpoint: loadgen.Endpoint, args: argparse.Namespace, phase: str, count: int, rate: float,
                 pids: tuple[int, int], kind: loadgen.ConsumerKind, publishers: loadgen.PublisherKind,
                 before_go: Callable[[], object] | None = None, scenario: str = "rabbitmq") -> Result:
    """IF2 publisher processes -> IVI exchange -> consumer processes (RabbitMQ alone); ``before_go``:
    called once the publishers are connected, just before they start (``--floor``'s barrier)."""
    per = max(1, count // args.processes)
    consumers = kind.start(endpoint, "bench-ivi", args.consumers)
    probe0 = cpu_probe() if not rate else ""
    cpu0, threads0 = usage(pids), beam_threads(pids[1])
    pubs = publishers.publish(endpoint, "IVI", IVI_KEY, args.processes, per, rate / args.processes, before_go)
    cons = consumers.collect(per * args.processes, timeout=120 + count / 500)
    threads = beam_threads(pids[1])
    run = loadgen.summarize(per, args.processes, [p for r in cons for p in r.pairs], pubs + cons)
    result = mp_result(scenario, phase, run, cpu0, pids, run.publisher_cpu_us, run.consumer_cpu_us)
    if not rate:  # (the probe after the phase's readings: its CPU is not the rest of the host's)
        print(f"# {scenario} {phase}: " + threads_line(threads0, threads, run.received)
              + f"; CPU probe before: {probe0}; after: {cpu_probe()}", flush=True)
    return result


def cpu_probe(steps: int = 300_000) -> str:
    """On each CPU in turn (this thread bound to it): ns of CPU per step of a fixed Python loop (~15 ms):
    the same work every time, so a higher figure is a slower CPU (a virtual machine's host busier on that
    core or its sibling, its clock lower), not more work."""
    cpus = sorted(os.sched_getaffinity(0))
    cells = []
    try:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            start = time.thread_time_ns()
            total = 0
            for i in range(steps):
                total += i
            cells.append(f"CPU {cpu} {(time.thread_time_ns() - start) / steps:.1f}")
    finally:
        os.sched_setaffinity(0, cpus)
    return ", ".join(cells) + " ns a step"


def beam_threads(pid: int) -> dict[str, tuple[float, int, int]]:
    """RabbitMQ's ``beam.smp`` by thread name (the schedulers ``1_scheduler``, ``2_scheduler``, the rest
    as ``other``): CPU seconds, context switches (voluntary and not) and the CPU each last ran on
    (``/proc/<pid>/task/*/stat`` field 39; -1 for ``other``)."""
    out: dict[str, tuple[float, int, int]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            head, tail = (task / "stat").read_text().rsplit(")", 1)
            status = (task / "status").read_text().splitlines()
        except OSError:
            continue  # (a thread that ended)
        fields, name = tail.split(), head.split("(", 1)[1]
        name = name if name.endswith("_scheduler") and name[0].isdigit() else "other"
        switches = sum(int(line.split()[1]) for line in status if "ctxt_switches:" in line)
        cpu, ctx, _ = out.get(name, (0.0, 0, -1))
        out[name] = (cpu + (int(fields[11]) + int(fields[12])) / tick, ctx + switches,
                     int(fields[36]) if name != "other" else -1)
    return out


def threads_line(before: dict[str, tuple[float, int, int]], after: dict[str, tuple[float, int, int]],
                 messages: int) -> str:
    """Each ``beam_threads`` group's CPU µs and context switches per message over a phase, and its last CPU."""
    cells = []
    for name in sorted(after):
        cpu, ctx, where = after[name]
        cpu0, ctx0, _ = before.get(name, (0.0, 0, -1))
        cells.append(f"{name} {(cpu - cpu0) / max(1, messages) * 1e6:.1f} µs, {(ctx - ctx0) / max(1, messages):.3f} "
                     "switches" + (f", last on CPU {where}" if where >= 0 else ""))
    return "RabbitMQ's threads per message: " + "; ".join(cells)


#: the system calls ``--profiler syscalls`` counts (the node's socket reads and writes, its loop's waits)
SYSCALLS = ("sendto", "recvfrom", "write", "read", "epoll_wait", "epoll_ctl", "getpid")


def _py_spy() -> str:
    """py-spy beside this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else (shutil.which("py-spy") or str(beside))


class Profile:
    """A profiler on the node over one phase (``--profile``): py-spy, its samples by category
    (profile_categories); or with ``--profiler perf`` Linux perf (the process's CPU, kernel included:
    py-spy also counts time the node is preempted inside a system call), its top symbols."""

    def __init__(self, args: argparse.Namespace, name: str, pid: int) -> None:
        self.perf = getattr(args, "profiler", "py-spy") == "perf"
        suffix = {"perf": "perf.data", "syscalls": "syscalls"}.get(getattr(args, "profiler", ""), "raw")
        self.raw = args.profile.with_name(f"{args.profile.name}-{name}.{suffix}") if args.profile else None
        self.spy = None
        if self.raw is None:
            return
        command = ["perf", "record", "-F", str(args.profile_rate), "-g", "-p", str(pid), "-o", str(self.raw)] \
            if self.perf else [_py_spy(), "record", "--pid", str(pid), "--rate", str(args.profile_rate),
                               "--format", "raw", "--nonblocking", "--output", str(self.raw)]
        if getattr(args, "profiler", "") == "syscalls":
            self.perf = False
            command = ["perf", "stat", "-x", ",", "-o", str(self.raw), "-p", str(pid), "-e",
                       ",".join([*(f"syscalls:sys_enter_{call}" for call in SYSCALLS), "raw_syscalls:sys_enter",
                                 "context-switches", "cpu-migrations", "task-clock"])]
        self.spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self, result: Result) -> None:
        if self.spy is None or self.raw is None:
            return
        self.spy.send_signal(signal.SIGINT)
        self.spy.wait(60)
        if self.raw.name.endswith(".syscalls"):
            counts = {line.split(",")[2].split("sys_enter_")[-1]: float(line.split(",")[0])
                      for line in self.raw.read_text().splitlines() if line.count(",") > 2 and line[0].isdigit()}
            print(f"# {result.scenario} {result.phase}: the node's counts per message (system calls; "
                  "context switches, migrations; task-clock in ms): "
                  + ", ".join(f"{call} {count / max(1, result.messages):.3f}" for call, count in counts.items()))
            return
        if self.perf:
            report = subprocess.run(["perf", "report", "-i", str(self.raw), "--stdio", "--no-children",
                                     "--sort", "dso,sym", "--percent-limit", "0.7", "-g", "none"],
                                    capture_output=True, text=True, check=False).stdout
            print(f"# {result.scenario} {result.phase}: the node's CPU samples (perf, {self.raw})\n"
                  + "\n".join(line for line in report.splitlines() if line.strip() and not line.startswith("#")))
            return
        print(f"# {result.scenario} {result.phase}: the node's samples (py-spy, {self.raw})\n"
              + categories.render(categories.categorise(self.raw), result.node_cpu_us))


@dataclass(frozen=True)
class CConsumer:
    """The import's C-Roads consumer as the C load generator (``--import-consumer c``): one AMQPS
    connection (TLS 1.3, the actor's certificate, SASL EXTERNAL) with a receiver on the actor's DENM
    subscription, ``credit`` at a time, until the expected count arrived and 0.5 s passed without
    another; every body's IF2 stamp kept (``--if2-samples``) for latency, lost and duplicated, and its
    own CPU from its first delivery to its last. ``presettled``: the link asks the BI to send settled
    (``snd-settle-mode`` settled: no disposition per message, as RabbitMQ alone's auto-ack consumers);
    otherwise it accepts each delivery."""
    binary: Path
    pki_dir: Path
    amqps: int
    source: str
    workdir: Path
    presettled: bool = False
    credit: int = 5000
    identity: str = ACTOR

    def start(self, count: int) -> tuple[subprocess.Popen[str], Path]:
        """The consumer's process, once its link is attached (READY), and its samples file."""
        files = TlsFiles.from_pki(self.pki_dir, self.identity, with_crls=False)
        samples = self.workdir / f"import-{time.monotonic_ns()}.samples"
        (self.workdir / "consumers.txt").write_text(self.source + "\n")  # (read before READY)
        command = [str(self.binary), "run", "--url", f"amqps://127.0.0.1:{self.amqps}", "--cert",
                   str(files.cert_chain), "--key", str(files.key), "--ca", str(files.trust_bundle), "--vhost", NODE,
                   "--producers", "0", "--consumers", str(self.workdir / "consumers.txt"), "--consumer-credit",
                   str(self.credit), "--expect", str(count), "--idle-ms", "500", "--if2-samples", str(samples),
                   "--timeout", str(120 + count / 500), *(() if self.presettled else ("--consumer-unsettled",))]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.strip() == "READY":
                return proc, samples
        proc.wait(10)
        raise RuntimeError(f"the C consumer did not attach: {proc.returncode}")

    @staticmethod
    def finish(proc: subprocess.Popen[str], samples: Path) -> tuple[dict[str, Any], list[tuple[int, int, int, int]]]:
        """Its JSON report and (sent ns, received ns, publisher, index) per delivery."""
        out, _ = proc.communicate(timeout=600)
        report: dict[str, Any] = json.loads(out)
        data = samples.read_bytes()
        pairs = [(sent, received, pub, idx) for sent, received, pub, idx in struct.iter_unpack("=qqii", data)]
        samples.unlink()
        return report, pairs


async def import_phase(endpoint: loadgen.Endpoint, args: argparse.Namespace, phase: str, count: int,
                       rate: float, actor: CroadsActor | CConsumer, pids: tuple[int, int],
                       publishers: loadgen.PublisherKind) -> Result:
    """IF2 publisher processes -> DENM exchange -> bridge -> BI -> the C-Roads consumer (the C load
    generator, or this process)."""
    per = max(1, count // args.processes)
    if isinstance(actor, CConsumer):
        proc, samples = await asyncio.to_thread(actor.start, per * args.processes)
    else:
        actor.expect(per * args.processes)
    profile = Profile(args if not rate else argparse.Namespace(profile=None), "import", pids[0])
    probe0 = cpu_probe() if not rate else ""
    cpu0, own0 = usage(pids), time.process_time()
    pubs = await asyncio.to_thread(publishers.publish, endpoint, "DENM", DENM_KEY, args.processes, per,
                                   rate / args.processes)
    if isinstance(actor, CConsumer):
        report, pairs = await asyncio.to_thread(actor.finish, proc, samples)
        consumer_cpu_s = float(report["cpu_s"])
    else:
        with contextlib.suppress(asyncio.TimeoutError):  # a loss shows in the counts, not as a crash
            await asyncio.wait_for(actor.done.wait(), 120 + count / 500)
        await asyncio.sleep(0.5)  # a duplicate, if any, would arrive now
        pairs = [(s, r, int(k[0]), int(k[1])) for (s, r), k in zip(actor.received, actor.keys)]
        consumer_cpu_s = time.process_time() - own0
    run = loadgen.summarize(per, args.processes, pairs, pubs)
    own = consumer_cpu_s / max(1, run.received) * 1e6
    result = mp_result("if2->croads", phase, run, cpu0, pids, run.publisher_cpu_us, own)
    if not rate:
        print(f"# if2->croads {phase}: CPU probe before: {probe0}; after: {cpu_probe()}", flush=True)
    profile.stop(result)
    return result


def ensure_c_actor() -> Path | None:
    """The C load generator (benchmarks/loadgen, built into build/ with if2_consume and if2_publish when
    one is missing or older than its sources), or None where they cannot be built (no gcc,
    libqpid-proton11-dev or librabbitmq-dev)."""
    if any(not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime
           for binary, source in ((LOADGEN_BIN, LOADGEN_SRC), (CONSUME_BIN, CONSUME_SRC), (CONSUME_BIN, AMQP_091_HEADER),
                                  (PUBLISH_BIN, PUBLISH_SRC), (PUBLISH_BIN, AMQP_091_HEADER))):
        try:
            subprocess.run(["sh", str(LOADGEN_SRC.parent / "build.sh"), str(LOADGEN_BIN)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"# the C actor could not be built ({exc}); the export's actor is this process", file=sys.stderr)
            return None
    return LOADGEN_BIN


@dataclass(frozen=True)
class CActor:
    """The export's C-ITS actor as the C load generator: one AMQP 1.0 connection (TLS 1.3, the actor's
    certificate, SASL EXTERNAL) publishing SPATEM_PROPS messages with the bench stamps (``--if2-stamps``:
    publisher 0, index 0..count-1) to the actor's delivery target, at most ``window`` unsettled, each
    counted once the BI accepted it."""
    binary: Path
    pki_dir: Path
    amqps: int
    target: str
    window: int = 1000
    identity: str = ACTOR
    properties: tuple[tuple[str, str], ...] = tuple(SPATEM_PROPS.items())

    def command(self, count: int, rate: float) -> list[str]:
        files = TlsFiles.from_pki(self.pki_dir, self.identity, with_crls=False)
        props = [arg for key, value in self.properties for arg in ("--property", f"{key}={value}")]
        return [str(self.binary), "run", "--url", f"amqps://127.0.0.1:{self.amqps}", "--target", self.target,
                "--cert", str(files.cert_chain), "--key", str(files.key), "--ca", str(files.trust_bundle),
                "--vhost", NODE, "--messages", str(count), "--producers", "1", "--window", str(self.window),
                "--rate", str(rate), "--ttl", "60000", "--if2-stamps", *props, "--sync", "--idle-ms", "0",
                "--timeout", str(120 + count / 500)]

    def run(self, count: int, rate: float, pids: tuple[int, int],
            before_go: Callable[[], object] | None = None) -> tuple[dict[str, Any], Usage]:
        """Publish ``count`` messages: the generator's JSON report (its own CPU over publishing in
        ``cpu_s``) and the node's and RabbitMQ's CPU once its link was attached (READY; ``before_go``
        called then, before it starts)."""
        proc = subprocess.Popen(self.command(count, rate), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, bufsize=1)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        cpu0: Usage | None = None
        try:
            for line in proc.stderr:
                if line.strip() == "READY":
                    if before_go is not None:
                        before_go()
                    cpu0 = usage(pids)
                if line.strip() in ("READY", "DONE"):
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                if line.strip() == "DONE":
                    break
            out = proc.stdout.read()
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        report: dict[str, Any] = json.loads(out)
        if report["accepted"] != count or report["timed_out"] or report["aborted"]:
            print(f"# C actor: {report['accepted']} of {count} accepted ({report.get('errors')})", file=sys.stderr)
        return report, cpu0 if cpu0 is not None else usage(pids)


async def export_phase(endpoint: loadgen.Endpoint, args: argparse.Namespace, phase: str, count: int,
                       rate: float, send: Any, pids: tuple[int, int], kind: loadgen.ConsumerKind,
                       c_actor: CActor | None = None) -> Result:
    """The C-ITS actor (the C generator, or this process) -> BI -> bridge -> SPAT exchange -> consumer
    processes."""
    consumers = await asyncio.to_thread(kind.start, endpoint, "bench-spat", args.consumers)
    profile = Profile(args if not rate else argparse.Namespace(profile=None), "export", pids[0])
    probe0 = cpu_probe() if not rate else ""
    if c_actor is not None:
        report, cpu0 = await asyncio.to_thread(c_actor.run, count, rate, pids)
        own = float(report["cpu_s"])
        print(f"# croads->if2 {phase}: the C actor {own / max(1, count) * 1e6:.1f} µs per message, "
              f"{report['accepted']} accepted by the BI ({report['sent_per_s']:,.0f} msgs/s sent)", flush=True)
    else:
        cpu0, own0 = usage(pids), time.process_time()
        await drive(send, count, rate, slots=True)
        own = time.process_time() - own0
    cons = await asyncio.to_thread(consumers.collect, count, 120 + count / 500)
    run = loadgen.summarize(count, 1, [p for r in cons for p in r.pairs], cons)
    result = mp_result("croads->if2", phase, run, cpu0, pids, own / max(1, count) * 1e6, run.consumer_cpu_us)
    if not rate:  # (as the import's and RabbitMQ alone's: the CPUs' speed just before and after)
        print(f"# croads->if2 {phase}: CPU probe before: {probe0}; after: {cpu_probe()}", flush=True)
    profile.stop(result)
    return result


@dataclass(frozen=True)
class PlainPath:
    """``--floor``'s plain BI path: the C load generator publishing PLAIN_PROPS (PLAIN's delivery target)
    and the import's kind of C consumer on PLAIN's IVIM subscription: the node's broker work with no bridge."""
    publisher: CActor
    consumer: CConsumer


async def floor_phase(endpoint: loadgen.Endpoint, args: argparse.Namespace, count: int, pids: tuple[int, int],
                      kind: loadgen.ConsumerKind, publishers: loadgen.PublisherKind, plain: PlainPath,
                      rate: float) -> list[Result]:
    """RabbitMQ alone flat out (``rabbitmq+bi``) while the node routes as many messages at the same time
    over its plain BI path (``bi plain``), both started together (a barrier once each is connected):
    what an import does at least (RabbitMQ's work and a BI delivery) with nothing of the bridge's. The
    plain path's publisher is paced at ``rate`` msgs/s (0: flat out): flat out it would take its share
    of the CPU in the phase's first third and leave RabbitMQ alone for the rest, where an import's BI
    deliveries come at RabbitMQ's pace.
    The ``bi plain`` row's node CPU is over its own publishing and the rest of the phase (RabbitMQ's
    side does not touch the node); the ``rabbitmq+bi`` row's RabbitMQ CPU is its own side's."""
    per = max(1, count // args.processes)
    total = per * args.processes
    proc, samples = await asyncio.to_thread(plain.consumer.start, total)
    together = threading.Barrier(2, timeout=120)
    bi = asyncio.to_thread(plain.publisher.run, total, rate, pids, together.wait)
    rabbit = asyncio.to_thread(rabbit_phase, endpoint, args, "flat out", count, 0.0, pids, kind, publishers,
                               together.wait, "rabbitmq+bi")
    (report, cpu0), rabbit_result = await asyncio.gather(bi, rabbit)
    consumer_report, pairs = await asyncio.to_thread(plain.consumer.finish, proc, samples)
    run = loadgen.summarize(total, 1, pairs, [])
    result = mp_result("bi plain", "flat out", run, cpu0, pids, float(report["cpu_s"]) / max(1, total) * 1e6,
                       float(consumer_report["cpu_s"]) / max(1, run.received) * 1e6)
    result.rabbit_cpu_us = rabbit_result.node_cpu_us = 0.0  # (each row is its own side's)
    return [rabbit_result, result]


#: ``--control``'s scenario: RabbitMQ alone again, right after the round's first, the same phases (an A/A pair)
CONTROL = "rabbitmq-again"
#: ``--control`` with the export's flat-out phase shorter (``--export-messages``): RabbitMQ alone flat out again with
#: that many messages, the export's A/A (a shorter phase's rate moves more, and its pipeline's fill weighs more)
CONTROL_SHORT = "rabbitmq-short"

#: a scenario's phase (name, messages, msgs/s, 0: flat out) -> its results (``--floor``'s: two, or none paced)
Step = Callable[[str, int, float], Awaitable[list[Result]]]


def is_alone(scenario: str) -> bool:
    """RabbitMQ alone as the reference: the round's first (``rabbitmq``) or ``--bracket``'s after a step
    (``rabbitmq-2``, ``rabbitmq-3``, ...); the A/A control (CONTROL) is measured against them, as the bridge."""
    return scenario == "rabbitmq" or (scenario.startswith("rabbitmq-") and scenario[9:].isdigit())


async def run_round(results: list[Result], phases: list[tuple[str, int, float]], alone: Callable[[str], Step],
                    steps: list[Step], bracket: bool) -> None:
    """One round into ``results``: RabbitMQ alone, then each step (the control, the floor, the import, the
    export) in turn, each one's flat-out phase then its paced ones. With ``bracket``: the flat-out phases
    first, RabbitMQ alone again after each step's (``rabbitmq-2``, ...: every step's flat-out phase between
    two of RabbitMQ alone's), then every scenario's paced phases in the same order."""
    everyone = [alone("rabbitmq"), *steps]
    if not bracket:
        for step in everyone:
            for phase in phases:
                results += await step(*phase)
        return
    results += await everyone[0](*phases[0])
    for number, step in enumerate(steps, 2):
        results += await step(*phases[0])
        results += await alone(f"rabbitmq-{number}")(*phases[0])
    for step in everyone:
        for phase in phases[1:]:
            results += await step(*phase)


async def scenarios_mp(pki: TestPki, broker: rabbitmq.RabbitMQ, amqps: int, ii: int, args: argparse.Namespace,
                       pids: tuple[int, int], workdir: Path) -> list[Result]:
    host_cpu.sampler()  # (from now on: each phase's idle while its messages flow)
    target, source = await actor_setup(pki, ii)
    endpoint = loadgen.Endpoint("127.0.0.1", broker.port, str(pki.directory), BACKOFFICE, RABBIT)
    for exchange, queue in (("IVI", "bench-ivi"), ("SPAT", "bench-spat"), ("DENM", None)):
        await asyncio.to_thread(loadgen.declare, endpoint, exchange, queue)
    phases = [("flat out", args.messages, 0.0)] + [
        (f"{rate:g}/s", int(rate * args.paced_s) if args.paced_s else args.paced, rate) for rate in args.rates]
    context = client_context(TlsFiles.from_pki(pki.directory, ACTOR, with_crls=False))
    amqp = await ClientConnection.open("127.0.0.1", amqps, context, NODE, "bench-actor")
    actor = CroadsActor(amqp)
    results: list[Result] = []
    try:
        amqp.open_receiver(source, actor.on_message, credit=5000)
        actor.expect(1)  # the first one registers the capability (not measured); the bridge may still be binding
        for _ in range(30):
            await asyncio.to_thread(loadgen.publish_one, endpoint, "DENM", DENM_KEY)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(actor.done.wait()), 1.0)
            if actor.done.is_set():
                break
        binary = (ensure_c_actor() if "c" in (args.actor, args.import_consumer[0], args.rabbit_consumer,
                                              args.rabbit_publisher) else None)
        kind = loadgen.ConsumerKind(CONSUME_BIN if binary is not None and args.rabbit_consumer == "c" else None,
                                    args.rabbit_ack_every, args.prefetch if args.rabbit_ack_every else 2000)
        pubs = loadgen.PublisherKind(PUBLISH_BIN if binary is not None and args.rabbit_publisher == "c" else None)
        c_actor = CActor(binary, pki.directory, amqps, target) if binary is not None and args.actor == "c" else None
        importer: CroadsActor | CConsumer = actor
        if binary is not None and args.import_consumer[0] == "c":  # the source's only consumer from now on
            importer = CConsumer(binary, pki.directory, amqps, source, workdir,
                                 presettled=args.import_consumer == "c-presettled")
            await amqp.close()
            amqp = await ClientConnection.open("127.0.0.1", amqps, context, NODE, "bench-actor")
        sender = amqp.open_sender(target)
        plain = None
        if args.floor:
            if binary is None:
                raise SystemExit("--floor needs the C load generator (benchmarks/loadgen/build.sh)")
            plain_target, plain_source = await plain_setup(pki, ii)
            plain = PlainPath(CActor(binary, pki.directory, amqps, plain_target, identity=PLAIN,
                                     properties=tuple(PLAIN_PROPS.items())),
                              CConsumer(binary, pki.directory, amqps, plain_source, workdir,
                                        presettled=args.import_consumer == "c-presettled", identity=PLAIN))
            imported, plain_bytes = bi_sizes()
            print(f"# --floor: the plain BI path's messages are {plain_bytes} bytes (the import's BI messages "
                  f"{imported}); its consumer as the import's ({args.import_consumer})", flush=True)
        print(f"# the export's C-ITS actor: {'the C load generator' if c_actor else 'this process (Python)'}; "
              f"the import's C-Roads consumer: " + ("this process (Python)" if importer is actor else
                                                    f"the C load generator ({args.import_consumer})")
              + f"; RabbitMQ's consumers (RabbitMQ alone, the export's back-office): {kind} x {args.consumers}"
              + f"; RabbitMQ's publishers (RabbitMQ alone, the import's back-office): {pubs} x {args.processes}")

        async def send_spatem(i: int, at_ns: int | None = None) -> None:
            message = Message(body=stamp3(i, at_ns), properties=SPATEM_PROPS, inferred=True, ttl=60.0)
            if i % 200 == 199:
                outcome = await amqp.publish(sender, message.encode())
                assert outcome.accepted, outcome
            else:
                while not amqp.engine.send(sender, message.encode()):
                    await asyncio.sleep(0.001)
                amqp.flush()
        def alone(scenario: str) -> Step:
            async def step(name: str, count: int, rate: float) -> list[Result]:
                return [await asyncio.to_thread(rabbit_phase, endpoint, args, name, count, rate, pids, kind, pubs,
                                                None, scenario)]
            return step

        async def import_step(name: str, count: int, rate: float) -> list[Result]:
            return [await import_phase(endpoint, args, name, count, rate, importer, pids, pubs)]

        export_count = args.export_messages if c_actor is not None and args.export_messages else args.messages

        async def export_step(name: str, count: int, rate: float) -> list[Result]:
            count = count if rate else export_count  # (the BI's buffer: see --export-messages)
            return [await export_phase(endpoint, args, name, count, rate, send_spatem, pids, kind, c_actor)]

        async def control_short(name: str, count: int, rate: float) -> list[Result]:
            return [] if rate else await alone(CONTROL_SHORT)(name, export_count, rate)

        def beside_plain(first: int, round_: int) -> Step:
            async def step(name: str, count: int, rate: float) -> list[Result]:
                if rate or plain is None:
                    return []  # (flat out only)
                pace = results[first].rate if args.floor_rate == "alone" else float(args.floor_rate)
                print(f"# round {round_} floor: the plain BI path paced at {pace:,.0f} msgs/s", flush=True)
                return await floor_phase(endpoint, args, args.messages, pids, kind, pubs, plain, pace)
            return step

        for round_ in range(1, args.rounds + 1):  # RabbitMQ alone, import, export; again: alternated
            first = len(results)
            steps = [*((alone(CONTROL),) if args.control else ()),
                     *((control_short,) if args.control and "export" in args.directions
                       and export_count != args.messages else ()),
                     *((beside_plain(first, round_),) if plain is not None else ()),
                     *((import_step,) if "import" in args.directions else ()),
                     *((export_step,) if "export" in args.directions else ())]
            await run_round(results, phases, alone, steps, args.bracket)
            for result in results[first:]:
                result.round = round_
        for slot, result in enumerate(results, 1):
            result.slot = slot
    finally:
        await amqp.close()
    return results


def machine_notes() -> str:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    load = os.getloadavg()[0]
    return (f"{os.cpu_count()} cores, {model}; load {load:.1f}; Python {platform.python_version()}; "
            f"RabbitMQ {rabbitmq.version()}; aio-pika {aio_pika.__version__}; kernel {platform.release()}")


#: The flat-out phases' names (``throughput``: the single-process generator's).
FLAT_OUT = ("throughput", "flat out")


def summary(results: list[Result]) -> None:
    """Each bridge phase against RabbitMQ alone in the same round: throughput ratio flat out, added
    latency at a fixed rate; and what the generator's CPU per message allows on all cores."""
    base = {(r.round, r.phase): r for r in results if r.scenario == "rabbitmq"}
    cores = os.cpu_count() or 1
    for r in results:
        peer = base.get((r.round, r.phase))
        if peer is None:
            continue
        if r.scenario == "bi plain" or (is_alone(r.scenario) and r.scenario != "rabbitmq"):
            continue  # (floor_report; bracketed)
        if r.scenario == "rabbitmq":
            if r.phase in FLAT_OUT and r.gen_cpu_us:
                print(f"# round {r.round}: the generator alone ({r.gen_cpu_us:.0f} µs per message, both ends) "
                      f"could do at most {cores} cores / that = {cores * 1e6 / r.gen_cpu_us:,.0f} msgs/s")
        elif r.phase in FLAT_OUT:
            print(f"# round {r.round} {r.scenario} flat out: {r.rate:,.0f} msgs/s = {r.rate / peer.rate:.2f}x RabbitMQ "
                  f"alone ({peer.rate:,.0f})")
        else:
            print(f"# round {r.round} {r.scenario} {r.phase}: added p50 {r.p50_ms - peer.p50_ms:+.2f} ms, p99 "
                  f"{r.p99_ms - peer.p99_ms:+.2f} ms over RabbitMQ alone")


def over_the_rounds(results: list[Result], goal: float = 0.8) -> None:
    """With ``--rounds`` > 1: each bridge path's flat-out ratio to RabbitMQ alone of its round, as the median
    and range over the rounds and how many reach the goal (0.8x). One round's ratio moves with the host's
    virtual CPUs (every process's CPU per message rises and falls together between seconds), so the
    median over alternated rounds is the figure to compare; each round's stays printed above."""
    alone = {r.round: r.rate for r in results if r.scenario == "rabbitmq" and r.phase in FLAT_OUT}
    if len(alone) < 2:
        return
    for name in COMPARED:
        ratios = sorted(r.rate / alone[r.round] for r in results if r.scenario == name
                        and r.phase in FLAT_OUT and alone.get(r.round))
        if ratios:
            reached = sum(ratio >= goal for ratio in ratios)
            print(f"# over {len(ratios)} rounds, {name} flat out / RabbitMQ alone: median {statistics.median(ratios):.2f}x "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f}x), {reached} of {len(ratios)} rounds at {goal}x or more")


def floor_report(results: list[Result]) -> None:
    """``--floor``, each round: RabbitMQ's rate beside the node's plain BI path over RabbitMQ alone's, the
    CPU per message of both together against RabbitMQ alone's (every flat-out phase here keeps both cores
    busy, so a path's rate is about 2 cores over its CPU per message, and a ratio about the inverse ratio
    of CPU per message), and the node's CPU per message on the plain path against per import and per
    export. The plain path is not the import's lower bound: its BI side has a publisher (a C client
    and the node's AMQP 1.0 receiving side) where the import's bridge hands its messages to the router in
    the node's process."""
    flat = {(r.round, r.scenario): r for r in results if r.phase == "flat out"}
    for round_ in sorted({r.round for r in results}):
        alone, beside, plain = (flat.get((round_, name)) for name in ("rabbitmq", "rabbitmq+bi", "bi plain"))
        if alone is None or beside is None or plain is None:
            continue
        floor_total = (beside.pub_cpu_us + beside.cons_cpu_us + beside.rabbit_cpu_us + plain.pub_cpu_us
                       + plain.cons_cpu_us + plain.node_cpu_us)
        alone_total = alone.pub_cpu_us + alone.cons_cpu_us + alone.rabbit_cpu_us
        print(f"# round {round_} floor: RabbitMQ beside the node's plain BI path {beside.rate:,.0f} msgs/s = "
              f"{beside.rate / alone.rate:.2f}x RabbitMQ alone ({alone.rate:,.0f}; by CPU per message "
              f"{alone_total:.1f} / {floor_total:.1f} = {alone_total / floor_total:.2f}); the plain BI path "
              f"{plain.rate:,.0f} msgs/s ({plain.lost} lost, {plain.duplicated} duplicated)")
        print(f"#   floor CPU per message pair, µs: RabbitMQ's side {beside.pub_cpu_us:.1f} + {beside.cons_cpu_us:.1f} "
              f"+ RabbitMQ {beside.rabbit_cpu_us:.1f}; the BI side's publisher {plain.pub_cpu_us:.1f} + consumer "
              f"{plain.cons_cpu_us:.1f} + node {plain.node_cpu_us:.1f}; total {floor_total:.1f}; the other "
              f"processes' and steal of the RabbitMQ side's row, the BI side's then: "
              f"{beside.others_cpu_us + beside.steal_us:.1f} µs")
        for name in ("if2->croads", "croads->if2"):
            bridged = flat.get((round_, name))
            if bridged is not None:
                total = bridged.pub_cpu_us + bridged.cons_cpu_us + bridged.rabbit_cpu_us + bridged.node_cpu_us
                print(f"#   {name}: node {bridged.node_cpu_us:.1f} µs per message against {plain.node_cpu_us:.1f} on "
                      f"the plain BI path ({bridged.node_cpu_us - plain.node_cpu_us:+.1f}); all processes "
                      f"{total:.1f} against RabbitMQ alone's {alone_total:.1f} ({alone_total / total:.2f}; its rate "
                      f"{bridged.rate / alone.rate:.2f}x) and the floor's {floor_total:.1f}")


def cpu_breakdown(results: list[Result]) -> None:
    """Each flat-out phase's CPU by process (µs per message, and CPU seconds over the phase) and each
    bridge path's extra cost over RabbitMQ alone in the same round: on 2 shared cores a path's rate
    is about cores / its total CPU per message, so the largest extra is the one to cut."""
    flat = [r for r in results if r.phase in FLAT_OUT and r.gen_cpu_us]
    if not flat:
        return
    parts = ("publishers", "consumers", "rabbitmq", "node")
    print(f"# CPU per flat-out message by process, µs (CPU s): {'scenario':<12} "
          + " ".join(f"{p:>17}" for p in parts) + f" {'total':>17}")
    base = {r.round: r for r in flat if r.scenario == "rabbitmq"}
    for r in flat:
        values = (r.pub_cpu_us, r.cons_cpu_us, r.rabbit_cpu_us, r.node_cpu_us)
        cells = [f"{v:7.1f} ({v * r.messages / 1e6:6.2f} s)" for v in (*values, sum(values))]
        print(f"# round {r.round:<2} {r.scenario:<12} " + " ".join(f"{c:>17}" for c in cells)
              + (f"; node wake-ups {r.node_wakeups:.3f} per message" if r.node_wakeups else "")
              + f"; {sum(values) * r.rate / 1e6:.2f} cores at its rate; this process {r.bench_us:.1f} µs, its "
              f"ended clients {r.reaped_us:.1f} µs in all; the machine's other processes "
              f"{r.others_cpu_us:.1f} µs, steal {r.steal_us:.1f} µs per message")
        peer = base.get(r.round)
        if peer is not None and peer is not r:
            if r.scenario == "bi plain" or is_alone(r.scenario):
                continue  # (a path without RabbitMQ: floor_report; RabbitMQ alone again: bracketed)
            extra = [v - w for v, w in zip(values, (peer.pub_cpu_us, peer.cons_cpu_us, peer.rabbit_cpu_us, 0.0))]
            print(f"#   {r.scenario} over RabbitMQ alone, µs per message: "
                  + ", ".join(f"{p} {e:+.1f}" for p, e in zip(parts, extra)) + f"; total {sum(extra):+.1f}")


def cores(value: float) -> str:
    """A Sampler figure (cores), or n/a when it was not known (-1: the messages flowed under two readings)."""
    return "n/a" if value < 0 else f"{value:.2f}"


def host_report(results: list[Result]) -> None:
    """Each phase's host (host_cpu): the other processes' CPU (the largest by process) and steal, in cores,
    and the load at its end; a phase where they reached host_cpu.DISTURBED_CORES is marked DISTURBED."""
    rows = [r for r in results if r.wall_s]
    if not rows:
        return
    print(f"# the rest of the host by phase (other processes and steal in cores over the phase; DISTURBED: "
          f">= {host_cpu.DISTURBED_CORES} together; irq + softirq beside; then while its messages flowed, first send "
          f"to last receive, the machine's idle and steal):")
    for r in rows:
        print(f"#   round {r.round} {r.scenario} {r.phase} ({r.wall_s:.1f} s): others {r.others_cores:.2f} "
              f"({r.others_top or 'none'}), steal {r.steal_cores:.2f}, irq {r.irq_cores:.2f}, load {r.load1:.2f}; "
              f"flowing: idle {cores(r.idle_cores)}, steal {cores(r.traffic_steal_cores)}"
              + (" DISTURBED" if r.disturbed else ""))


#: the flat-out phases measured against RabbitMQ alone (the A/A controls first)
COMPARED = (CONTROL, CONTROL_SHORT, "rabbitmq+bi", "if2->croads", "croads->if2")


@dataclass(frozen=True)
class Ratio:
    """One flat-out phase against RabbitMQ alone in its round: ``per_round`` against the round's first
    RabbitMQ alone (the ratio of every run before --bracket), ``bracketed`` against the mean of RabbitMQ
    alone just before and just after it (--bracket; None without), ``drift`` that after over that before;
    ``disturbed``: the phase or a RabbitMQ alone it is measured against was (host_cpu)."""
    result: Result
    per_round: float
    bracketed: float | None
    drift: float | None
    disturbed: bool


def ratios(results: list[Result]) -> list[Ratio]:
    """Every COMPARED flat-out phase's Ratio, and ``--bracket``'s RabbitMQ alone again (``rabbitmq-2``...)
    against the round's first (per_round only: an A/A ratio at the distance of the phase before it)."""
    flat = [r for r in results if r.phase in FLAT_OUT and r.scenario != "bi plain"]
    out = []
    for round_ in sorted({r.round for r in flat}):
        row = sorted((r for r in flat if r.round == round_), key=lambda r: r.slot)
        first = next((r for r in row if r.scenario == "rabbitmq"), None)
        if first is None or not first.rate:
            continue
        for i, r in enumerate(row):
            if r.scenario not in COMPARED and not (is_alone(r.scenario) and r is not first):
                continue
            before, after = row[i - 1] if i else None, row[i + 1] if i + 1 < len(row) else None
            bracketed = drift = None
            if (r.scenario in COMPARED and before is not None and after is not None and is_alone(before.scenario)
                    and is_alone(after.scenario) and before.rate and after.rate):
                bracketed, drift = r.rate / ((before.rate + after.rate) / 2), after.rate / before.rate
                refs = [before, after]
            else:
                refs = [first]
            out.append(Ratio(r, r.rate / first.rate, bracketed, drift, any(x.disturbed for x in (r, *refs))))
    return out


def spread(values: list[float]) -> str:
    """min, median, max of ``values`` as ``median M (min-max), n``."""
    ordered = sorted(values)
    return f"median {statistics.median(ordered):.2f}x ({ordered[0]:.2f}-{ordered[-1]:.2f}x, {len(ordered)})"


def bracketed(results: list[Result], goal: float = 0.8) -> None:
    """``--bracket``: each compared flat-out phase against the mean of RabbitMQ alone just before and after
    (its drift: after / before) beside its ratio to the round's first RabbitMQ alone; then over the rounds,
    per path, both ratios' spread and how many reach ``goal``, and the A/A ratios (nothing changed): the
    control's, RabbitMQ alone again against the round's first, and the drifts."""
    every = [x for x in ratios(results) if x.bracketed is not None]
    if not every:
        return
    for x in every:
        assert x.drift is not None and x.bracketed is not None
        r = x.result
        print(f"# round {r.round} {r.scenario} flat out: {r.rate:,.0f} msgs/s = {x.bracketed:.2f}x RabbitMQ alone "
              f"bracketed (the mean of just before and just after; drift after/before {x.drift:.2f}x); "
              f"{x.per_round:.2f}x the round's first; the machine idle {cores(r.idle_cores)} cores while it flowed"
              + (" [host DISTURBED]" if x.disturbed else ""))
    for name in COMPARED:
        mine = [x for x in every if x.result.scenario == name]
        if mine:
            brackets = [x.bracketed for x in mine if x.bracketed is not None]
            print(f"# over {len(mine)} rounds, {name} flat out / RabbitMQ alone: bracketed {spread(brackets)}, "
                  f"{sum(b >= goal for b in brackets)} at {goal}x or more; per round "
                  f"{spread([x.per_round for x in mine])}, {sum(x.per_round >= goal for x in mine)} at {goal}x or more")
    again = [x.per_round for x in ratios(results) if is_alone(x.result.scenario)]
    drifts = [x.drift for x in every if x.drift is not None]
    print("# A/A (RabbitMQ alone against itself): " + (f"RabbitMQ alone again after each step / the round's first "
          f"{spread(again)}; " if again else "") + f"the brackets' drift (after / before) {spread(drifts)}")


def verdict(results: list[Result], goal: float = 0.8) -> None:
    """``--control``: each bridge path's flat-out ratio below ``goal`` set against its control's spread in this
    run (the export's: CONTROL_SHORT, of its own length, where there is one), ratio by ratio of the same kind
    (per round; bracketed with --bracket): a bridge phase's dip below its
    path's median (its ratio / that median) no deeper than the control's lowest ratio is inside what the host
    does with nothing changed; deeper, it is the bridge's (or the host's beyond what this run's control saw)."""
    every = ratios(results)
    kinds: list[tuple[str, Callable[[Ratio], float | None]]] = [("per round", lambda x: x.per_round),
                                                                  ("bracketed", lambda x: x.bracketed)]
    for kind, value in kinds:
        controls = {name: [v for x in every if x.result.scenario == name and (v := value(x)) is not None]
                    for name in (CONTROL, CONTROL_SHORT)}
        for name, aa in controls.items():
            if aa:
                print(f"# A/A control ({name} / RabbitMQ alone, {kind}): {spread(aa)}")
        for name in COMPARED[2:]:
            aa = controls[CONTROL_SHORT] if name == "croads->if2" and controls[CONTROL_SHORT] else controls[CONTROL]
            mine = [(x, v) for x in every if x.result.scenario == name and (v := value(x)) is not None]
            if not mine or not aa:
                continue
            middle = statistics.median(v for _, v in mine)
            for x, v in mine:
                if v < goal:
                    inside = v / middle >= min(aa)
                    print(f"#   round {x.result.round} {name} {kind} {v:.2f}x < {goal}x: {v / middle:.2f} of its "
                          f"median {middle:.2f}x, {'inside' if inside else 'OUTSIDE'} the control's spread (lowest "
                          f"{min(aa):.2f}x)" + (" [host DISTURBED]" if x.disturbed else ""))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000, help="messages of each throughput phase")
    parser.add_argument("--paced", type=int, default=400, help="messages of each latency phase")
    parser.add_argument("--rate", type=float, default=200.0, help="msgs/s of the latency phases (not saturated)")
    parser.add_argument("--rates", type=lambda text: [float(r) for r in text.split(",")], default=[200.0],
                        help="with --processes: the fixed rates (msgs/s, comma-separated) after the flat-out phase")
    parser.add_argument("--paced-s", type=float, default=0.0,
                        help="with --processes: each fixed-rate phase lasts this long (rate x s messages; 0: --paced)")
    parser.add_argument("--rounds", type=int, default=1, help="with --processes: RabbitMQ alone, import, export, "
                        "this many times over (alternated)")
    parser.add_argument("--tree", type=Path, default=node_process.ROOT,
                        help="run the node from this checkout (a before/after pair in one session)")
    parser.add_argument("--confirm-each", action="store_true", help="C-Roads publisher waits for every outcome")
    parser.add_argument("--bi-door", choices=("amqps", "in-process"), default="in-process",
                        help="the bridge's way into its node's broker for IF2 -> C-Roads ([if2] bi_door)")
    parser.add_argument("--processes", type=int, default=0,
                        help="IF2 publishers in this many processes (pika), instead of aio-pika in this loop")
    parser.add_argument("--consumers", type=int, default=2, help="IF2 consumer processes (with --processes)")
    parser.add_argument("--export-messages", type=int, default=9000,
                        help="with the C actor: messages of the export's flat-out phase (0: --messages). The C "
                        "actor publishes faster than the bridge exports, and what waits for the bridge waits in "
                        "its subscription's source at the BI, whose buffer holds 10,000 messages (IP_032: the "
                        "oldest dropped beyond)")
    parser.add_argument("--actor", choices=("c", "python"), default="c",
                        help="with --processes: the export's C-ITS actor, the C load generator (benchmarks/loadgen; "
                        "this process when it cannot be built) or this process")
    parser.add_argument("--prefetch", type=int, default=1000,
                        help="the bridge's unacknowledged IF2 deliveries at a time ([if2] prefetch)")
    parser.add_argument("--import-consumer", choices=("c", "c-presettled", "python"), default="c",
                        help="with --processes: the import's C-Roads consumer on the BI, the C load generator "
                        "(benchmarks/loadgen; accepting each delivery, or asking for them settled as RabbitMQ alone's "
                        "auto-ack consumers take theirs) or this process (Python proton, accepting each)")
    parser.add_argument("--rabbit-consumer", choices=("c", "python"), default="c",
                        help="with --processes: the competing consumers at RabbitMQ (RabbitMQ alone's and the "
                        "export's back-office), C processes (benchmarks/loadgen/if2_consume.c, rabbitmq-c; pika "
                        "when it cannot be built) or pika processes; auto-ack either way")
    parser.add_argument("--rabbit-ack-every", type=int, default=0,
                        help="with the C consumers at RabbitMQ: acknowledge as the bridge does (basic.ack "
                        "multiple=true every N deliveries and whenever a consumer's input is drained, --prefetch "
                        "unacknowledged) instead of auto-ack: RabbitMQ alone with the bridge's ack semantics "
                        "(0: auto-ack, the reference)")
    parser.add_argument("--rabbit-publisher", choices=("c", "python"), default="c",
                        help="with --processes: the IF2 back-office's publishers (RabbitMQ alone's and the "
                        "import's), C processes (benchmarks/loadgen/if2_publish.c, rabbitmq-c, publisher confirms, "
                        "at most 1,000 unconfirmed each; pika when it cannot be built) or pika processes (no "
                        "confirms)")
    parser.add_argument("--directions", type=lambda text: text.split(","), default=["import", "export"],
                        help="with --processes: the bridge's directions to measure (comma-separated: import "
                        "= if2->croads, export = croads->if2); RabbitMQ alone is measured in every round")
    parser.add_argument("--profile", type=Path, help="with --processes: py-spy the node over each throughput phase "
                        "(PROFILE-import.raw, PROFILE-export.raw) and print where its time goes")
    parser.add_argument("--profiler", choices=("py-spy", "perf", "syscalls"), default="py-spy",
                        help="with --profile: py-spy (Python frames, by category), Linux perf (CPU samples, "
                        "kernel included, top symbols) or the node's system calls, context switches and task clock "
                        "per message (perf stat)")
    parser.add_argument("--profile-rate", type=int, default=200, help="py-spy's samples per second (--profile)")
    parser.add_argument("--rabbitmq-busy-wait", choices=tuple(rabbitmq.BUSY_WAIT), default="none",
                        help="the private RabbitMQ's Erlang scheduler busy waiting (+sbwt, +sbwtdcpu, +sbwtdio): "
                        "none (RabbitMQ's start-up default) or erlang-default (the VM's own: idle schedulers spin)")
    parser.add_argument("--floor", action="store_true",
                        help="with --processes: each round also runs RabbitMQ alone flat out while the node routes "
                        "as many messages of the same size over its plain BI path (the C load generator publishing, "
                        "the import's C consumer on the BI, no bridge) at the same time: RabbitMQ's rate beside that "
                        "work against RabbitMQ alone's, and the node's CPU per message on that path against per "
                        "import and export (the plain path has a publisher the import has not, so it is no lower "
                        "bound of the import: see floor_report)")
    parser.add_argument("--floor-rate", default="alone",
                        help="with --floor: the plain BI path's publisher's pace, msgs/s (0: flat out), or 'alone' "
                        "(the default): RabbitMQ alone's flat-out rate of the same round, so that the node's share "
                        "is spread over the phase as an import's BI deliveries are")
    parser.add_argument("--control", action="store_true",
                        help="with --processes: each round also runs RabbitMQ alone again right after its first "
                        "(rabbitmq-again: the same phases and counts), measured against RabbitMQ alone as the bridge "
                        "is: the ratios' spread with nothing changed (an A/A control), beside the bridge's; with the "
                        "export's flat-out phase shorter (--export-messages), RabbitMQ alone flat out with that many "
                        "too (rabbitmq-short: the export's A/A)")
    parser.add_argument("--bracket", action=argparse.BooleanOptionalAction, default=None,
                        help="with --processes (and the default there): the round's flat-out phases first, RabbitMQ "
                        "alone again after each (rabbitmq-2, ...), so that each flat-out phase is between two of "
                        "RabbitMQ alone's and its ratio is taken against their mean (their own ratio printed as the "
                        "drift; with nothing changed this ratio spreads less than the one against the round's first); "
                        "the paced phases after them. The ratio against the round's first RabbitMQ alone stays "
                        "printed; --no-bracket: the order of the runs before (each scenario's flat-out and paced "
                        "phases together, RabbitMQ alone once a round)")
    parser.add_argument("--json", type=Path, help="write the results here")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.floor_rate != "alone" and not args.floor_rate.replace(".", "", 1).isdigit():
        parser.error(f"--floor-rate is msgs/s or 'alone', not {args.floor_rate!r}")
    if (args.control or args.bracket) and not args.processes:
        parser.error("--control and --bracket need --processes (the C clients' phases)")
    args.bracket = bool(args.processes) if args.bracket is None else args.bracket
    if args.rabbit_ack_every < 0:
        parser.error(f"--rabbit-ack-every must be 0 (auto-ack) or more, not {args.rabbit_ack_every}")
    rabbitmq.ensure_installed()
    with tempfile.TemporaryDirectory(prefix="bench-if2-") as tmp:
        work = Path(tmp)
        pki = create_test_pki(work / "pki", [NODE, RABBIT], [BRIDGE, BACKOFFICE, ACTOR, PLAIN])
        ident = pki.identity(RABBIT)
        broker = rabbitmq.RabbitMQ(work / "rabbitmq", pki_files={"chain": ident.chain, "key": ident.key,
                                                                 "trust": pki.trust_bundle},
                                   user=BRIDGE, users=(BACKOFFICE,), log=lambda *_: None,
                                   busy_wait=args.rabbitmq_busy_wait)
        broker.start()  # (it checks that beam.smp was given these thresholds)
        print(f"# RabbitMQ's scheduler busy waiting: {args.rabbitmq_busy_wait} ("
              + ", ".join(f"+{flag} {value}" for flag, value in broker.busy_wait_in_effect().items()) + ")",
              flush=True)
        proc = None
        try:
            proc, amqps, ii = start_node(node_config(pki, broker, work, args.bi_door, args.prefetch), args.tree)
            time.sleep(1.0)  # the bridge declares its queues right after the node started
            assert broker.beam_pid is not None
            pids = (proc.pid, broker.beam_pid)
            results = asyncio.run(scenarios_mp(pki, broker, amqps, ii, args, pids, work) if args.processes
                                  else scenarios(pki, broker, amqps, ii, args, pids))
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
            broker.close()
    print(f"# {machine_notes()}")
    print(f"{'rd':>2} {'scenario':<14} {'phase':<11} {'msgs':>6} {'msgs/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'node us/msg':>12} {'rabbit us/msg':>14} {'lost':>5} {'dup':>5} {'gen us/msg':>11} {'unconf':>6}")
    for r in results:
        print(f"{r.round:>2} {r.scenario:<14} {r.phase:<11} {r.messages:>6} {r.rate:>9.0f} {r.p50_ms:>8.2f} "
              f"{r.p99_ms:>8.2f} {r.node_cpu_us:>12.0f} {r.rabbit_cpu_us:>14.0f} {r.lost:>5} {r.duplicated:>5} "
              f"{r.gen_cpu_us:>11.1f} {r.pub_failed:>6}")
    summary(results)
    over_the_rounds(results)
    cpu_breakdown(results)
    floor_report(results)
    host_report(results)
    bracketed(results)
    verdict(results)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
