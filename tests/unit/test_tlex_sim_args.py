"""`interchange tlex-sim` without sockets: bad arguments are CLI errors; the controllers' phases
(staggered or aligned) and their first tick on the grid."""
from __future__ import annotations

from pathlib import Path

import pytest

from interchange.app.cli import main
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
