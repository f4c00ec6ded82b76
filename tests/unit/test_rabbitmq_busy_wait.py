"""The private RabbitMQ's scheduler busy waiting (interchange/testing/rabbitmq.py): the thresholds
chosen reach the Erlang VM's command line after the start-up script's own (the VM applies the last
of each), and what a ``beam.smp`` command line gives is read back as the VM applies it."""
from __future__ import annotations

from pathlib import Path

import pytest

from interchange.testing import rabbitmq

#: a 3.10.8 node's beam.smp command line (its start-up script's flags first, ours after them)
BEAM_ARGV = ("/usr/lib/erlang/erts-13.1.5/bin/beam.smp -W w -P 1048576 -stbt db -zdbbl 128000 -sbwt none "
             "-sbwtdcpu none -sbwtdio none -sbwt medium -sbwtdcpu short -sbwtdio short -B i -- -root /usr/lib/erlang "
             "-progname erl -- -home /tmp/x -- -noshell -s rabbit boot -kernel inet_dist_use_interface {127,0,0,1}")
SCRIPT_DEFAULTS = ["-sbwt", "none", "-sbwtdcpu", "none", "-sbwtdio", "none"]  # rabbitmq-env's, before ours


def test_the_last_of_each_flag_before_the_emulator_arguments_end_is_the_one_in_effect() -> None:
    assert rabbitmq.busy_wait_of(BEAM_ARGV.split()) == {"sbwt": "medium", "sbwtdcpu": "short", "sbwtdio": "short"}
    assert rabbitmq.busy_wait_of(["beam.smp", "-sbwt", "none", "--", "-sbwt", "long"]) == {"sbwt": "none"}
    assert rabbitmq.busy_wait_of(["beam.smp", "-S", "2:2", "--"]) == {}


@pytest.mark.parametrize("name", sorted(rabbitmq.BUSY_WAIT))
def test_the_chosen_thresholds_follow_the_start_up_scripts_own(name: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rabbitmq, "free_port", iter(range(20001, 20004)).__next__)  # (no socket)
    broker = rabbitmq.RabbitMQ(tmp_path, busy_wait=name)
    extra = broker._env(tmp_path / "rabbitmq.conf")["RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"].split()
    # erlexec hands each +flag to the VM as -flag, after the script's RABBITMQ_SERVER_ERL_ARGS
    argv = ["beam.smp", *SCRIPT_DEFAULTS, *(f"-{arg[1:]}" if arg.startswith("+") else arg for arg in extra)]
    assert rabbitmq.busy_wait_of(argv) == rabbitmq.BUSY_WAIT[name]
    assert extra[-3:] == ["-kernel", "inet_dist_use_interface", "{127,0,0,1}"]  # (still on loopback)


def test_busy_waiting_on_is_the_vms_own_thresholds_and_off_is_none_for_each_scheduler_kind() -> None:
    assert rabbitmq.BUSY_WAIT["erlang-default"] == {"sbwt": "medium", "sbwtdcpu": "short", "sbwtdio": "short"}
    assert rabbitmq.BUSY_WAIT["none"] == dict.fromkeys(("sbwt", "sbwtdcpu", "sbwtdio"), "none")


def test_an_unknown_threshold_name_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="busy_wait must be one of none, erlang-default, not 'short'"):
        rabbitmq.RabbitMQ(tmp_path, busy_wait="short")
