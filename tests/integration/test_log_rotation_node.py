"""Log rotation in a running node of two broker processes: each process rotates its own log."""
from __future__ import annotations

import json
from pathlib import Path

from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.testing.broker_harness import client_connection, denm, make_pki, start_broker


def lines_of(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), f"{path.name} ends in a partial line"
    return [json.loads(line) for line in text.splitlines()]


def everything(directory: Path, active: Path) -> list[dict]:
    """What a reader sees: every file rotated from ``active`` (in name order), then the active file."""
    seen: list[dict] = []
    for path in sorted(directory.glob(f"{active.stem}-*.jsonl")):
        seen += lines_of(path)
    if active.exists():
        seen += lines_of(active)
    return seen


def test_a_node_rotates_its_logs_and_each_process_its_own(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    workdir = tmp_path / "node"
    b = start_broker(pki, workdir, [TargetSpec(address="in-1", publishers=frozenset({"actor-1"}), process=1)],
                     [SourceSpec(address="all", consumers=frozenset({"actor-2"}))], processes=2,
                     log_options={"rotate_bytes": 3_000})
    try:
        publisher = client_connection(pki, "actor-1", b.node.amqps_ports[1])
        sender = publisher.create_sender("in-1")
        for i in range(20):
            sender.send(denm(body=f"{i}".encode()))
        publisher.close()
    finally:
        b.stop()
    worker = everything(workdir, workdir / "node.p1.log")
    assert len(list(workdir.glob("node.p1-*.jsonl"))) >= 2
    received = [r for r in worker if r["event"] == "received_message"]
    assert [bytes.fromhex(r["bodyContentHex"]) for r in received] == [f"{i}".encode() for i in range(20)]
    assert len({r["messageId"] for r in received}) == 20 and {r["process"] for r in worker} == {1}
    node = everything(workdir, workdir / "node.log")
    assert list(workdir.glob("node-*.jsonl")) and {r["process"] for r in node} == {0}
    assert not (workdir / "node.log").exists() and not (workdir / "node.p1.log").exists()  # rotated at close
