"""Every script in benchmarks/ runs at its smallest size, exits 0 and prints its figures.

Benchmarks are not tests (their figures go to docs/performance.md and are never asserted), but a
benchmark that no longer starts, or whose options or imports broke, fails here instead of going
unnoticed. Each script runs as a user runs it (``python benchmarks/NAME.py ...``, its own process),
except the Spark ones: their ``main(argv)`` runs in this process on the suite's one Spark session
(a JVM each would cost start-up and memory). What is checked is the exit status and the headings
or labels of the figures it prints. The modules
the scripts import (``node_process.py``, ``plain_audit.py``) and the peer broker ``bench_broker.py``
starts (``baseline_broker.py``) run through them. A new script without an entry here fails
``test_every_benchmark_is_run``.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from interchange.testing.paths import REPO_ROOT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = REPO_ROOT
BENCHMARKS = ROOT / "benchmarks"


@dataclass(frozen=True)
class Smoke:
    args: tuple[str, ...]  #: the smallest size
    figures: tuple[str, ...]  #: text the output must hold: headings and labels of its figures


SMOKE: dict[str, Smoke] = {
    "bench_parts.py": Smoke(("--number", "200", "--rounds", "1", "--against", str(ROOT)),  # this tree against itself
                            ("CPU µs per message", "engine, 200 B through a consumer link", "this/against")),
    "bench_scan.py": Smoke(("--number", "200", "--repeat", "1"), ("scan_message µs", "C accelerator µs")),
    "bench_selectors.py": Smoke(("--seconds", "0.01"), ("compiled/s", "reference/s")),
    "bench_link_selectors.py": Smoke((), ("unbounded (before)", "bounded, at the limits")),
    "bench_observer.py": Smoke(("--number", "1000"), ("current", "without the per-type counter", "load average")),
    "bench_memory.py": Smoke(("--sources", "10", "--total", "2000", "--cap", "300", "--peer", str(ROOT)),  # itself
                             ("2,000 in all", "at cap (300 each)", "B/held", "load after")),
    "bench_store.py": Smoke(("--messages", "200"), ("journal     200 B", "sqlite      200 B", "µs CPU/msg")),
    "bench_admission_peer.py": Smoke(("--peer", str(ROOT), "--alternations", "1"),  # this tree against itself
                                     ("best of 1 alternations", "admission, C, distinct", "ratio")),
    "bench_broker.py": Smoke(("--quick", "--only", "matrix", "--subs", "0", "--sizes", "200", "--peer", "baseline",
                              "--distinct", "none"), ("### Matrix: ours", "### Matrix: peer", "### Ratios (ours / peer)")),
    "bench_if2.py": Smoke(("--messages", "50", "--paced", "20", "--rate", "100"),
                          ("rabbitmq       throughput", "if2->croads    latency", "croads->if2 latency: added p50")),
    "if2_loadgen.py": Smoke(("--messages", "200", "--paced", "20", "--rate", "100"),
                            ("rabbitmq flat out", "rabbitmq paced 100/s", "pub µs")),
    "bench_multihop.py": Smoke(("--messages", "20", "--rate", "50"), ("A -> D (3 hops, end to end)", "per hop, A -> D / 3")),
    "bench_ii_churn.py": Smoke(("--rounds", "1", "--capabilities", "200", "--subscriptions", "20", "--rate", "20",
                                "--quiet-s", "1"), ("no churn (peer)  BI latency", "BI latency churn / no churn")),
    "bench_tlex.py": Smoke(("--controllers", "2", "--seconds", "1", "--warmup", "0.5"),
                           ("peer: simulator -> Broker-session client", "bridged: simulator", "bridge hot path")),
    "bench_tlex_start.py": Smoke(("--controllers", "20"),
                                 ("phase | capabilities | start s", "peer (no [tlex])", "replace (new SPATEM version)")),
    "bench_tlex_scale.py": Smoke(("--controllers", "5", "--seconds", "1", "--warmup", "0.5", "--multiplex", "2",
                                  "--variants", "amqps/0,in-process/30"),
                                 ("3 TLC multiplex sessions", "peer: generator -> Broker-session client",
                                  "bridged (amqps/0)",
                                  "bridged (in-process/30)", "added (bridged - peer)", "generator:")),
    "tlex_breakdown.py": Smoke(("--controllers", "2", "--seconds", "1"), ("bridge -> broker send", "node loop lag")),
    "bench_handshake_cpu.py": Smoke(("--count", "3", "--rounds", "1"), ("ClientHello", "client flight", "node")),
    "bench_deadline_phases.py": Smoke(("--runs", "1", "--modes", "node,idle,pinned,pinidle,peerpin,procs2pin,procs2cfg",
                                       "--interfaces", "bi",
                                       "--count", "7", "--quiet", "20", "--after", "10", "--pace-ms", "1"),
                                      ("phase", "quiet", "p99", "7 of 7 closed by their deadline", "load after",
                                       "node1    clients: 7 connections (SCHED_OTHER nice 0)",
                                       "idle1    clients: 7 connections (SCHED_IDLE nice 0)",
                                       "pinned1  clients: 7 connections (SCHED_OTHER nice 0 on CPU ",
                                       "pinidle1 clients: 7 connections (SCHED_IDLE nice 0 on CPU ",
                                       "peerpin1 clients: 7 connections (SCHED_OTHER nice 0 on CPU ",
                                       "; the peer node's: main ",
                                       "procs2pin1 clients: 7 connections (SCHED_OTHER nice 0 on CPU ",
                                       "procs2cfg1 clients: 7 connections (SCHED_OTHER nice 0 on CPU ",
                                       "; broker process 0's: main ", " ms (3 connections, ", " ms (4 connections, ",
                                       "the node's threads' CPUs: main ")),
    # (its faults run one after another, each once its time has come: at 6 s they all still come)
    "soak_faults.py": Smoke(("--minutes", "0.1", "--rate", "20", "--stalled", "10", "--fuzz", "10", "--full-s", "1",
                             "--drain", "20"), ("disk full", "kill -9", "restarted", "accepted durable messages lost:",
                                                "node RSS MB")),
    "soak_federation.py": Smoke(("--minutes", "0.2", "--rate", "20", "--drain", "10"),
                                ("kill -9", "restarted", "latency_p99_ms", "lost within TTL:")),
}
#: bench_spark.py leaves the log bench_ingest_profile.py and bench_ingest.py read and the Parquet tables
#: bench_spark_profile.py reads: they run together.
SPARK_SCRIPTS = ("bench_spark.py", "bench_ingest_profile.py", "bench_ingest.py", "bench_spark_profile.py",
                 "bench_validate_pair.py")
#: Imported by the scripts, or started by one (the baseline peer), not run on their own here.
#: tlex_loadgen.py is bench_tlex_scale.py's generator; profile_categories.py reads its --profile (py-spy).
HELPERS = ("node_process.py", "plain_audit.py", "baseline_broker.py", "tlex_loadgen.py", "profile_categories.py",
           "jvm_cpu.py", "host_cpu.py")


def run(script: str, *args: str, timeout: float = 300) -> str:
    """The script's output once it exited 0 (else a failure with the end of what it printed)."""
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (f"{script} {' '.join(args)} exited {done.returncode}\n"
                                  f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
    return done.stdout


def assert_prints(script: str, output: str, figures: tuple[str, ...]) -> None:
    missing = [text for text in figures if text not in output]
    assert not missing, f"{script} printed no {missing}:\n{output[-3000:]}"


def test_every_benchmark_is_run() -> None:
    scripts = {path.name for path in BENCHMARKS.glob("*.py")}
    assert scripts == set(SMOKE) | set(SPARK_SCRIPTS) | set(HELPERS)


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs_at_its_smallest_size(script: str) -> None:
    smoke = SMOKE[script]
    assert_prints(script, run(script, *smoke.args), smoke.figures)


def test_if2_benchmark_with_generator_processes() -> None:
    """bench_if2.py's --processes path (if2_publish, rabbitmq-c, as the back-office's publishers at
    RabbitMQ and if2_consume as RabbitMQ alone's competing consumers; the C load generator as the
    import's C-Roads consumer): every message published by two publisher processes arrives once
    (none lost or duplicated, the publishers' own count: none unconfirmed), and both C ends' CPU
    shows in each flat-out phase's CPU by process, with the node's event-loop wake-ups; RabbitMQ
    runs without scheduler busy waiting by default; the flat-out phases are bracketed by default (RabbitMQ
    alone again after the import's)."""
    output = run("bench_if2.py", "--processes", "2", "--consumers", "2", "--messages", "200", "--rates", "100",
                 "--paced-s", "0.5", "--directions", "import")
    assert_prints("bench_if2.py", output, ("if2->croads    flat out", "CPU per flat-out message by process",
                                           "if2->croads over RabbitMQ alone, µs per message: publishers",
                                           "; node wake-ups ",  # (in the import row: the node reads and writes)
                                           "RabbitMQ's consumers (RabbitMQ alone, the export's back-office): "
                                           "C (if2_consume, rabbitmq-c) x 2",
                                           "RabbitMQ's publishers (RabbitMQ alone, the import's back-office): "
                                           "C (if2_publish, rabbitmq-c, confirms) x 2",
                                           "# RabbitMQ's scheduler busy waiting: none "
                                           "(+sbwt none, +sbwtdcpu none, +sbwtdio none)"))
    lines = output.splitlines()
    for scenario in ("rabbitmq", "if2->croads"):
        for phase, sent in (("flat out", "200"), ("100/s", "50")):
            row = next(line.split() for line in lines if line.startswith(f" 1 {scenario:<14} {phase}"))
            assert row[-10] == sent and row[-4:-2] == ["0", "0"], row  # every message, none lost or duplicated
            assert row[-1] == "0", row  # RabbitMQ confirmed every publish (none nacked, returned or unanswered)
    assert any(line.startswith(f" 1 {'rabbitmq-2':<14} flat out") for line in lines), output[-3000:]
    cpu = next(line for line in lines if line.startswith("# round 1  rabbitmq "))
    publishers_us, consumers_us = (float(cell.split("(")[0].split()[-1]) for cell in cpu.split(")")[:2])
    assert publishers_us > 0 and consumers_us > 0, cpu  # the C publishers' and consumers' own CPU, per message


def test_if2_benchmark_floor_beside_the_plain_bi_path() -> None:
    """``--floor``: RabbitMQ alone flat out while the node routes as many messages over its plain BI path
    (the C load generator publishing, the import's C consumer): both sides receive every message once,
    each row carries its own side's CPU (the RabbitMQ side's clients and beam.smp; the BI side's clients
    and the node), and the round's floor line compares them with RabbitMQ alone and the import; over two
    rounds, each path's median ratio to RabbitMQ alone of its round. With ``--control --bracket``: RabbitMQ
    alone again right after the first (the A/A control, every message once) and after each step's flat-out
    phase, so each is between two of RabbitMQ alone's, and with the export's flat-out phase shorter RabbitMQ
    alone with as many messages (its A/A); the bracketed ratios, the A/A spreads and each phase's host are
    printed."""
    output = run("bench_if2.py", "--processes", "2", "--consumers", "2", "--messages", "200", "--rates", "100",
                 "--paced-s", "0.5", "--floor", "--rounds", "2", "--control", "--bracket", "--export-messages", "100")
    assert_prints("bench_if2.py", output, ("# round 1 rabbitmq-again flat out: ", "# round 2 if2->croads flat out: ",
                                           "x RabbitMQ alone bracketed (the mean of just before and just after; "
                                           "drift after/before ",
                                           "# over 2 rounds, if2->croads flat out / RabbitMQ alone: bracketed median ",
                                           "# A/A (RabbitMQ alone against itself): RabbitMQ alone again after each "
                                           "step / the round's first median ",
                                           "# A/A control (rabbitmq-again / RabbitMQ alone, per round): median ",
                                           "# A/A control (rabbitmq-again / RabbitMQ alone, bracketed): median ",
                                           "# A/A control (rabbitmq-short / RabbitMQ alone, bracketed): median ",
                                           "# the rest of the host by phase (other processes and steal in cores",
                                           "#   round 2 if2->croads flat out (", "#   round 1 rabbitmq-again 100/s (",
                                           "; flowing: idle "))
    order = [line.split()[1] for line in output.splitlines() if line.startswith(" 1 ") and " flat out " in line]
    assert order == ["rabbitmq", "rabbitmq-again", "rabbitmq-2", "rabbitmq-short", "rabbitmq-3", "rabbitmq+bi", "bi",
                     "rabbitmq-4", "if2->croads", "rabbitmq-5", "croads->if2", "rabbitmq-6"], order  # ("bi plain")
    for scenario, sent in (("rabbitmq-again", "200"), ("rabbitmq-short", "100")):
        row = next(line.split() for line in output.splitlines() if line.startswith(f" 1 {scenario:<14} flat out"))
        assert row[-10] == sent and row[-4:-2] == ["0", "0"] and row[-1] == "0", row  # every one, once
    assert_prints("bench_if2.py", output, ("# --floor: the plain BI path's messages are ",
                                           "# round 1 floor: the plain BI path paced at ",
                                           "# round 1 floor: RabbitMQ beside the node's plain BI path ",
                                           "#   if2->croads: node ", "RabbitMQ's threads per message: 1_scheduler",
                                           "CPU probe before: CPU 0 ",
                                           "# over 2 rounds, rabbitmq+bi flat out / RabbitMQ alone: median ",
                                           "# over 2 rounds, if2->croads flat out / RabbitMQ alone: median "))
    lines = output.splitlines()
    over = next(line for line in lines if line.startswith("# over 2 rounds, if2->croads"))
    assert over.endswith(" of 2 rounds at 0.8x or more"), over
    rows = {scenario: next(line.split() for line in lines if line.startswith(f" 1 {scenario:<14} flat out"))
            for scenario in ("rabbitmq+bi", "bi plain")}
    for scenario, row in rows.items():
        assert row[-10] == "200" and row[-4:-2] == ["0", "0"], (scenario, row)  # every message, once
    assert float(rows["rabbitmq+bi"][-6]) == 0 and float(rows["rabbitmq+bi"][-5]) > 0, rows  # RabbitMQ's side
    assert float(rows["bi plain"][-5]) == 0, rows  # the node's side (its CPU: 200 messages are a tick or two)


def test_if2_benchmark_rabbitmq_alone_with_the_bridges_acks() -> None:
    """``--rabbit-ack-every``: RabbitMQ alone's C consumer acknowledges (multiple) instead of auto-ack,
    within the bridge's prefetch: with a prefetch of 20 and 200 messages it receives every one only
    because it acks (one that did not would get 20). (Here RabbitMQ's schedulers busy-wait, the
    VM's own thresholds, as ``--rabbitmq-busy-wait erlang-default`` asks; ``--no-bracket``: the order of
    the runs before, RabbitMQ alone once a round.)"""
    output = run("bench_if2.py", "--processes", "2", "--consumers", "1", "--messages", "200", "--rates", "100",
                 "--paced-s", "0.5", "--directions", "import", "--prefetch", "20", "--rabbit-ack-every", "7",
                 "--rabbitmq-busy-wait", "erlang-default", "--no-bracket")
    assert "rabbitmq-2" not in output and " bracketed " not in output, output[-3000:]
    assert_prints("bench_if2.py", output, ("C (if2_consume, rabbitmq-c, acks every 7, prefetch 20) x 1",
                                           "# RabbitMQ's scheduler busy waiting: erlang-default "
                                           "(+sbwt medium, +sbwtdcpu short, +sbwtdio short)"))
    lines = output.splitlines()
    for phase, sent in (("flat out", "200"), ("100/s", "50")):
        row = next(line.split() for line in lines if line.startswith(f" 1 {'rabbitmq':<14} {phase}"))
        assert row[-10] == sent and row[-4:-2] == ["0", "0"], row  # every message, none lost or duplicated


def test_host_cpu_counts_a_process_of_the_rest_of_the_host_and_not_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """host_cpu: a spinning process that is not this process's descendant (its parent shell exited) shows
    with its CPU; this process's own spinning child does not count; the sampler tells the machine's idle
    and steal over a span of its readings, and nothing over a span shorter than two."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    host_cpu = importlib.import_module("host_cpu")
    spin = [sys.executable, "-c", "import time\nend = time.monotonic() + 3\nwhile time.monotonic() < end: pass"]
    own = subprocess.Popen(spin)
    stranger = int(subprocess.run(["sh", "-c", '"$@" >/dev/null 2>&1 & echo $!', "sh", *spin], capture_output=True,
                                  text=True, check=True).stdout)
    host_cpu.sampler()
    try:
        before = host_cpu.snapshot()
        time.sleep(1.0)
        delta = host_cpu.delta(before, host_cpu.snapshot(), top=100)
    finally:
        own.kill()
        own.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(stranger, signal.SIGKILL)
    span = host_cpu.sampler().over(time.time_ns() - int(0.8e9), time.time_ns())
    assert span is not None and 0.0 <= span[0] <= (os.cpu_count() or 1) + 0.05 and span[1] >= 0.0, span
    assert host_cpu.sampler().over(time.time_ns() - 1000, time.time_ns()) is None  # (under two readings)
    by_pid = {pid: cores for _, pid, cores in delta.top}
    assert by_pid.get(stranger, 0.0) > 0.05, delta  # (it spun: up to a core, less what the rest of the host took)
    assert own.pid not in by_pid, delta
    assert delta.others_cores >= by_pid[stranger] and delta.disturbed and 0.9 < delta.wall_s < 2.0, delta


def test_if2_benchmark_refuses_a_negative_ack_interval_before_it_starts() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_if2.py"), "--rabbit-ack-every", "-1"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--rabbit-ack-every must be 0 (auto-ack) or more, not -1" in done.stderr
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_if2.py"), "--control"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "--control and --bracket need --processes" in done.stderr, done.stderr[-2000:]


def run_in_session(script: str, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """A Spark script's output once its ``main(args)`` returned 0, run in this process (its session
    is the suite's, which it leaves running)."""
    module = importlib.import_module(script.removesuffix(".py"))
    capsys.readouterr()
    status = module.main(list(args))
    output = capsys.readouterr().out
    assert status == 0, f"{script} {' '.join(args)} returned {status}\n{output[-3000:]}"
    return output


def test_spark_benchmarks_run_at_their_smallest_size(spark: SparkSession, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as `python benchmarks/NAME.py` has it: plain_audit
    output = run_in_session("bench_spark.py", capsys, "--lines", "2000", "--probes", "1", "--skip-json",
                            "--work", str(tmp_path))
    assert_prints("bench_spark.py", output, ("plain Python audit", "Spark validate over Parquet", "lines/s",
                                             "DuckDB JSON->Parquet", "Spark ingest", "JVM CPU", "JIT C2",
                                             "the rest of the host",
                                             "stream latency line -> violation row", "driver memory"))
    (log,) = (tmp_path / "logs").glob("*.jsonl")
    # the same log again, read where it is (no log generated: none in the new work directory)
    output = run_in_session("bench_spark.py", capsys, "--log", str(log), "--skip-json", "--skip-stream",
                            "--work", str(tmp_path / "again"))
    assert_prints("bench_spark.py --log", output, ("Spark ingest", "rule metrics: plain Python and Spark agree"))
    assert "generate" not in output and not (tmp_path / "again" / "logs").exists(), output[-3000:]
    output = run_in_session("bench_ingest_profile.py", capsys, str(log))
    assert_prints("bench_ingest_profile.py", output, ("the Java line parser", "ingest (three tables written)",
                                                      "load average"))
    # a new JVM per job, as it measures (this tree's ingest, then a floor) against DuckDB: one floor here,
    # the others in the suite's session (each JVM costs the run ~10 s)
    output = run("bench_ingest.py", str(log), "--tree", str(ROOT), "--floor=text", "--runs", "1", "--master", "local[2]")
    lines = len(log.read_bytes().splitlines())
    assert_prints("bench_ingest.py", output, ("DuckDB JSON -> Parquet", f"ingest {ROOT}", "x DuckDB", "JVM peak",
                                              "ingest 1 (cold): tasks", "JIT C2", "Janino", "the rest of the host",
                                              f"floor text ({ROOT})",
                                              "x DuckDB cold", "text 1 (cold): tasks"))
    assert output.count(f"({lines} rows)") == 1, output[-3000:]
    bench_ingest = importlib.import_module("bench_ingest")
    for job in ("json", "json-sorted"):
        bench_ingest.run_floor(spark, job, str(log), str(tmp_path / job))
        assert spark.read.parquet(str(tmp_path / job)).count() == lines, job
    output = run_in_session("bench_spark_profile.py", capsys, str(tmp_path / "tables"), "--runs", "1")
    assert_prints("bench_spark_profile.py", output, ("load average",))
    # a new JVM per tree, JDK and floor, as it measures: the other floor in the suite's session
    output = run("bench_validate_pair.py", str(tmp_path / "tables"), "--tree", str(ROOT), "--runs", "1",
                 "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2", "--floor=scan", "--plain", str(log))
    assert_prints("bench_validate_pair.py", output, ("validate 1:", "JVM CPU", "findings", "JVM peak",
                                                     "floor scan 1:", "shard keys", "plain Python audit",
                                                     "plain Python ("))
    bench_validate_pair = importlib.import_module("bench_validate_pair")
    assert bench_validate_pair.run_floor(spark, "scan-sort", str(tmp_path / "tables")) is None
    assert not spark.sparkContext._jsc.sc().isStopped()  # the suite's session is still there


def test_bench_spark_refuses_a_log_that_is_not_there(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_spark.py"), "--log", str(tmp_path / "none.jsonl"),
                           "--work", str(tmp_path / "work")], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "--log" in done.stderr and "no such file" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "work").exists()  # refused before anything was made
