"""`interchange tlex-sim` and `tlex-demo`: start, write the bridge facts, stream, stop."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from interchange.app.cli import main

ANY_PORTS = ["--api-port", "0", "--tls-port", "0", "--plain-port", "0"]  # the defaults are fixed: tests run side by side


def test_tlex_sim_runs_and_writes_facts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tlex-sim", "--dir", str(tmp_path), *ANY_PORTS, "--controllers", "2", "--spatem-hz", "20",
                 "--duration", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "tlex-sim: REST https://127.0.0.1:" in out and "2 controllers" in out
    sent = int(out.split("controllers sent ")[1].split()[0])
    assert sent >= 2 * 20  # MAPEM + SPATEM of two controllers for over a second
    facts = json.loads((tmp_path / "sim.json").read_text())
    assert [c["tlc_id"] for c in facts["controllers"]] == ["NLSM0001", "NLSM0002"]
    assert Path(facts["trust_bundle"]).is_file() and facts["server_name"] == "tlex-sim.test"
    assert main(["tlex-sim", "--dir", str(tmp_path), *ANY_PORTS, "--controllers", "0", "--duration", "0.2"]) == 0  # PKI reused
    assert json.loads((tmp_path / "sim.json").read_text())["broker_authorization"] == facts["broker_authorization"]
    capsys.readouterr()
    assert main(["tlex-sim", "--dir", str(tmp_path), *ANY_PORTS, "--controllers", "500", "--virtual", "--spatem-hz",
                 "10", "--duration", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "500 controllers (played by the service)" in out
    assert "MAPEM 500, SPATEM " in out and int(out.split("SPATEM ")[1].split(")")[0]) >= 500 * 5
    assert len(json.loads((tmp_path / "sim.json").read_text())["controllers"]) == 500


def test_tlex_sim_aligned_phase(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tlex-sim", "--dir", str(tmp_path), *ANY_PORTS, "--controllers", "2", "--spatem-hz", "20",
                 "--phase", "aligned", "--duration", "1.0"]) == 0
    assert int(capsys.readouterr().out.split("controllers sent ")[1].split()[0]) >= 2 * 10
    with pytest.raises(SystemExit):
        main(["tlex-sim", "--dir", str(tmp_path), "--phase", "random"])
    assert "invalid choice: 'random'" in capsys.readouterr().err


def test_tlex_demo_delivers_a_spatem_at_the_neighbour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tlex-demo", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "http://" not in out  # without --serve nothing is left running: no address to print
    line = next(line for line in out.splitlines() if "actor-2 received at b.interchange.test a SPATEM" in line)
    assert "publicationId='NL00001:NLSM0001-SPATEM'" in line and "quadTree=',120202130121133020,12020213012113,'" in line
    assert "id=',5-100,'" in line and "(ttl 1 s)" in line
