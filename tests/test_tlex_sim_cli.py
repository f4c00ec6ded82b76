"""`interchange tlex-sim`: starts, writes the bridge facts, streams, stops; bad arguments are CLI errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from interchange.cli import main


def test_tlex_sim_runs_and_writes_facts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tlex-sim", "--dir", str(tmp_path), "--controllers", "2", "--spatem-hz", "20", "--duration", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "tlex-sim: REST https://127.0.0.1:" in out and "2 controllers" in out
    sent = int(out.split("controllers sent ")[1].split()[0])
    assert sent >= 2 * 20  # MAPEM + SPATEM of two controllers for over a second
    facts = json.loads((tmp_path / "sim.json").read_text())
    assert [c["tlc_id"] for c in facts["controllers"]] == ["NLSM0001", "NLSM0002"]
    assert Path(facts["trust_bundle"]).is_file() and facts["server_name"] == "tlex-sim.test"
    assert main(["tlex-sim", "--dir", str(tmp_path), "--controllers", "0", "--duration", "0.2"]) == 0  # PKI reused


def test_tlex_sim_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tlex-sim", "--dir", str(tmp_path), "--controllers", "-1"]) == 2
    assert "--controllers must be between 0 and 10000" in capsys.readouterr().err


def test_tlex_demo_delivers_a_spatem_at_the_neighbour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tlex-demo", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if "actor-2 received at b.interchange.test a SPATEM" in line)
    assert "publicationId='NL00001:NLSM0001-SPATEM'" in line and "quadTree=',120202130121133020,'" in line
    assert "id=',5-100,'" in line and "(ttl 1 s)" in line
