"""Several broker processes per node (broker.processes), without processes: the configuration's
checks, the control channel's codec, the placement of targets, each worker's configuration."""
from __future__ import annotations

import pytest

from interchange.app.config import BrokerConfig
from interchange.app.worker import worker_config
from interchange.broker.addresses import TargetSpec
from interchange.broker.control import ControlCodec, ControlError, LogChange, PutTarget, Ready, Remove, Start
from interchange.broker.placement import Placement
from interchange.ground.logfile import LogSettings


def test_config_refuses_a_target_on_a_missing_process() -> None:
    with pytest.raises(ValueError, match="names process 2, but broker.processes is 2"):
        BrokerConfig(processes=2, targets=[TargetSpec(address="t", process=2)])
    assert BrokerConfig(processes=3, targets=[TargetSpec(address="t", process=2)]).processes == 3


def test_control_codec_frames_and_refuses_garbage() -> None:
    codec = ControlCodec()
    messages = [Start(index=1, processes=2, config={"name": "n"}), PutTarget(spec=TargetSpec(address="t")),
                Remove(address="t"), LogChange(settings=LogSettings(level="debug")), Ready(amqps_port=1)]
    data = b"".join(codec.encode(m) for m in messages)
    decoded = []
    for i in range(0, len(data), 7):  # arbitrary chunking
        decoded += codec.feed(data[i:i + 7])
    assert decoded == messages
    with pytest.raises(ControlError, match="invalid control message"):
        ControlCodec().feed(b'{"op": "explode"}\n')
    with pytest.raises(ControlError, match="invalid control message"):
        ControlCodec().feed(b"not json\n")
    with pytest.raises(ControlError, match="longer than 1024 bytes"):
        ControlCodec(max_line=1024).feed(b"x" * 1025)


def test_placement_explicit_hashed_and_checked() -> None:
    two = Placement(2)
    assert two.owner(TargetSpec(address="x", process=1)) == 1
    hashed = {two.owner(TargetSpec(address=f"t{i}")) for i in range(20)}
    assert hashed == {0, 1}  # a stable hash spreads targets over both
    assert [two.owner_of(f"t{i}") for i in range(20)] == [Placement(2, 1).owner_of(f"t{i}") for i in range(20)]
    assert Placement(1).owns(TargetSpec(address="x")) and Placement(1).owner_of("anything") == 0
    assert Placement(2, 1).owns(TargetSpec(address="x", process=1))
    assert not Placement(2, 0).owns(TargetSpec(address="x", process=1))
    with pytest.raises(ValueError, match="names broker process 3"):
        two.owner(TargetSpec(address="x", process=3))
    with pytest.raises(ValueError):
        Placement(2, 2)
    with pytest.raises(ValueError):
        Placement(0)


def test_worker_config_shifts_ports_and_log_and_drops_the_ii() -> None:
    config = {"name": "n", "broker": {"port": 5671, "plain_port": 0, "targets": [{"address": "t"}],
                                      "sources": [{"address": "s"}]},
              "admin": {"port": 9090}, "log": {"path": "/var/x/node.log"}, "ii": {"port": 8443}}
    derived = worker_config(config, 2)
    assert derived["broker"]["port"] == 5673 and derived["broker"]["plain_port"] == 0  # 0: any free port
    assert derived["broker"]["targets"] == [] and derived["broker"]["sources"] == []
    assert derived["admin"]["port"] == 9092 and derived["log"]["path"] == "/var/x/node.p2.log"
    assert derived["ii"] is None and config["broker"]["port"] == 5671  # the input is not changed


def test_target_processes_hash_unplaced_targets_over_the_processes_named() -> None:
    kept = Placement(3, 0, (1, 2))
    owners = {kept.owner_of(f"t{i}") for i in range(40)}
    assert owners == {1, 2}  # never 0, and both of the others
    assert [kept.owner_of(f"t{i}") for i in range(40)] == [Placement(3, 2, (1, 2)).owner_of(f"t{i}") for i in range(40)]
    assert kept.owner(TargetSpec(address="x", process=0)) == 0  # a target placed by name stays
    assert Placement(2, 0, (1,)).owner_of("anything") == 1
    assert Placement(2).owner_of("t3") == Placement(2, 0, (0, 1)).owner_of("t3")  # all named: as without
    for hosts, message in (((), "no process is named"), ((2,), "process 2 is not one of the node's"),
                           ((1, 1), "named twice")):
        with pytest.raises(ValueError, match=message):
            Placement(2, 0, hosts)


def test_config_checks_target_processes_and_workers_keep_them() -> None:
    assert BrokerConfig(processes=2, target_processes=[1]).placement(1) == Placement(2, 1, (1,))
    assert BrokerConfig(processes=2).placement() == Placement(2)
    for hosts, message in (([], "no process is named"), ([2], "process 2 is not one of the node's"),
                           ([0, 0], "named twice")):
        with pytest.raises(ValueError, match=rf"broker.target_processes \[.*\]: .*{message}"):
            BrokerConfig(processes=2, target_processes=hosts)
    derived = worker_config({"name": "n", "broker": {"processes": 2, "target_processes": [1]}}, 1)
    assert derived["broker"]["target_processes"] == [1]
