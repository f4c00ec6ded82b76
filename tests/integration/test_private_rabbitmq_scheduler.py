"""The private RabbitMQ (interchange/testing/rabbitmq.py) runs with the scheduler busy waiting asked
for: the running ``beam.smp`` was given those thresholds (the last of each on its command line, as
the VM applies them), busy waiting on as well as off."""
from __future__ import annotations

from pathlib import Path

import pytest

from interchange.testing import rabbitmq


@pytest.mark.parametrize(("name", "thresholds"), [
    ("erlang-default", {"sbwt": "medium", "sbwtdcpu": "short", "sbwtdio": "short"}),
    ("none", {"sbwt": "none", "sbwtdcpu": "none", "sbwtdio": "none"}),
])
def test_the_running_node_has_the_busy_waiting_asked_for(name: str, thresholds: dict[str, str], tmp_path: Path) -> None:
    if not rabbitmq.RABBITMQ_SERVER.exists():
        pytest.fail(f"{rabbitmq.RABBITMQ_SERVER} is missing: run scripts/setup.sh (it installs rabbitmq-server)")
    with rabbitmq.RabbitMQ(tmp_path, log=lambda *_: None, busy_wait=name) as broker:
        assert broker.busy_wait_in_effect() == thresholds
        assert broker.beam_pid is not None
        argv = Path(f"/proc/{broker.beam_pid}/cmdline").read_bytes().decode().split("\0")
        assert argv[argv.index("-sbwt", argv.index("-sbwt") + 1) + 1] == thresholds["sbwt"]  # ours, after the script's
