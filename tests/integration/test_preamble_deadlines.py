"""Connections that never finish their preamble are closed by its stage deadlines, on both interfaces
of a real node process, while a steady BI client is served as fast as before.

500 connections per interface (:mod:`interchange.testing.stalled_clients`, its own process) stall at
every stage: BI TCP without TLS, TLS then nothing, the protocol header trickled, the SASL header
alone, part of a sasl-init, no open after SASL, an open trickled; II TCP alone, TLS then nothing,
headers trickled a line at a time, a body trickled. Each must be closed within its stage's deadline
+ 2 s of reaching that stage (and not long before it: the deadline closed it), with the node's record
of that stage for its port (:func:`~interchange.testing.stalled_clients.check_closed`), and a steady client
is served meanwhile (its round-trip p99 under 100 ms; the quiet and loaded p99 are printed).

The loaded phase makes round trips back to back (2,000-3,800 of them), reading the stalled clients'
lines in between in the same thread.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from proton import Message

from interchange.testing.broker_harness import BROKER_CN, NodeProcess, client_connection, complete_records, denm
from interchange.testing.stalled_clients import check_closed, deadline_node_config
from certs import TestPki
from interchange.testing.paths import REPO_ROOT

COUNT = 500  #: stalled connections per interface
SLACK_S = 2.0
QUIET = 400  #: quiet round trips before the stalled connections
WAIT_S = 60.0


@pytest.fixture(scope="module")
def node(pki: TestPki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    running = NodeProcess(deadline_node_config(pki, BROKER_CN, tmp_path_factory.mktemp("deadlines")))
    try:
        yield running
    finally:
        running.stop()


class Steady:
    """A publisher and a consumer; round trips one message at a time (sent, accepted, received)."""

    def __init__(self, pki: TestPki, port: int) -> None:
        self.publisher = client_connection(pki, "actor-1", port)
        self.consumer = client_connection(pki, "actor-2", port)
        self.sender = self.publisher.create_sender("in")
        self.receiver = self.consumer.create_receiver("all", credit=10)

    def round_trip(self) -> float:
        started = time.perf_counter()
        self.sender.send(denm())
        message: Message = self.receiver.receive(timeout=10)
        self.receiver.accept()
        assert message.properties["messageType"] == "DENM"
        return time.perf_counter() - started

    def close(self) -> None:
        self.publisher.close()
        self.consumer.close()


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Lines:
    """The stalled clients' JSON lines, read by the test's own thread between round trips: a reader
    thread parsing them could hold the interpreter's lock while a round trip waits (up to its 5 ms
    switch interval), which the steady client would count as the node's latency."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self._fd = process.stdout.fileno()
        os.set_blocking(self._fd, False)
        self._partial = b""

    def read(self, timeout: float) -> list[dict]:
        """The complete lines there are, waiting up to ``timeout`` for some."""
        if not select.select([self._fd], [], [], timeout)[0]:
            return []
        try:
            data = os.read(self._fd, 1 << 20)
        except BlockingIOError:
            return []
        *complete, self._partial = (self._partial + data).split(b"\n")
        return [json.loads(line) for line in complete if line]


def test_stalled_connections_closed_by_their_deadlines(node: NodeProcess, pki: TestPki) -> None:
    steady = Steady(pki, node.bi_port)
    try:
        for _ in range(50):
            steady.round_trip()  # warm up (first deliveries, caches)
        quiet = [steady.round_trip() for _ in range(QUIET)]
        started = time.monotonic()
        stalled = subprocess.Popen(
            [sys.executable, "-m", "interchange.testing.stalled_clients", "--bi", f"127.0.0.1:{node.bi_port}",
             "--ii", f"127.0.0.1:{node.ii_port}", "--count", str(COUNT), "--pki", str(pki.directory),
             "--server-name", BROKER_CN, "--trickle-s", "0.5", "--path", "/actor-1/subscriptions"],
            stdout=subprocess.PIPE, cwd=REPO_ROOT)
        lines = Lines(stalled)
        results, loaded, ready, done = [], [], False, False
        while not done:
            assert time.monotonic() - started < WAIT_S, f"not all closed in {WAIT_S} s: {len(results)} reported"
            for record in lines.read(0.0 if ready else 1.0):
                if "done" in record:
                    done = True
                elif "ready" in record:
                    ready = True
                else:
                    results.append(record)
            if ready and not done:
                loaded.append(steady.round_trip())
        stalled.wait(WAIT_S)
    finally:
        steady.close()
    assert len(results) == 2 * COUNT
    assert node.log is not None
    time.sleep(0.2)  # the log's thread writes every 5 ms
    # every connection reached its stage, was closed by its deadline (+ SLACK_S), logged as such
    problems = check_closed(results, complete_records(node.log), SLACK_S)
    assert not problems, f"{len(problems)} not closed by their deadline: {problems[:10]}"
    assert len(loaded) >= 100, f"only {len(loaded)} round trips while the stalled connections were held"
    print(f"\nsteady p99 quiet {p99(quiet) * 1000:.2f} ms, with {2 * COUNT} stalled connections "
          f"{p99(loaded) * 1000:.2f} ms ({len(loaded)} round trips)")
    # served throughout, not starved: the "within 2x the quiet p99" is a figure in
    # docs/performance.md (per phase, benchmarks/bench_deadline_phases.py), not asserted: on two
    # shared cores the ratio follows the machine's load as much as the node's work
    assert p99(loaded) < 0.1, (p99(quiet), p99(loaded))
    assert not [line for line in node.stderr if "Traceback" in line], "".join(node.stderr)[-3000:]
