"""A node whose start-up fails half way leaves nothing running: one exit stack in the
node runtime; the CLI exits non-zero with one clear line. A node that starts freezes its start-up
heap in every broker process (no full collection of it stalls the loop later). Fixed ports
too close for the broker processes (process k listens on port + k) are refused when the config loads."""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from certs import TestPki
from interchange.app.cli import main
from interchange.app.config import AdminConfig, BrokerConfig, LogConfig, NodeConfig, TlsConfig, load_config
from interchange.app.node import start_node
from interchange.ground.errors import CliError
from interchange.ground.ports import free_port
from interchange.testing.broker_harness import BROKER_CN, complete_records, start_node_process, terminate


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else already listens on (the admin port of the probe)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def config(pki: TestPki, workdir: Path, admin_port: int, plain_port: int) -> NodeConfig:
    identity = pki.identity(BROKER_CN)
    return NodeConfig(
        name=BROKER_CN, data_dir=workdir,
        tls=TlsConfig(cert_chain=identity.chain, key=identity.key, trust_bundle=pki.trust_bundle, crls=list(pki.crls)),
        broker=BrokerConfig(host="127.0.0.1", port=0, plain_port=plain_port, plain_identity="dev"),
        admin=AdminConfig(host="127.0.0.1", port=admin_port),
        log=LogConfig(path=workdir / "node.log"),
    )


def _log_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "_monitor" in t.name}  # JsonLog's QueueListener


def test_failed_start_leaves_no_listener_and_no_log_thread(pki: TestPki, tmp_path: Path, taken_port: int) -> None:
    plain_port = free_port()
    threads_before = _log_threads()
    with pytest.raises(OSError):
        asyncio.run(start_node(config(pki, tmp_path, taken_port, plain_port)))
    with pytest.raises(ConnectionRefusedError):  # the AMQP listener that had started is closed again
        socket.create_connection(("127.0.0.1", plain_port), timeout=2).close()
    assert _log_threads() == threads_before


def test_cli_exits_non_zero_with_one_line(pki: TestPki, tmp_path: Path, taken_port: int,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "node.json"
    path.write_text(config(pki, tmp_path, taken_port, free_port()).model_dump_json())
    assert main(["broker", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "start-up failed" in err and str(taken_port) in err and "nothing is left running" in err
    assert "\n" not in err and "Traceback" not in err


def test_every_broker_process_freezes_its_startup_heap(pki: TestPki, tmp_path: Path) -> None:
    node = config(pki, tmp_path, 0, 0)  # any free ports: fixed ones would need port + 1 free too, for process 1
    path = tmp_path / "node.json"
    path.write_text(node.model_copy(update={"broker": node.broker.model_copy(update={"processes": 2})}).model_dump_json())
    process, _ = start_node_process(path)
    try:
        logs = [tmp_path / "node.log", tmp_path / "node.p1.log"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            frozen = [[r for r in complete_records(log) if r["event"] == "heap_frozen"] if log.exists() else []
                      for log in logs]
            if all(frozen):
                break
            time.sleep(0.05)
        assert all(frozen), f"heap_frozen records: {frozen}"
        for records in frozen:
            assert records[0]["details"]["objects"] > 10_000  # modules, config, PKI: the start-up heap
    finally:
        terminate(process)


def test_fixed_ports_too_close_for_the_broker_processes_are_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('name = "n"\n[broker]\nport = 5671\nplain_port = 5672\nprocesses = 2\n')
    with pytest.raises(CliError, match="broker.port 5671 and broker.plain_port 5672 share a port with broker.processes 2"):
        load_config(path)
    path.write_text('name = "n"\n[broker]\nport = 65535\nprocesses = 2\n')
    with pytest.raises(CliError, match="broker.port 65535 with broker.processes 2 needs ports up to 65536"):
        load_config(path)
    path.write_text('name = "n"\n[broker]\nhost = "0.0.0.0"\nport = 9000\nprocesses = 3\n'
                    '[admin]\nport = 9002\n')
    with pytest.raises(CliError, match="broker.port 9000 and admin.port 9002"):
        load_config(path)
    path.write_text('name = "n"\n[broker]\nport = 8442\nprocesses = 3\n[ii]\nport = 8443\n')
    with pytest.raises(CliError, match="broker.port 8442 and ii.port 8443 share a port"):  # process 1's port
        load_config(path)
    path.write_text('name = "n"\n[broker]\nport = 9000\nplain_port = 9002\nprocesses = 2\n[admin]\nport = 0\n'
                    '[ii]\nport = 8999\n')
    assert load_config(path).broker.processes == 2  # 9000-9001, 9002-9003, any free, 8999: apart
