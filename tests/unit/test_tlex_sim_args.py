"""`interchange tlex-sim` without sockets: bad arguments are CLI errors; the controllers' phases
(staggered or aligned) and their first tick on the grid; the [tlex] block --print-node-config gives."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from certs import TestPki
from interchange.app.cli import main
from interchange.bridges.tlex.config import TlexBridgeConfig
from interchange.bridges.tlex.controllers import controller_phase, first_tick
from interchange.bridges.tlex.sim_cli import tlc_id


def test_controller_phases_staggered_or_aligned() -> None:
    period = 0.1
    staggered = [controller_phase(tlc_id(i), period) for i in range(100)]
    assert all(0.0 <= phase < period for phase in staggered)
    assert staggered == [controller_phase(tlc_id(i), period, "staggered") for i in range(100)]  # same every run
    per_10_ms = [sum(int(phase * 100) == slot for phase in staggered) for slot in range(10)]
    assert min(per_10_ms) >= 3 and max(per_10_ms) <= 20  # spread over the period, not one burst
    assert {controller_phase(tlc_id(i), period, "aligned") for i in range(100)} == {0.0}
    with pytest.raises(ValueError, match="phasing must be one of staggered, aligned"):
        controller_phase("NLSM0001", period, "random")


def test_first_tick_is_on_the_controllers_grid() -> None:
    assert first_tick(10.0, 0.1, 0.0) == pytest.approx(10.0)
    assert first_tick(10.01, 0.1, 0.0) == pytest.approx(10.1)
    assert first_tick(10.01, 0.1, 0.03) == pytest.approx(10.03)
    assert first_tick(10.05, 0.1, 0.03) == pytest.approx(10.13)


def test_tlex_sim_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tlex-sim", "--dir", str(tmp_path), "--controllers", "-1"]) == 2
    assert "--controllers must be between 0 and 10000" in capsys.readouterr().err
    assert main(["tlex-sim", "--dir", str(tmp_path), "--api-port", "0", "--print-node-config"]) == 2
    assert "--print-node-config needs a fixed --api-port" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tlex-sim", "--dir", str(tmp_path), "--payload-types", "SPATEM=0xF1"])
    assert "0xF0-0xFF are reserved for the protocol" in capsys.readouterr().err


def test_print_node_config_gives_the_same_tlex_block_at_every_start(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    pki: TestPki) -> None:
    """What a new user pastes into a node's config: a [tlex] block the node reads as it is, with the
    fixed REST port, the Broker token kept in the directory (or --token), an absolute trust bundle
    and a position for each controller; the same block at every call."""
    actor = pki.identity("tlex-bridge").directory
    args = ["tlex-sim", "--dir", str(tmp_path / "sim"), "--controllers", "3", "--print-node-config", "--actor", str(actor)]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0 and capsys.readouterr().out == first
    block = tomllib.loads(first)["tlex"]
    config = TlexBridgeConfig.model_validate(block)
    kept = json.loads((tmp_path / "sim" / "tokens.json").read_text())
    assert config.api_url == "https://127.0.0.1:8640/api/v1" and config.authorization == kept["broker"]
    assert config.trust_bundle is not None and config.trust_bundle.is_absolute() and config.trust_bundle.is_file()
    assert config.actor == actor and [c.tlc_id for c in config.controllers] == ["NLSM0001", "NLSM0002", "NLSM0003"]
    assert len({(c.latitude, c.longitude) for c in config.controllers}) == 3
    assert "# [[ii.actors.rules]]" in first and 'subscribe_message_types = ["SREM"]' in first
    assert main(["tlex-sim", "--dir", str(tmp_path / "sim"), "--print-node-config", "--token", "chosen",
                 "--payload-types", "SPATEM=1,MAPEM=2,SREM=3,SSEM=4"]) == 0
    other = tomllib.loads(capsys.readouterr().out)["tlex"]
    assert other["authorization"] == "chosen" and other["payload_types"] == {"SPATEM": 1, "MAPEM": 2, "SREM": 3, "SSEM": 4}
    assert other["actor"] == "pki/issued/tlex-bridge"  # to edit: the comment says so
    assert json.loads((tmp_path / "sim" / "tokens.json").read_text())["broker"] == "chosen"  # kept for the next start
