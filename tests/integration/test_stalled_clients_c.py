"""The C stalled clients (``benchmarks/loadgen/stalled.c``, the benchmark's stand-in for actors on other
hosts) stall where the Python ones do, and the node's deadlines close them.

500 per interface against a real node process (the test deadlines, 3-4.5 s): every connection reaches
its stall, is closed within its stage's deadline + 2 s, the node logged that stage's record for the
connection's port and answered it or not (SASL frames, a 408) as it answers the Python clients
(:func:`interchange.testing.stalled_clients.check_closed`, also used by test_preamble_deadlines).
Mutants built with ``-DMUTE_MODE`` (one stall sends nothing after TLS) must fail those checks, on
that stall only. Given an interface's address more than once (a node's broker processes' ports), both the
C and the Python clients spread its connections evenly over them.
"""
from __future__ import annotations

import json
import select
import socket
import subprocess
import time
from pathlib import Path

import pytest

from certs import TestPki
from interchange.testing.broker_harness import BROKER_CN, NodeProcess, complete_records
from interchange.testing.paths import REPO_ROOT
from interchange.testing.stalled_clients import EXPECTED, check_closed, command, ensure_c_clients

COUNT = 500  #: per interface


def run_clients(binary: Path, node: NodeProcess, pki: TestPki, count: int) -> tuple[list[dict], list[str]]:
    """The clients' lines (ready, one per connection, done) and the problems :func:`check_closed` finds,
    against the node's records of this run only (a port may come again in a later run)."""
    assert node.log is not None
    before = len(complete_records(node.log))
    done = subprocess.run(command("c", {"bi": node.bi_port, "ii": node.ii_port}, count, pki.directory, BROKER_CN,
                                  binary=binary), capture_output=True, text=True, timeout=60, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    results = [line for line in lines if "mode" in line]
    ports = {f"127.0.0.1:{r['port']}" for r in results}
    events = {event for _, event, _, _ in EXPECTED.values()}
    deadline = time.monotonic() + 3.0  # the node's log is written by a thread, every 5 ms
    while True:
        records = complete_records(node.log)[before:]
        logged = {r["details"].get("peer") for r in records if r["event"] in events}
        if ports <= logged or time.monotonic() > deadline:
            return lines, check_closed(results, records)
        time.sleep(0.1)


def test_every_stall_reached_and_closed_by_its_deadline(deadline_node: NodeProcess, pki: TestPki) -> None:
    lines, problems = run_clients(ensure_c_clients(), deadline_node, pki, COUNT)
    results = [line for line in lines if "mode" in line]
    assert lines[-1]["done"] == len(results) == 2 * COUNT
    assert [line["ready"] for line in lines if "ready" in line] == [2 * COUNT]
    assert {(r["interface"], r["mode"]) for r in results} == set(EXPECTED)
    assert not problems, f"{len(problems)} of {len(results)}: {problems[:10]}"
    assert not [line for line in deadline_node.stderr if "Traceback" in line], "".join(deadline_node.stderr)[-3000:]
    print(f"\nC clients: {lines[-1]['cpu_s']:.2f} s CPU for {len(results)} connections")


@pytest.mark.parametrize("mute", ["sasl-init-part", "open-trickle", "header-trickle", "body-trickle"])
def test_a_stall_that_sends_nothing_fails_the_checks(mute: str, deadline_node: NodeProcess, pki: TestPki,
                                                     tmp_path: Path) -> None:
    """header-trickle is muted on both interfaces: the BI's looks like tls-idle to the node (a partial
    protocol header is no header), the II's is caught (no request begun: no 408)."""
    binary = ensure_c_clients(tmp_path / "stalled-mute", f'-DMUTE_MODE="{mute}"')
    lines, problems = run_clients(binary, deadline_node, pki, 8)  # each BI stall at least once, each II stall twice
    assert problems, f"the mutant muting {mute} passed every check"
    assert all(f"'{mute}')" in problem for problem in problems), problems


@pytest.mark.parametrize("kind", ["c", "python"])
def test_connections_spread_over_the_addresses_given(kind: str, pki: TestPki) -> None:
    """``--bi`` twice: connection i to address i % 2, counted by two listeners that close what they accept
    (the clients then end: closed or refused in their handshake)."""
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    accepted = [0, 0]
    clients = subprocess.Popen(command(kind, {"bi": [listener.getsockname()[1] for listener in listeners]}, 6,
                                       pki.directory, BROKER_CN, binary=ensure_c_clients() if kind == "c" else None),
                               stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 30
        while clients.poll() is None and time.monotonic() < deadline:
            for listener in select.select(listeners, [], [], 0.1)[0]:
                connection, _ = listener.accept()
                connection.close()
                accepted[listeners.index(listener)] += 1
        out = clients.communicate(timeout=30)[0]
    finally:
        clients.kill()
        for listener in listeners:
            listener.close()
    assert accepted == [3, 3]
    assert len([line for line in out.splitlines() if '"mode"' in line]) == 6
