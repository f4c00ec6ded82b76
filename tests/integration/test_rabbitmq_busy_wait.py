"""The private RabbitMQ (interchange/testing/rabbitmq.py) runs with the scheduler busy waiting and
binding asked for: the running ``beam.smp`` was given those thresholds (the last of each on its
command line, as the VM applies them), busy waiting on as well as off, and its scheduler threads
are each pinned to a core of their own (``db``, RabbitMQ's default) or free to run on any (``u``)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from interchange.testing import rabbitmq


@pytest.mark.parametrize(("busy_wait", "thresholds", "bind"), [
    ("erlang-default", {"sbwt": "medium", "sbwtdcpu": "short", "sbwtdio": "short"}, "u"),
    ("none", {"sbwt": "none", "sbwtdcpu": "none", "sbwtdio": "none"}, "db"),
])
def test_the_running_node_has_the_busy_waiting_and_binding_asked_for(busy_wait: str, thresholds: dict[str, str],
                                                                      bind: str, tmp_path: Path) -> None:
    if not rabbitmq.RABBITMQ_SERVER.exists():
        pytest.fail(f"{rabbitmq.RABBITMQ_SERVER} is missing: run scripts/setup.sh (it installs rabbitmq-server)")
    with rabbitmq.RabbitMQ(tmp_path, log=lambda *_: None, busy_wait=busy_wait, scheduler_bind=bind) as broker:
        assert broker.busy_wait_in_effect() == thresholds
        assert broker.beam_pid is not None
        argv = Path(f"/proc/{broker.beam_pid}/cmdline").read_bytes().decode().split("\0")
        assert argv[argv.index("-sbwt", argv.index("-sbwt") + 1) + 1] == thresholds["sbwt"]  # ours, after the script's
        cpus = {name: set(_cpu_list(text)) for name, text in broker.scheduler_cpus().items()}
        every = os.sched_getaffinity(broker.beam_pid)
        assert len(cpus) == len(every), cpus  # one scheduler a core
        if bind == "u":
            assert all(allowed == every for allowed in cpus.values()), cpus  # each may run anywhere
        else:
            assert sorted(len(allowed) for allowed in cpus.values()) == [1] * len(every), cpus  # one core each
            assert set().union(*cpus.values()) == every, cpus  # all different

def _cpu_list(text: str) -> list[int]:
    """``0-1,3`` as ``[0, 1, 3]``."""
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        out += range(int(first), int(last or first) + 1)
    return out
