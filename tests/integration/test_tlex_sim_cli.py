"""`interchange tlex-sim` and `tlex-demo`: start, write the bridge facts, stream, stop."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from interchange.app.cli import main
from interchange.bridges.tlex.codec import Payload
from interchange.bridges.tlex.controllers import ControllerSpec, VirtualControllers, controller_phase
from interchange.bridges.tlex.payloads import MESSAGE_IDS, kind_of
from interchange.bridges.tlex.sim_cli import tlc_id

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


async def test_virtual_controllers_send_mapem_first_then_spatem_on_their_phases() -> None:
    """The controllers the service plays (no network here): each sends its MAPEMs before its first
    SPATEM and then a SPATEM per period, on its own phase; an SREM is answered with an SSEM per
    intersection of its controller only."""
    specs = [ControllerSpec(tlc_id(i), [f"5-{2 * i}", f"5-{2 * i + 1}"], i) for i in range(300)]
    played = VirtualControllers(specs, spatem_hz=10, mapem_interval=60)
    sent: list[tuple[float, Payload]] = []
    loop = asyncio.get_running_loop()
    played.start(lambda payload: sent.append((loop.time(), payload)))
    await asyncio.sleep(1.05)
    await played.stop()
    by_tlc: dict[str | None, list[str]] = {}
    for _, payload in sent:
        by_tlc.setdefault(payload.tlc, []).append(kind_of(payload.payload_type))
    assert set(by_tlc) == {s.tlc_id for s in specs}
    assert all(kinds[:2] == ["MAPEM", "MAPEM"] and kinds.count("MAPEM") == 2 for kinds in by_tlc.values())
    assert all(16 <= kinds.count("SPATEM") <= 22 for kinds in by_tlc.values())  # 10 Hz x 2 intersections, ~1 s
    # spread over the 100 ms period, not one burst: the controllers' phases (the schedule) fill every
    # 10 ms slot evenly, and the SPATEMs were sent in nearly every slot (a loaded loop sends late ones
    # together, so the sent times' counts per slot are not compared with each other)
    planned = [sum(int(controller_phase(s.tlc_id, 0.1) * 100) == slot for s in specs) for slot in range(10)]
    assert min(planned) > 0.3 * max(planned)
    slots = [sum(int((t % 0.1) * 100) == slot for t, p in sent if kind_of(p.payload_type) == "SPATEM")
             for slot in range(10)]
    assert sum(count > 0 for count in slots) >= 8, slots
    played.received(Payload(MESSAGE_IDS["SREM"], 1, b"srem", tlc_id(7)))
    assert [(p.tlc, kind_of(p.payload_type)) for _, p in sent[-2:]] == [(tlc_id(7), "SSEM")] * 2
    assert list(played.from_broker) == [tlc_id(7)]


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
