"""Several broker processes per node (broker.processes): real worker processes over TLS 1.3, address
changes reaching the other process, the II's endpoints naming the right process, restarts and clean
shutdown (placement and the control codec: tests/unit/test_broker_processes_config.py)."""
from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest
from proton import Message
from proton.utils import LinkDetached

from certs import TestPki
from interchange.app.processes import _Worker
from interchange.broker.addresses import SourceSpec, TargetSpec
from interchange.broker.control import ControlCodec, PutTarget, Remove, Start
from interchange.testing.broker_harness import (
    BrokerUnderTest,
    client_connection,
    denm,
    receive_from_every_process,
    start_broker,
    wait_for_records,
)
from interchange.testing.ii_harness import (
    A,
    Consumer,
    Https,
    denm_capability,
    denm_message,
    node_config,
    publish,
    start,
)

WAIT_S = 20.0


# ------------------------------------------------------------------------------ sans-I/O parts


async def test_a_slow_worker_gets_the_latest_version_of_each_address(tmp_path: Path) -> None:
    """While a worker is busy, later changes of an address replace its unsent one: 200 versions of a
    large target reach a worker that reads slowly as a few, the last one last; other addresses and
    the order of first changes are kept (a real pipe to a real process)."""
    out = tmp_path / "received"
    reader = ("import sys, time\nwith open(sys.argv[1], 'wb') as out:\n"
              "    while chunk := sys.stdin.buffer.read(65536):\n        out.write(chunk); time.sleep(0.01)\n")
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", reader, str(out),
                                                   stdin=asyncio.subprocess.PIPE)
    worker = _Worker(1, process)
    worker.send(Start(index=1, processes=2, config={"name": "n"}))
    big = "x" * 300_000
    for version in range(200):
        worker.send(PutTarget(spec=TargetSpec(address="t", selector=f"v = {version} OR '{big}' = 'y'")))
        if version == 10:
            worker.send(Remove(address="u"))
        await asyncio.sleep(0)
    while worker.unsent:
        await asyncio.sleep(0.05)
    await worker.stop()
    received = ControlCodec().feed(out.read_bytes())
    versions = [int(m.spec.selector.split()[2]) for m in received if isinstance(m, PutTarget)]
    assert isinstance(received[0], Start) and Remove(address="u") in received
    assert versions[-1] == 199 and versions == sorted(versions) and len(versions) < 20, versions


# ------------------------------------------------------------------------------ real processes
@pytest.fixture
def broker(pki: TestPki, tmp_path: Path):
    started = start_broker(
        pki, tmp_path,
        targets=[TargetSpec(address="in-0", publishers=frozenset({"actor-1"}), process=0),
                 TargetSpec(address="in-1", publishers=frozenset({"actor-1"}), process=1)],
        sources=[SourceSpec(address="denm", consumers=frozenset({"actor-2"}), selector="messageType = 'DENM'")],
        processes=2)
    try:
        yield started
    finally:
        started.stop()


def _send(pki: TestPki, port: int, target: str, message: Message) -> None:
    connection = client_connection(pki, "actor-1", port)
    try:
        connection.create_sender(target).send(message)
    finally:
        connection.close()


def _refused_by_0(pki: TestPki, port: int, target: str) -> None:
    """Process 0 (on ``port``) refuses a sender on ``target``, naming process 1 as the one serving it."""
    connection = client_connection(pki, "actor-1", port)
    try:
        with pytest.raises(LinkDetached, match="served by broker process 1"):
            connection.create_sender(target)
    finally:
        connection.close()


def test_each_process_serves_its_targets_and_every_source(broker: BrokerUnderTest, pki: TestPki) -> None:
    ports = broker.node.amqps_ports
    assert len(ports) == 2 and ports[0] == broker.port and ports[1] != ports[0]
    _send(pki, ports[0], "in-0", denm(body=b"from-0"))
    _send(pki, ports[1], "in-1", denm(body=b"from-1"))
    _send(pki, ports[1], "in-1", Message(body=b"ivim", properties={**denm().properties, "messageType": "IVIM"},
                                          inferred=True))  # not for the DENM source
    assert sorted(receive_from_every_process(pki, ports, "denm", 2, timeout=WAIT_S)) == [b"from-0", b"from-1"]
    _refused_by_0(pki, ports[0], "in-1")  # a target is served by one process only: the other says which
    # the worker writes its own log file
    assert (broker.log_path.parent / "node.p1.log").exists()


def test_address_changes_reach_the_other_process(broker: BrokerUnderTest, pki: TestPki) -> None:
    ports = broker.node.amqps_ports
    broker.call(lambda: broker.node.addresses.put_target(
        TargetSpec(address="late", publishers=frozenset({"actor-3"}), process=1)))
    broker.call(lambda: broker.node.addresses.put_source(
        SourceSpec(address="late-src", consumers=frozenset({"actor-2"}))))
    deadline = time.monotonic() + WAIT_S
    while True:  # the change travels to process 1 over the control channel
        try:
            connection = client_connection(pki, "actor-3", ports[1])
            connection.create_sender("late").send(denm(body=b"late"))
            connection.close()
            break
        except LinkDetached:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    assert receive_from_every_process(pki, ports, "late-src", 1, timeout=WAIT_S) == [b"late"]
    broker.call(lambda: broker.node.addresses.remove("late-src"))
    deadline = time.monotonic() + WAIT_S
    while True:
        connection = client_connection(pki, "actor-2", ports[1])
        try:
            connection.create_receiver("late-src")
        except LinkDetached as exc:
            assert "no source" in str(exc)
            break
        finally:
            connection.close()
        assert time.monotonic() < deadline, "the removal never reached process 1"
        time.sleep(0.05)


def test_workers_stop_with_the_node(pki: TestPki, tmp_path: Path) -> None:
    broker = start_broker(pki, tmp_path, processes=3)
    workers = broker.node.workers
    assert workers is not None and len(broker.node.amqps_ports) == 3
    pids = workers.pids
    assert len(pids) == 2
    broker.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_that_dies_is_restarted_on_its_port_with_the_current_addresses(
        broker: BrokerUnderTest, pki: TestPki) -> None:
    import signal

    workers = broker.node.workers
    assert workers is not None
    ports = broker.node.amqps_ports
    old_pid = workers.pids[0]
    os.kill(old_pid, signal.SIGKILL)
    # an address added while process 1 is down reaches the restarted one
    broker.call(lambda: broker.node.addresses.put_source(
        SourceSpec(address="while-down", consumers=frozenset({"actor-2"}), selector="messageType = 'DENM'")))
    deadline = time.monotonic() + WAIT_S
    while broker.call(lambda: workers.restarts) < 1:
        assert time.monotonic() < deadline, "process 1 was not restarted"
        time.sleep(0.05)
    assert workers.pids[0] != old_pid and broker.call(lambda: [r.amqps_port for r in workers.ready]) == [ports[1]]
    _send(pki, ports[1], "in-1", denm(body=b"after-restart"))
    assert receive_from_every_process(pki, ports, "while-down", 1, timeout=WAIT_S) == [b"after-restart"]
    assert receive_from_every_process(pki, ports, "denm", 1, timeout=WAIT_S) == [b"after-restart"]
    for event in ("broker_process_exited", "broker_process_restarted"):
        [record] = wait_for_records(broker, lambda r, e=event: r["event"] == e, f"no {event} logged")
        assert record["details"]["process"] == 1


def test_a_worker_that_cannot_listen_fails_the_start(pki: TestPki, tmp_path: Path) -> None:
    import socket

    for _ in range(50):  # a taken port whose predecessor is free: process 0 binds, process 1 cannot
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        taken = blocker.getsockname()[1]
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", taken - 1))
            break
        except OSError:
            blocker.close()
        finally:
            probe.close()
    try:
        with pytest.raises(Exception, match="broker process 1"):
            start_broker(pki, tmp_path, port=taken - 1, processes=2)
    finally:
        blocker.close()


async def test_the_ii_hands_out_the_owner_and_every_process(pki: TestPki, tmp_path: Path) -> None:
    config = node_config(pki, A, tmp_path / "a")
    config = config.model_copy(update={"broker": config.broker.model_copy(update={"processes": 2})})
    node = await start(config)
    actor, other = Https(pki, "actor-a", node), Https(pki, "actor-x", node)
    try:
        _, body = await actor.post("/actor-a/subscriptions", {"subscriptions": [{"selector": "messageType = 'DENM'"}]})
        endpoints = body["subscriptions"][0]["endpoints"]
        assert sorted(e["port"] for e in endpoints) == sorted(node.amqps_ports)
        assert len({e["source"] for e in endpoints}) == 1
        await other.post("/actor-x/capabilities", {"capabilities": [denm_capability(publisher="NL00001")]})
        published: list[tuple[int, str]] = []
        while {port for port, _ in published} != set(node.amqps_ports) and len(published) < 40:  # hashed: both, soon
            _, deliveries = await other.post("/actor-x/deliveries", {"deliveries": [{"selector": "messageType = 'DENM'"}]})
            endpoint = deliveries["deliveries"][0]["endpoints"][0]
            owner = node.placement.owner_of(endpoint["target"])
            assert endpoint["port"] == node.amqps_ports[owner]
            published.append((endpoint["port"], endpoint["target"]))
        assert {port for port, _ in published} == set(node.amqps_ports)
        consumers = [await asyncio.to_thread(Consumer, pki, "actor-a", e["port"], A, e["source"]) for e in endpoints]
        try:
            for i, (port, target) in enumerate(published[:2] + [p for p in published if p[0] != published[0][0]][:1]):
                await asyncio.to_thread(publish, pki, "actor-x", port, A, target,
                                        [denm_message(publisher="NL00001", body=f"m{i}".encode())])
            got = []
            for consumer in consumers:
                while (message := await asyncio.to_thread(consumer.receive, 2.0)) is not None:
                    got.append(bytes(message.body))
            assert sorted(got) == [b"m0", b"m1", b"m2"]
        finally:
            for consumer in consumers:
                await asyncio.to_thread(consumer.close)
    finally:
        await actor.close()
        await other.close()
        await node.close()


def test_target_processes_keep_every_unplaced_target_off_process_0(pki: TestPki, tmp_path: Path) -> None:
    """broker.target_processes = [1]: targets with no process of their own all live in process 1 (process 0
    refuses them and names 1); one placed in 0 by name stays there; messages flow through both."""
    unplaced = [TargetSpec(address=f"t{i}", publishers=frozenset({"actor-1"})) for i in range(8)]
    broker = start_broker(pki, tmp_path, targets=[*unplaced, TargetSpec(address="named-0", publishers=frozenset(
        {"actor-1"}), process=0)], sources=[SourceSpec(address="denm", consumers=frozenset({"actor-2"}))],
        processes=2, target_processes=[1])
    try:
        ports = broker.node.amqps_ports
        assert {broker.node.placement.owner(spec) for spec in unplaced} == {1}
        for spec in unplaced:
            _send(pki, ports[1], spec.address, denm(body=spec.address.encode()))
        _send(pki, ports[0], "named-0", denm(body=b"named-0"))
        expected = sorted([spec.address.encode() for spec in unplaced] + [b"named-0"])
        assert sorted(receive_from_every_process(pki, ports, "denm", len(expected), timeout=WAIT_S)) == expected
        _refused_by_0(pki, ports[0], "t0")
    finally:
        broker.stop()


async def test_with_target_processes_the_ii_hands_out_only_their_ports_for_deliveries(pki: TestPki,
                                                                                       tmp_path: Path) -> None:
    config = node_config(pki, A, tmp_path / "a")
    config = config.model_copy(update={"broker": config.broker.model_copy(update={"processes": 2,
                                                                                  "target_processes": [1]})})
    node = await start(config)
    other = Https(pki, "actor-x", node)
    try:
        await other.post("/actor-x/capabilities", {"capabilities": [denm_capability(publisher="NL00001")]})
        ports = set()
        for _ in range(12):  # each request a new target: hashed over process 1 alone
            _, deliveries = await other.post("/actor-x/deliveries", {"deliveries": [{"selector": "messageType = 'DENM'"}]})
            ports |= {endpoint["port"] for endpoint in deliveries["deliveries"][0]["endpoints"]}
        assert ports == {node.amqps_ports[1]}
    finally:
        await other.close()
        await node.close()
