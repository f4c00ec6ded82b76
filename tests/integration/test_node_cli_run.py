"""`interchange demo` (a two-interchange federation) end to end, and a node's configured addresses
surviving a restart."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from certs import TestPki
from interchange.app.cli import main
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.testing.broker_harness import complete_records, denm, start_broker


def test_configured_addresses_survive_restart(pki: TestPki, tmp_path: Path) -> None:
    targets = [TargetSpec(address="in", publishers=frozenset({"actor-1"}))]
    sources = [SourceSpec(address="out", consumers=frozenset({"actor-2"}), selector="messageType = 'DENM'")]
    for run in range(2):
        b = start_broker(pki, tmp_path / f"run{run}", targets, sources)
        try:
            publisher = b.connect("actor-1")
            publisher.create_sender("in").send(denm(body=f"run{run}".encode()))
            publisher.close()
            consumer = b.connect("actor-2")
            receiver = consumer.create_receiver("out", credit=5)
            assert bytes(receiver.receive(timeout=5).body) == f"run{run}".encode()  # nothing left from run 0
            receiver.accept()
            consumer.close()
        finally:
            b.stop()


def test_demo_federation_delivers_only_the_matching_denm(spark: SparkSession, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The main job: the federation's work, then the audit of its own logs (in the run's Spark session)."""
    assert main(["demo", "--dir", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "discovery: b.interchange.test found a.interchange.test" in out
    assert "capability exchange: b.interchange.test knows a.interchange.test's 2 capabilities" in out
    assert ("received at b.interchange.test, from a.interchange.test: DENM quadTree ,120202130121133020, : "
            "'stationary vehicle at Hazeldonk'") in out
    assert "no other message matched the selector" in out
    assert "interchange neighbours --data-dir" in out and "/openapi.json" in out
    for name in ("a.interchange.test", "b.interchange.test"):
        assert (tmp_path / "demo" / name / "node.json").is_file()
    published = complete_records(tmp_path / "demo" / "a.interchange.test" / "node.log")
    assert sum(r["event"] == "received_message" for r in published) == 3
    imported = complete_records(tmp_path / "demo" / "b.interchange.test" / "node.log")
    assert [r["address"] for r in imported if r["event"] == "received_message"] == ["federation:a.interchange.test"]
    assert any(r["event"] == "ii_federation_started" for r in imported)
    # the governance user's part: the logs audited, the report's path and the findings per severity printed
    report = tmp_path / "demo" / "audit" / "report.html"
    assert f"audit report: {report.resolve()}" in out and report.is_file()
    severities = re.search(r"audit validate: findings per severity: (\d+) error, (\d+) warning, (\d+) info", out)
    assert severities is not None, out
    ingested = re.search(r"audit ingest: (\d+) message records", out)
    assert ingested is not None and int(ingested[1]) >= 4 + 2  # 3 received and a delivery at A, 1 received at B, ...
    assert "C-Roads interchange demo: audit of its own logs" in report.read_text()
    # The neighbour list is persisted and shown by `interchange neighbours`.
    assert main(["neighbours", "--data-dir", str(tmp_path / "demo" / "b.interchange.test" / "var")]) == 0
    assert "a.interchange.test" in capsys.readouterr().out
    # A second run reuses the PKI and starts from an empty state; --no-audit leaves the audit out.
    assert main(["demo", "--dir", str(tmp_path / "demo"), "--no-audit"]) == 0
    out = capsys.readouterr().out
    assert "stationary vehicle at Hazeldonk" in out and "audit" not in out
