"""Broker benchmark (a script, not a test): our broker vs a peer broker, same load, same run.

Starts our broker (``interchange broker --config``) in a subprocess with a generated test PKI
and N sources, each with a node selector (an II subscription: ``messageType = 'DENM' AND
quadTree LIKE '%,<tile prefix>%'``, matching a few percent of the messages), drives it with the C
load generator (benchmarks/loadgen, TLS 1.3 + client certificate + SASL EXTERNAL) and measures
the broker's CPU time (utime + stime of all its threads, from /proc/<pid>/task/*/schedstat) around
the publishing phase only (the generator signals when every link is attached and when the last
delivery arrived).

The same loads then run against a peer: by default our own deliberately straightforward
``benchmarks/baseline_broker.py`` (proton MessagingHandler + Container, every consumer's selector
evaluated on every message), or any AMQP 1.0 broker given with ``--peer amqps://host:port`` /
``--peer amqp://host:port``. A peer has topic semantics: the producer publishes to
``--peer-target`` and each subscription is a consumer link on ``--peer-source`` carrying its
selector as a link filter (see benchmarks/README.md for what e.g. ActiveMQ needs). ``--peer rabbitmq``
starts a private RabbitMQ node (interchange/testing/rabbitmq.py, AMQP 1.0 plugin, TLS 1.3 + SASL
EXTERNAL): "1 (all)" is one queue with one consumer; RabbitMQ has no selectors, so the subscriptions
become InterCor IF2-style topic routing instead (the producer sets an IF2 routing key as subject,
each subscription is a queue bound to amq.topic with the binding key of its selector) — reported
as "topic routing", not selectors.

Application properties: by default the generator repeats 32 property sets (16 tile cells x
DENM/IVIM), so our broker's admission cache always hits; with ``--distinct`` (the matrix's default:
``matrix``) every message carries its own (publicationId, reference tile, position), same routing.

    .venv/bin/python benchmarks/bench_broker.py --quick            # < 2 minutes (~1 here)
    .venv/bin/python benchmarks/bench_broker.py --repeat 3         # everything (~5 minutes here)
    .venv/bin/python benchmarks/bench_broker.py --only matrix --subs 1,100 --sizes 200 --peer none
    .venv/bin/python benchmarks/bench_broker.py --only matrix --subs 0,1,100 --sizes 200 --peer rabbitmq
    .venv/bin/python benchmarks/bench_broker.py --peer amqp://127.0.0.1:5672 --peer-target topic://bench \\
        --peer-source topic://bench [--peer-pid PID]

Output: a table per scenario on stdout, and (with --json FILE) every raw result.
BENCH_LOADGEN_STDERR=FILE appends the generator's stderr there (with PN_TRACE_FRM=1: a frame trace).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

BROKER_CN = "broker.interchange.test"
PRODUCER_CN = "actor-1"
CONSUMER_CN = "actor-2"
TARGET = "bench-in"
RABBITMQ_QUEUE = "/queue/bench"  # rabbitmq_amqp1_0 3.10: declares queue "bench" on attach
RABBITMQ_TOPIC = "/exchange/amq.topic"  # target: routing key = subject; source + "/<key>": a bound queue
TILE_ROOT = "1202021"  # must match loadgen.c
CLK_TCK = os.sysconf("SC_CLK_TCK")
LOADGEN_SRC = ROOT / "benchmarks" / "loadgen" / "loadgen.c"
LOADGEN_BIN = ROOT / "build" / "loadgen"


# ------------------------------------------------------------------ the load's shape
def message_kind(i: int, cells: int) -> tuple[str, int]:
    """(messageType, cell) of a producer's i-th message: the rule loadgen.c follows."""
    return ("IVIM" if i % 4 == 3 else "DENM", (i // 4) % cells)


def tile_prefix(cell: int, cells: int) -> str:
    digits = round(math.log(cells, 4))
    return TILE_ROOT + "".join(str((cell >> (2 * k)) & 3) for k in range(digits - 1, -1, -1))


def subscription(j: int, cells: int) -> tuple[str, int, str]:
    """(messageType, cell, selector) of subscription j: DENM/IVIM alternately, cells in turn."""
    message_type = "DENM" if j % 2 == 0 else "IVIM"
    cell = (j // 2) % cells
    selector = f"messageType = '{message_type}' AND quadTree LIKE '%,{tile_prefix(cell, cells)}%'"
    return message_type, cell, selector


def inactive_selector(j: int) -> str:
    """A subscription of the same shape whose tile no message of the load lies in."""
    tile = "1202023" + "".join(str((j >> (2 * k)) & 3) for k in range(7, -1, -1))
    message_type = "DENM" if j % 2 == 0 else "IVIM"
    return f"messageType = '{message_type}' AND quadTree LIKE '%,{tile}%'"


def topic_binding(j: int, load: "Load") -> str:
    """The IF2 binding key equivalent to subscription j's selector (routing key:
    type.version.provider.subtype.q1...q18, the words of the reference tile; see loadgen --subject)."""
    if load.subs == 0:
        return "#"
    if load._is_active(j):
        message_type, cell, _ = subscription(j, load.cells)
        tile = tile_prefix(cell, load.cells)
    else:  # as inactive_selector(j): a tile no message lies in
        message_type = "DENM" if j % 2 == 0 else "IVIM"
        tile = "1202023" + "".join(str((j >> (2 * k)) & 3) for k in range(7, -1, -1))
    return f"{message_type}.*.*.*.{'.'.join(tile)}.#"


def expected_deliveries(messages: int, producers: int, subs: list[tuple[str, int] | None], cells: int) -> int:
    """Deliveries the load should produce (None in subs = a subscription without selector)."""
    wanted = Counter(s for s in subs if s is not None)
    everything = sum(1 for s in subs if s is None)
    total = 0
    for p in range(producers):
        share = messages // producers + (1 if p < messages % producers else 0)
        for i in range(share):
            total += wanted.get(message_kind(i, cells), 0) + everything
    return total


# ------------------------------------------------------------------ processes
def cpu_seconds(pid: int) -> float:
    """CPU time of a process (all its threads): the sum of /proc/<pid>/task/*/schedstat (ns precision),
    else utime + stime from /proc/<pid>/stat (clock ticks, 10 ms)."""
    try:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK


def raise_nofile() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def wait_port(host: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port}")


def ensure_loadgen(rebuild: bool) -> Path:
    if rebuild or not LOADGEN_BIN.exists() or LOADGEN_BIN.stat().st_mtime < LOADGEN_SRC.stat().st_mtime:
        subprocess.run(["sh", str(ROOT / "benchmarks" / "loadgen" / "build.sh"), str(LOADGEN_BIN)], check=True,
                       stdout=subprocess.DEVNULL)
    return LOADGEN_BIN


@dataclass
class Broker:
    """A broker process under test (ours or the baseline), or an external peer (proc None)."""

    name: str
    url: str
    target: str
    proc: subprocess.Popen | None = None
    pid: int | None = None
    sources: list[str] = field(default_factory=list)  # consumer lines (address[\tselector])
    topic_routing: bool = False  # a peer without selectors: bindings on a topic exchange instead
    processes: list["Broker"] = field(default_factory=list)  # ours with broker.processes > 1: one view each

    def cpu(self) -> float | None:
        return cpu_seconds(self.pid) if self.pid else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Workspace:
    """Temp dir with a test PKI, helpers to start brokers there, and the runs that failed
    (``failures``: reported again at the end, exit 1)."""

    def __init__(self, keep: bool) -> None:
        from certs import create_test_pki

        self.dir = Path(tempfile.mkdtemp(prefix="bench-broker-"))
        self.keep = keep
        self.failures: list[str] = []
        self.pki = create_test_pki(self.dir / "pki", [BROKER_CN], [PRODUCER_CN, CONSUMER_CN])
        self.counter = 0

    def client_files(self, cn: str) -> tuple[Path, Path, Path]:
        identity = self.pki.identity(cn)
        return identity.chain, identity.key, self.pki.trust_bundle

    def start_ours(self, subs: list[str | None], cells: int, publisher_credit: int = 1000,
                   log_level: str = "info", plain: bool = False, processes: int = 1) -> Broker:
        """Our broker with one source per subscription (node selector = the subscription's).

        With ``processes`` > 1 (broker.processes), broker process k serves target ``bench-in-k``
        (process 0: ``bench-in``) and a copy of every source; ``Broker.processes`` has one view per
        process (its URL, target and pid) for one load generator each."""
        self.counter += 1
        identity = self.pki.identity(BROKER_CN)
        # The generator uses one identity (CONSUMER_CN) for both roles: both CNs get both grants.
        grants = [PRODUCER_CN, CONSUMER_CN]
        sources = [{"address": f"sub-{j}", "consumers": grants, **({"selector": s} if s else {})}
                   for j, s in enumerate(subs)]
        config: dict[str, Any] = {
            "name": BROKER_CN,
            "data_dir": str(self.dir / f"node-{self.counter}"),
            "tls": {"cert_chain": str(identity.chain), "key": str(identity.key),
                    "trust_bundle": str(self.pki.trust_bundle), "crls": [str(c) for c in self.pki.crls]},
            "broker": {"host": "127.0.0.1", "port": 0, "processes": processes,
                       "targets": [{"address": _process_target(k), "publishers": grants, "process": k}
                                   for k in range(processes)],
                       "sources": sources, "limits": {"publisher_credit": publisher_credit}},
            "log": {"path": str(self.dir / f"node-{self.counter}.log"), "level": log_level},
        }
        if plain:  # the local-development listener: same broker, no TLS (identity given by config)
            config["broker"].update(plain_port=0, plain_identity=CONSUMER_CN)
        path = self.dir / f"node-{self.counter}.json"
        path.write_text(json.dumps(config))
        proc = subprocess.Popen([sys.executable, "-m", "interchange", "broker", "--config", str(path)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=raise_nofile)
        assert proc.stdout is not None  # a pipe
        port = None
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "AMQPS port" in line:
                ports = [int(p) for p in line.split("AMQPS port")[1].split(", plain")[0].split(",")]
                port = ports[0]
                if plain:
                    port = int(line.split("plain AMQP port")[1].split(",")[0])
                break
        if port is None:
            proc.kill()
            raise RuntimeError("our broker did not start:\n" + "".join(lines))
        names = [f"sub-{j}" for j in range(len(subs))]
        broker = Broker("ours (plain)" if plain else "ours", f"{'amqp' if plain else 'amqps'}://127.0.0.1:{port}",
                        TARGET, proc, proc.pid, names)
        if processes > 1:
            workers = sorted(int(c) for c in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split())
            broker.name = f"ours x{processes}"
            broker.processes = [Broker(f"ours x{processes} #{k}", f"amqps://127.0.0.1:{ports[k]}", _process_target(k),
                                       None, pid, names) for k, pid in enumerate([proc.pid] + workers)]
        return broker

    def start_baseline(self) -> Broker:
        proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "baseline_broker.py"),
                                 "--pki", str(self.pki.directory), "--cn", BROKER_CN],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=raise_nofile)
        assert proc.stdout is not None  # a pipe
        line = proc.stdout.readline()
        if "BASELINE port" not in line:
            proc.kill()
            raise RuntimeError("baseline broker did not start: " + line + proc.stdout.read())
        port = int(line.split()[-1])
        wait_port("127.0.0.1", port)
        return Broker("baseline", f"amqps://127.0.0.1:{port}", "bench", proc, proc.pid)

    def start_rabbitmq(self):
        """A private RabbitMQ node (interchange/testing/rabbitmq.py): TLS 1.3 with the broker identity of
        the test PKI, SASL EXTERNAL for the generator's certificate (CONSUMER_CN)."""
        from interchange.testing import rabbitmq

        rabbitmq.ensure_installed()
        identity = self.pki.identity(BROKER_CN)
        self.counter += 1
        node = rabbitmq.RabbitMQ(self.dir / f"rabbitmq-{self.counter}", {"chain": identity.chain, "key": identity.key,
                                                         "trust": self.pki.trust_bundle}, user=CONSUMER_CN)
        node.start()
        print(f"# peer: RabbitMQ {rabbitmq.version()} (rabbitmq_amqp1_0) at {node.url}, TLS 1.3 + SASL EXTERNAL, "
              f"beam.smp pid {node.beam_pid}", flush=True)
        return node

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


# ------------------------------------------------------------------ one measured run
@dataclass
class Load:
    subs: int  # number of subscriptions; 0 = one subscription without selector
    size: int
    messages: int
    producers: int = 1
    window: int = 1000
    rate: float = 0.0
    presettled: bool = False
    consumer_connections: int = 10
    consumer_credit: int = 1000
    cells: int = 16
    active: int | None = None  # only subscriptions j < active can match; the others select absent tiles
    distinct: bool = False  # every message its own app properties (``--distinct all``: every load's, see Bench.load)
    durable: bool = False  # header durable = true (stored before accepted)
    consumer_unsettled: bool = False  # consumers settle each delivery (accepted) instead of taking it pre-settled

    def _is_active(self, j: int) -> bool:
        return self.active is None or j < self.active

    def sub_kinds(self) -> list[tuple[str, int] | None]:
        if self.subs == 0:
            return [None]
        return [subscription(j, self.cells)[:2] if self._is_active(j) else ("none", -1) for j in range(self.subs)]

    def selectors(self) -> list[str | None]:
        if self.subs == 0:
            return [None]
        return [subscription(j, self.cells)[2] if self._is_active(j) else inactive_selector(j)
                for j in range(self.subs)]

    def label(self) -> str:
        if self.subs == 0:
            return "1 (all)"
        return f"{self.subs} ({self.active} active)" if self.active is not None else str(self.subs)


def run_load(loadgen: Path, ws: Workspace, broker: Broker, load: Load, peer_source: str | None,
             timeout: float, tls_args: list[str] | None = None, barrier: threading.Barrier | None = None) -> dict:
    """Run the load generator once; returns its JSON plus the broker's CPU seconds.

    With ``barrier``, publishing starts only when every generator sharing it is ready."""
    consumers_file = ws.dir / f"consumers-{broker.name}-{load.subs}.txt".replace(" ", "_").replace("#", "")
    selectors = load.selectors()
    with consumers_file.open("w") as f:
        for j, selector in enumerate(selectors):
            if peer_source is None:  # ours: the source holds the selector
                f.write(f"{broker.sources[j]}\n")
            elif broker.topic_routing:  # e.g. RabbitMQ: a queue bound to the exchange with the binding key
                f.write(f"{peer_source}/{topic_binding(j, load)}\n")
            else:  # a peer: one topic, the selector on the consumer link
                f.write(f"{peer_source}\t{selector}\n" if selector else f"{peer_source}\n")
    expect = expected_deliveries(load.messages, load.producers, load.sub_kinds(), load.cells)
    args = [str(loadgen), "run", "--url", broker.url, "--target", broker.target,
            "--messages", str(load.messages), "--size", str(load.size), "--producers", str(load.producers),
            "--window", str(load.window), "--rate", str(load.rate), "--cells", str(load.cells),
            "--consumers", str(consumers_file),
            "--consumer-connections", str(min(load.consumer_connections, len(selectors))),
            "--consumer-credit", str(load.consumer_credit),
            "--expect", str(expect), "--timeout", str(timeout), "--sync", "--idle-ms", "3000"]
    if load.presettled:
        args.append("--presettled")
    if load.distinct:
        args.append("--distinct")
    if load.durable:
        args.append("--durable")
    if load.consumer_unsettled:
        args.append("--consumer-unsettled")
    if broker.topic_routing:
        args.append("--subject")  # the IF2 routing key
    if broker.url.startswith("amqps:"):
        args += tls_args if tls_args is not None else _tls_args(ws)
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            bufsize=1)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # pipes
    cpu0 = cpu1 = None
    wall0 = wall1 = gen0 = gen1 = 0.0
    stderr_lines = []
    try:
        for line in proc.stderr:
            stderr_lines.append(line)
            if line.strip() == "READY":
                if barrier is not None:
                    barrier.wait(timeout)
                cpu0, wall0, gen0 = broker.cpu(), time.monotonic(), cpu_seconds(proc.pid)
                proc.stdin.write("go\n")
                proc.stdin.flush()
            elif line.strip() == "DONE":
                cpu1, wall1, gen1 = broker.cpu(), time.monotonic(), cpu_seconds(proc.pid)
                proc.stdin.write("go\n")
                proc.stdin.flush()
                break
        out = proc.stdout.read()
        stderr_lines += proc.stderr.readlines()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if os.environ.get("BENCH_LOADGEN_STDERR"):  # e.g. with PN_TRACE_FRM=1 for a frame trace
        with open(os.environ["BENCH_LOADGEN_STDERR"], "a") as f:
            f.writelines(stderr_lines)
    try:
        result = json.loads(out)
    except json.JSONDecodeError:
        raise RuntimeError(f"loadgen failed ({proc.returncode}): {out}\n{''.join(stderr_lines)}") from None
    result["broker_cpu_s"] = (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None
    result["wall_s"] = wall1 - wall0 if wall0 and wall1 else None
    # Utilisation over the measured phase (which ends when the last expected delivery arrived)
    if result["wall_s"]:
        if result["broker_cpu_s"] is not None:
            result["broker_util"] = result["broker_cpu_s"] / result["wall_s"]
        result["loadgen_util"] = (gen1 - gen0) / result["wall_s"]
        result["loadgen_cpu_s"] = gen1 - gen0
    result["broker"] = broker.name
    result["subs"] = load.label()
    result["props"] = "distinct" if load.distinct else "repeated"
    result["durable_load"] = load.durable
    check_result(result, ws.failures)
    return result


def check_result(r: dict, failures: list[str]) -> None:
    """Loudly report a run whose deliveries are not the expected ones (or with rejected messages)."""
    problems = [text for bad, text in (
        (r.get("deliveries") != r.get("expected"), f"{r.get('deliveries')} deliveries, expected {r.get('expected')}"),
        (bool(r.get("rejected")), f"{r.get('rejected')} messages rejected"),
        (bool(r.get("timed_out")), "timed out"), (bool(r.get("aborted")), "aborted"),
    ) if bad]
    if problems:
        what = (f"{r['broker']}, {r['subs']} subscriptions, {size_label(r['size'])}, {r['props']} properties: "
                + "; ".join(problems) + (f" ({'; '.join(r['errors'])[:300]})" if r.get("errors") else ""))
        failures.append(what)
        print(f"\n!!! RUN FAILED: {what}\n", file=sys.stderr, flush=True)


def warm_up(loadgen: Path, ws: Workspace, broker: Broker, load: Load, peer_source: str | None, timeout: float,
            tls_args: list[str] | None = None) -> None:
    """An unmeasured short run first: connections, imports and caches of a fresh broker."""
    messages = 200 if load.subs >= 1000 or peer_source is not None else 2000
    run_load(loadgen, ws, broker, Load(**{**load.__dict__, "size": 200, "messages": messages}), peer_source,
             timeout, tls_args)


def run_fresh(loadgen: Path, ws: Workspace, load: Load, timeout: float, warm: bool = True, **start: Any) -> dict:
    """One run on a broker of its own: start ours for ``load``, warm it up (unless ``warm`` is
    False, e.g. to measure a first burst), run once, stop it."""
    broker = ws.start_ours(load.selectors(), load.cells, **start)
    try:
        if warm:
            warm_up(loadgen, ws, broker, load, None, timeout)
        return run_load(loadgen, ws, broker, load, None, timeout)
    finally:
        broker.stop()


def _process_target(k: int) -> str:
    return TARGET if k == 0 else f"{TARGET}-{k}"


def run_processes(loadgen: Path, ws: Workspace, broker: Broker, load: Load, timeout: float) -> dict:
    """One load generator per broker process, started together; the sum of their figures.

    Each generator publishes ``load.messages`` to its process's target and reads every source
    there (each process routes its own targets' data into its copy of the sources)."""
    views = broker.processes or [broker]
    barrier = threading.Barrier(len(views))
    results: list[dict | BaseException] = [RuntimeError("not run")] * len(views)

    def one(k: int) -> None:
        try:
            results[k] = run_load(loadgen, ws, views[k], load, None, timeout, barrier=barrier)
        except BaseException as exc:  # reported below
            barrier.abort()
            results[k] = exc

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(views))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    runs: list[dict] = results  # type: ignore[assignment]
    total = dict(runs[0])
    for key in ("sent", "deliveries", "expected", "rejected", "broker_cpu_s", "loadgen_cpu_s"):
        total[key] = sum(r.get(key) or 0 for r in runs)
    total["wall_s"] = max(r["wall_s"] or 0 for r in runs)
    total["sent_per_s"] = total["sent"] / total["wall_s"] if total["wall_s"] else None
    total["delivered_per_s"] = total["deliveries"] / total["wall_s"] if total["wall_s"] else None
    total["latency_us"] = {q: max(r["latency_us"][q] for r in runs) for q in runs[0]["latency_us"]}
    total["broker_util"] = total["broker_cpu_s"] / total["wall_s"] if total["wall_s"] else None
    total["loadgen_util"] = total["loadgen_cpu_s"] / total["wall_s"] if total["wall_s"] else None
    total["broker"] = broker.name
    total["extra"] = (f"{len(views)} process(es): broker CPU % " + ", ".join(
        f"{100 * (r['broker_util'] or 0):.0f}" for r in runs) + "; latency quantiles: worst of the generators")
    return total


def _tls_args(ws: Workspace, cn: str = CONSUMER_CN) -> list[str]:
    # one identity for the whole generator: both CNs are granted where needed (see start_ours)
    chain, key, trust = ws.client_files(cn)
    return ["--cert", str(chain), "--key", str(key), "--ca", str(trust), "--vhost", BROKER_CN]


def per_message(result: dict) -> tuple[float | None, float | None]:
    cpu = result.get("broker_cpu_s")
    if cpu is None:
        return None, None
    sent = result.get("sent") or 0
    deliveries = result.get("deliveries") or 0
    return (cpu * 1e6 / sent if sent else None, cpu * 1e6 / deliveries if deliveries else None)


# ------------------------------------------------------------------ output
def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def size_label(size: int) -> str:
    return f"{size // 1000} KB" if size >= 1000 else f"{size} B"


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n### {title}\n")
    print("| broker | subs | payload | msgs | deliveries | sent/s | delivered/s | p50 ms | p99 ms | max ms "
          "| CPU µs/msg | CPU µs/delivery | broker/gen CPU | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        us_msg, us_del = per_message(r)
        lat = r.get("latency_us", {})
        note = []
        if r.get("deliveries") != r.get("expected") and r.get("expected"):
            note.append(f"expected {r['expected']}")
        if r.get("rejected"):
            note.append(f"{r['rejected']} rejected")
        if r.get("timed_out"):
            note.append("timed out")
        if r.get("aborted"):
            note.append("aborted")
        if r.get("errors"):
            note.append("; ".join(r["errors"])[:80])
        if r.get("extra"):
            note.append(r["extra"])
        broker = r["broker"] + (", distinct props" if r.get("props") == "distinct" else "")
        print(f"| {broker} | {r['subs']} | {size_label(r['size'])} | {r['sent']} | {r['deliveries']} "
              f"| {fmt(r['sent_per_s'], 0)} | {fmt(r['delivered_per_s'], 0)} | {fmt(lat.get('p50', 0) / 1000, 2)} "
              f"| {fmt(lat.get('p99', 0) / 1000, 2)} | {fmt(lat.get('max', 0) / 1000, 2)} | {fmt(us_msg)} "
              f"| {fmt(us_del)} | {_pct(r.get('broker_util'))}/{_pct(r.get('loadgen_util'))} "
              f"| {', '.join(note)} |", flush=True)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def print_ratios(pairs: list[tuple[dict, dict]]) -> None:
    if not pairs:
        return
    print("\n### Ratios (ours / peer)\n")
    print("| subs | payload | peer | props (ours / peer) | CPU per msg | CPU per delivery | sent/s | delivered/s "
          "| p99 latency |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ours, peer in pairs:
        a, b = per_message(ours), per_message(peer)

        def ratio(x, y):
            return f"{x / y:.3f}" if x and y else "-"

        print(f"| {ours['subs']} | {size_label(ours['size'])} | {peer['broker']} "
              f"| {ours.get('props')} / {peer.get('props')} "
              f"| {ratio(a[0], b[0])} | {ratio(a[1], b[1])} "
              f"| {ratio(ours['sent_per_s'], peer['sent_per_s'])} "
              f"| {ratio(ours['delivered_per_s'], peer['delivered_per_s'])} "
              f"| {ratio(ours['latency_us']['p99'], peer['latency_us']['p99'])} |", flush=True)


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def machine_notes() -> str:
    import ssl

    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    proton_c = "?"
    try:
        header = Path("/usr/include/proton/version.h").read_text()
        parts = {k: line.split()[-1] for line in header.splitlines() for k in ("MAJOR", "MINOR", "POINT")
                 if f"PN_VERSION_{k}" in line}
        proton_c = f"{parts['MAJOR']}.{parts['MINOR']}.{parts['POINT']}"
    except (OSError, KeyError):
        pass
    return (f"{os.cpu_count()} cores, {model}; Python {platform.python_version()}; "
            f"python-qpid-proton {_dist_version('python-qpid-proton')}; "
            f"proton-C (loadgen) {proton_c}; {ssl.OPENSSL_VERSION}; kernel {platform.release()}")


# ------------------------------------------------------------------ scenarios
def matrix_loads(subs_list: list[int], sizes: list[int], quick: bool) -> list[Load]:
    """Messages per case: enough for ~1-3 s of broker CPU, fewer where fan-out is large."""
    loads = []
    for subs in subs_list:
        for size in sizes:
            if quick:
                base = {200: 10000, 5000: 5000, 500_000: 60}[size] if size in (200, 5000, 500_000) else 2000
            else:
                base = {200: 50000, 5000: 20000, 500_000: 400}[size] if size in (200, 5000, 500_000) else 10000
            fanout = max(1.0, 0.031 * subs)  # ~3.1 % of messages per subscription
            budget = {200: 300_000, 5000: 150_000, 500_000: 3000}.get(size, 100_000)
            if quick:
                budget //= 5
            messages = int(min(base, max(budget / fanout, 10 if size >= 100_000 else 200)))
            loads.append(Load(subs=subs, size=size, messages=messages))
    return loads


def peer_messages(load: Load, quick: bool) -> int:
    """The baseline costs ~20-100x more per message: fewer messages keep the run short."""
    budget = 3000 if quick else 8000
    fanout = max(1.0, 0.031 * load.subs)
    per_sub_cost = max(1.0, load.subs / 50)  # every selector evaluated for every message
    return int(max(20 if load.size < 100_000 else 10, min(load.messages, budget / max(fanout, per_sub_cost))))


def rabbitmq_messages(load: Load, quick: bool) -> int:
    """RabbitMQ 3.10 costs ~100-200 µs per delivery: the same messages as ours up to a delivery budget."""
    fanout = max(1.0, 0.031 * load.subs)
    budget = 10000 if quick else 30000
    return int(min(load.messages, max(10 if load.size >= 100_000 else 200, budget / fanout)))


def print_durable(rows: list[dict]) -> None:
    """Durable vs memory-only: throughput, broker CPU per message, accept latency."""
    print("\n### Durable vs memory-only (1 producer, window 1000; consumers settle each delivery)\n")
    print("| broker | subs | payload | messages | msgs/s | CPU µs/msg | accept p50 ms | accept p99 ms "
          "| durable/memory msgs/s | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    memory = {(r["family"], r["subs"], r["size"]): r for r in rows if not r["durable_load"]}
    for r in rows:
        acc = r.get("accept_latency_us", {})
        base = memory.get((r["family"], r["subs"], r["size"]))
        ratio = (f"{r['sent_per_s'] / base['sent_per_s']:.2f}" if r["durable_load"] and base and base["sent_per_s"]
                 else "-")
        print(f"| {r['broker']} | {r['subs']} | {size_label(r['size'])} | {r['sent']} "
              f"| {fmt(r['sent_per_s'], 0)} | {fmt(per_message(r)[0])} | {fmt(acc.get('p50', 0) / 1000, 2)} "
              f"| {fmt(acc.get('p99', 0) / 1000, 2)} | {ratio} | {r.get('load_avg', '-')} |", flush=True)


def _durable_pair(loadgen: Path, ws: Workspace, broker: Broker, base: Load, peer_source: str | None,
                  timeout: float, tls: list[str] | None, names: tuple[str, str], family: str) -> list[dict]:
    """``base`` memory-only, then durable, on ``broker``; rows named ``names`` (memory-only, durable)."""
    rows = []
    for durable in (False, True):
        r = run_load(loadgen, ws, broker, Load(**{**base.__dict__, "durable": durable}), peer_source, timeout, tls)
        r["broker"], r["family"] = names[durable], family
        r["load_avg"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        rows.append(r)
        print_durable([r])
    return rows


def run_durable(loadgen: Path, ws: Workspace, quick: bool, timeout: float, subs_list: list[int],
                sizes: list[int], rabbitmq_too: bool) -> list[dict]:
    """Each case memory-only then durable on the same broker (and RabbitMQ's persistent messages on a
    durable queue at one consumer: its topic-routed queues are not durable, so not comparable)."""
    rows = []
    for subs in subs_list:
        for size in sizes:
            messages = (20_000 if size <= 200 else 8_000) // (2 if quick else 1)
            base = Load(subs=subs, size=size, messages=messages, consumer_unsettled=True, distinct=True)
            broker = ws.start_ours(base.selectors(), base.cells)
            try:
                warm_up(loadgen, ws, broker, base, None, timeout)
                rows += _durable_pair(loadgen, ws, broker, base, None, timeout, None,
                                      ("ours, memory-only", "ours, durable"), "ours")
            finally:
                broker.stop()
            if rabbitmq_too and subs == 0:
                from interchange.testing import rabbitmq

                rabbit = ws.start_rabbitmq()
                try:
                    peer = Broker("rabbitmq", rabbit.url, RABBITMQ_QUEUE, None, rabbit.beam_pid)
                    tls = _tls_args(ws, CONSUMER_CN)
                    warm_up(loadgen, ws, peer, base, RABBITMQ_QUEUE, timeout, tls)
                    half = Load(**{**base.__dict__, "messages": base.messages // 2})
                    version = rabbitmq.version()
                    rows += _durable_pair(loadgen, ws, peer, half, RABBITMQ_QUEUE, timeout, tls,
                                          (f"rabbitmq {version}, transient", f"rabbitmq {version}, persistent"),
                                          "rabbitmq")
                finally:
                    rabbit.close()
    return rows


# ------------------------------------------------------------------ the run
@dataclass
class Bench:
    """One benchmark run: its options, the load generator, the workspace, the peer compared with,
    and every raw result so far (``results``, for ``--json``)."""
    args: argparse.Namespace
    loadgen: Path
    ws: Workspace
    results: list[dict] = field(default_factory=list)
    rabbit: Any = None  # --peer rabbitmq: a private node per subscription count (stopped before ours runs again)

    @property
    def quick(self) -> bool:
        return bool(self.args.quick)

    @property
    def modes(self) -> list[bool]:
        """Ours' property modes per matrix case: repeated (False) and/or distinct (True)."""
        return {"matrix": [False, True], "none": [False], "all": [True]}[self.args.distinct]

    def load(self, *fields: Any, **options: Any) -> Load:
        """A load with all-distinct properties under ``--distinct all``, repeated ones otherwise."""
        return Load(*fields, **{"distinct": self.args.distinct == "all", **options})

    def run(self, broker: Broker, load: Load, peer_source: str | None = None, tls: list[str] | None = None) -> dict:
        return run_load(self.loadgen, self.ws, broker, load, peer_source, self.args.timeout, tls)

    def fresh(self, load: Load, warm: bool = True, **start: Any) -> dict:
        return run_fresh(self.loadgen, self.ws, load, self.args.timeout, warm, **start)

    def warm(self, broker: Broker, load: Load, peer_source: str | None = None, tls: list[str] | None = None) -> None:
        warm_up(self.loadgen, self.ws, broker, load, peer_source, self.args.timeout, tls)

    def record(self, scenario: str, rows: list[dict]) -> list[dict]:
        self.results += [{"scenario": scenario, **r} for r in rows]
        return rows

    def peer_broker(self, subs: int = 0) -> Broker | None:
        """The peer for a matrix group of ``subs`` subscriptions (None: ``--peer none``)."""
        match self.args.peer:
            case "none":
                return None
            case "baseline":
                return self.ws.start_baseline()
            case "rabbitmq":
                if self.rabbit is None:
                    self.rabbit = self.ws.start_rabbitmq()
                if subs == 0:  # one consumer, or "1 (all)": a queue
                    return Broker("rabbitmq", self.rabbit.url, RABBITMQ_QUEUE, None, self.rabbit.beam_pid)
                return Broker("rabbitmq (topic routing)", self.rabbit.url, RABBITMQ_TOPIC, None, self.rabbit.beam_pid,
                              topic_routing=True)
            case url:
                return Broker("peer", url, self.args.peer_target, None, self.args.peer_pid)

    def peer_source(self, subs: int = 0) -> str:
        match self.args.peer:
            case "rabbitmq":
                return RABBITMQ_QUEUE if subs == 0 else RABBITMQ_TOPIC
            case "baseline":
                return "bench"
            case _:
                return str(self.args.peer_source)

    def peer_messages(self, load: Load) -> int:
        """The (slow) baseline and RabbitMQ get fewer messages; the ratios are per message."""
        return rabbitmq_messages(load, self.quick) if self.args.peer == "rabbitmq" else peer_messages(load, self.quick)

    def stop_peer(self, peer: Broker) -> None:
        peer.stop()
        self.close_rabbit()

    def close_rabbit(self) -> None:
        if self.rabbit is not None:
            self.rabbit.close()
            self.rabbit = None


# ------------------------------------------------------------------ scenarios, one function each
def _median(runs: list[dict], key: Callable[[dict], float], label: str, show: Callable[[dict], str]) -> dict:
    """The middle run by ``key``; with several, ``extra`` lists every run's ``show``."""
    runs = sorted(runs, key=key)
    r = runs[len(runs) // 2]
    if len(runs) > 1:
        r["extra"] = "; ".join(x for x in (r.get("extra"), f"{label} of the runs: " + ", ".join(map(show, runs))) if x)
    return r


def _matrix_ours(b: Bench, group: list[Load]) -> list[dict]:
    """Ours on one broker for the group's subscriptions: each case in each property mode (median of ``--repeat``)."""
    rows = []
    broker = b.ws.start_ours(group[0].selectors(), group[0].cells)
    try:
        b.warm(broker, group[0])
        for load in (Load(**{**ld.__dict__, "distinct": d}) for ld in group for d in b.modes):
            runs = [b.run(broker, load) for _ in range(b.args.repeat)]
            r = _median(runs, lambda x: per_message(x)[0] or 0.0, "CPU µs/msg", lambda x: fmt(per_message(x)[0]))
            rows += b.record("matrix", [r])
            print_table(f"matrix: ours, {load.label()} subscriptions, {size_label(load.size)}, "
                        f"{r['props']} properties", [r])
    finally:
        broker.stop()
    return rows


def _matrix_peer(b: Bench, group: list[Load]) -> list[dict]:
    """The peer for the group's subscriptions, each case once (distinct properties when ours has them)."""
    subs = group[0].subs
    if b.args.peer == "rabbitmq" and subs != 0:
        print(f"\n(rabbitmq, {group[0].label()} subscriptions: RabbitMQ 3.10 has no JMS selectors "
              f"(it ignores the filter); measured as IF2-style topic routing instead: routing key "
              f"in the subject, one queue per subscription bound to amq.topic)", flush=True)
    peer = b.peer_broker(subs)
    if peer is None:
        return []
    rows = []
    tls = _tls_args(b.ws, b.args.peer_cert_cn)
    try:
        b.warm(peer, group[0], b.peer_source(subs), tls)
        for load in group:
            pload = Load(**{**load.__dict__, "messages": b.peer_messages(load), "distinct": True in b.modes})
            rows += b.record("matrix", [b.run(peer, pload, b.peer_source(subs), tls)])
            print_table(f"matrix: {peer.name}, {load.label()} subscriptions, {size_label(load.size)}", rows[-1:])
    finally:
        b.stop_peer(peer)
    return rows


def matrix(b: Bench) -> None:
    """Subscriptions x payload sizes: ours (per property mode) against the peer, ratios per case."""
    subs_list = [int(x) for x in b.args.subs.split(",")] if b.args.subs else (
        [0, 1, 100, 1000] if b.quick else [0, 1, 100, 1000, 10000])
    sizes = [int(x) for x in b.args.sizes.split(",")] if b.args.sizes else [200, 5000, 500_000]
    loads = matrix_loads(subs_list, sizes, b.quick)
    ours_rows: list[dict] = []
    peer_rows: list[dict] = []
    for subs in subs_list:
        group = [ld for ld in loads if ld.subs == subs]
        ours_rows += _matrix_ours(b, group)
        peer_rows += _matrix_peer(b, group)
    print_table("Matrix: ours (1 producer, unsettled, broker credit 1000; consumers pre-settled)", ours_rows)
    if peer_rows:
        print_table("Matrix: peer", peer_rows)
        print_ratios([(o, r) for r in peer_rows for o in ours_rows if o["subs"] == r["subs"] and o["size"] == r["size"]])


def processes(b: Bench) -> None:
    """1 vs 2 broker processes (broker.processes): one generator per process, started together;
    throughput = all messages / the longest generator's publishing phase."""
    rows = []
    for subs in (0, 100):
        for distinct in b.modes:
            for count in (1, 2):
                load = Load(subs, 200, 20000 if b.quick else 50000, distinct=distinct)
                broker = b.ws.start_ours(load.selectors(), 16, processes=count)
                try:
                    for view in broker.processes or [broker]:
                        b.warm(view, load)
                    runs = [run_processes(b.loadgen, b.ws, broker, load, b.args.timeout) for _ in range(b.args.repeat)]
                finally:
                    broker.stop()
                r = _median(runs, lambda x: x["delivered_per_s"] or 0.0, "delivered/s",
                            lambda x: fmt(x["delivered_per_s"], 0))
                rows += b.record("processes", [r])
                print_table(f"processes: {count}, {load.label()} subscriptions, 200 B, {r['props']} properties", [r])
    print_table("1 vs 2 broker processes (one generator per process, 200 B)", rows)


def durable(b: Bench) -> None:
    """Memory-only against durable messages, ours (and RabbitMQ's persistent ones with ``--peer rabbitmq``)."""
    subs_list = [int(x) for x in b.args.subs.split(",")] if b.args.subs else [0, 100]
    sizes = [int(x) for x in b.args.sizes.split(",")] if b.args.sizes else [200, 5000]
    rows = run_durable(b.loadgen, b.ws, b.quick, b.args.timeout, subs_list, sizes, b.args.peer == "rabbitmq")
    print_durable(b.record("durable", rows))


def flat(b: Bench) -> None:
    """Cost per message as subscriptions grow at a constant fan-out: 100 subscriptions match as in
    the matrix, the others select tiles no message lies in (other areas of Europe)."""
    rows = [b.fresh(b.load(subs, 200, 10000 if b.quick else 30000, active=100))
            for subs in ([100, 1000] if b.quick else [100, 1000, 10000])]
    print_table("Constant fan-out, growing subscriptions (200 B)", b.record("flat", rows))


def tls(b: Bench) -> None:
    """The same broker over its plain development listener: what TLS costs."""
    rows = [b.fresh(b.load(subs, 200, 20000 if b.quick else 50000), plain=plain)
            for subs in (0, 100) for plain in (False, True)]
    print_table("TLS vs plain AMQP (same broker, 200 B)", b.record("tls", rows))


def latency(b: Bench) -> None:
    """Not saturated: a steady rate well below capacity, 1 and 100 subscriptions."""
    rows = []
    for subs in (0, 100):
        broker = b.ws.start_ours(b.load(subs, 200, 0).selectors(), 16)
        try:
            b.warm(broker, b.load(subs, 200, 0))
            for size, rate, msgs in ((200, 1000, 3000 if b.quick else 10000), (5000, 500, 1500 if b.quick else 5000)):
                r = b.run(broker, b.load(subs, size, msgs, rate=rate))
                r["extra"] = f"rate {rate}/s"
                rows.append(r)
        finally:
            broker.stop()
    print_table("Latency when not saturated (paced producer)", b.record("latency", rows))


def _requirement(b: Bench, scenario: str, title: str, load: Callable[[int], Load],
                 verdict: Callable[[dict], str]) -> None:
    """A requirement's load on a fresh, cold broker with 1 and with 100 subscriptions, each run's verdict noted."""
    rows = []
    for subs in (0, 100):
        r = b.fresh(load(subs), warm=False)
        r["extra"] = verdict(r)
        rows.append(r)
    print_table(title, b.record(scenario, rows))


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def ip012(b: Bench) -> None:
    """IP_012: every 500 KB message delivered in under 30 ms, at 10 a second."""
    _requirement(b, "ip012", "IP_012: 500 KB messages, 10/s",
                 lambda subs: b.load(subs, 500_000, 20 if b.quick else 50, rate=10),
                 lambda r: f"IP_012 every 500 KB message < 30 ms: {_met(r['latency_us']['max'] < 30_000)}")


def ip013(b: Bench) -> None:
    """IP_013: a burst of 5,000 messages from the first send to the last delivery in under 1 s."""
    def verdict(r: dict) -> str:
        total_ms = (r["deliver_seconds"] or 0) * 1000
        return f"IP_013 5,000 msgs first send -> last delivery {total_ms:.0f} ms: {_met(total_ms < 1000)}"
    _requirement(b, "ip013", "IP_013: a burst of 5,000 messages", lambda subs: b.load(subs, 200, 5000), verdict)


def slow(b: Bench) -> None:
    """Many slow producers (broker credit 10), paced and flat out, 100 subscriptions."""
    rows = []
    paced = b.load(100, 200, 4000 if b.quick else 20000, producers=50, window=10, rate=2000)
    broker = b.ws.start_ours(paced.selectors(), 16, publisher_credit=10)
    try:
        for load, what in ((paced, "2000/s total"), (Load(**{**paced.__dict__, "rate": 0.0}), "flat out")):
            r = b.run(broker, load)
            r["extra"] = f"50 producers, broker credit 10, window 10, {what}"
            rows.append(r)
    finally:
        broker.stop()
    print_table("Many slow producers (100 subscriptions)", b.record("slow", rows))


def proc_pid(broker: Broker) -> int:
    """The pid of a broker this benchmark started."""
    assert broker.pid is not None, f"{broker.name} is not a process of this run"
    return broker.pid


def connections(b: Bench) -> None:
    """1,000 connections opened at once (TLS 1.3 + SASL EXTERNAL + AMQP open), all within 10 s."""
    broker = b.ws.start_ours([None], 16)
    try:
        cpu0 = cpu_seconds(proc_pid(broker))
        out = subprocess.run([str(b.loadgen), "connect", "--url", broker.url, "--connections", "1000",
                              "--deadline-ms", "10000", *_tls_args(b.ws)], capture_output=True, text=True, timeout=120)
        cpu1 = cpu_seconds(proc_pid(broker))
    finally:
        broker.stop()
    r = json.loads(out.stdout)
    r["broker_cpu_s"] = cpu1 - cpu0
    b.record("connections", [r])
    met = r["opened"] == 1000 and r["open_ms"]["max"] < 10000
    print("\n### 1,000 connections opened at once (TLS 1.3 + SASL EXTERNAL + AMQP open)\n")
    print(f"opened {r['opened']}/{r['attempted']} within {r['deadline_ms']} ms (failed {r['failed']}); "
          f"open time p50 {r['open_ms']['p50']:.0f} ms, last {r['open_ms']['max']:.0f} ms; "
          f"broker CPU {r['broker_cpu_s'] * 1000:.0f} ms ({r['broker_cpu_s'] * 1e6 / max(1, r['opened']):.0f} "
          f"µs per connection); target: all within 10 s: {'met' if met else 'NOT met'}"
          + (f"; errors: {r['errors']}" if r["errors"] else ""), flush=True)


#: Every scenario, in the order a run takes them (``--only`` picks some).
SCENARIOS: dict[str, Callable[[Bench], None]] = {
    "matrix": matrix, "processes": processes, "durable": durable, "flat": flat, "tls": tls, "latency": latency,
    "ip012": ip012, "ip013": ip013, "slow": slow, "connections": connections,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Broker benchmark: ours vs a peer (see module docstring).")
    p.add_argument("--quick", action="store_true", help="a reduced run in < 2 minutes")
    p.add_argument("--only", default="all", help=f"comma list of: {', '.join(SCENARIOS)} (default all)")
    p.add_argument("--subs", default=None, help="comma list of subscription counts (0 = one without selector)")
    p.add_argument("--sizes", default=None, help="comma list of payload sizes in bytes")
    p.add_argument("--peer", default="baseline",
                   help="'baseline' (benchmarks/baseline_broker.py), 'rabbitmq' (a private RabbitMQ node, "
                        "interchange/testing/rabbitmq.py), 'none', or an amqp(s)://host:port URL")
    p.add_argument("--distinct", choices=("matrix", "none", "all"), default="matrix",
                   help="all-distinct application properties: 'matrix' (default) runs each matrix case "
                        "against ours with repeated and with distinct properties (the peer: distinct); "
                        "'none' repeated only; 'all' every scenario distinct only")
    p.add_argument("--peer-target", default="bench", help="address the peer's producer publishes to")
    p.add_argument("--peer-source", default="bench", help="address the peer's consumers read (with selectors)")
    p.add_argument("--peer-pid", type=int, help="pid of an external peer, to read its CPU time")
    p.add_argument("--peer-cert-cn", default=CONSUMER_CN, help="client identity for an amqps peer")
    p.add_argument("--timeout", type=float, default=300.0, help="per-run limit of the publishing phase (s)")
    p.add_argument("--repeat", type=int, default=1, help="runs per matrix case against ours (median shown)")
    p.add_argument("--json", type=Path, help="write every raw result here")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (PKI, configs, logs)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the load generator")
    return p


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    only = list(SCENARIOS) if args.only == "all" else args.only.split(",")
    if unknown := [name for name in only if name not in SCENARIOS]:
        cli.error(f"--only: no scenario {', '.join(unknown)} (there are: {', '.join(SCENARIOS)})")
    loadgen = ensure_loadgen(args.rebuild)
    raise_nofile()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop what we started
    if args.peer == "rabbitmq":
        from interchange.testing import rabbitmq

        rabbitmq.ensure_installed()  # before the long runs: apt-get install if missing
    bench = Bench(args, loadgen, Workspace(args.keep))
    print(f"# Broker benchmark ({'quick' if args.quick else 'full'}) — {machine_notes()}", flush=True)
    print(f"# workdir {bench.ws.dir}", flush=True)
    started = time.monotonic()
    try:
        for name in (name for name in SCENARIOS if name in only):
            SCENARIOS[name](bench)
    finally:
        bench.close_rabbit()
        bench.ws.close()
        if args.json:
            args.json.write_text(json.dumps({"machine": machine_notes(), "results": bench.results}, indent=1))
    print(f"\n# total {time.monotonic() - started:.0f} s", flush=True)
    if failures := bench.ws.failures:
        print(f"\n!!! {len(failures)} run(s) did not deliver what was expected:\n  " + "\n  ".join(failures),
              file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
