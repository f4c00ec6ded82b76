"""Handshake steps on the HandshakeQueue's worker thread (interchange.broker.handshake_queue), for the
BI (interchange.broker.server.AmqpConnection) and the II (ii_api.http.tls_site.TlsServerProtocol):
the step runs off the loop's thread at the priority asked for, input that arrives meanwhile waits
for it, a deadline or a close while it is out drops its outcome (nothing written, each record logged
once), and no more than ``in_flight`` steps are out at once. Real TLS in memory (no sockets); a step
is held on the worker by a gate (fault injection: a slow handshake) so that each race happens on
purpose."""
from __future__ import annotations

import asyncio
import os
import ssl
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from certs import TestPki
from certs.tls import client_context, server_context
from ii_api.http import tls_site as tls_site_module
from ii_api.http.tls_site import TlsServerProtocol
from interchange.broker.addresses import AddressBook
from interchange.broker.admission import Admission
from interchange.broker.handshake_queue import IN_FLIGHT, HandshakeQueue, HandshakeThread
from interchange.broker.router import BrokerCore
from interchange.broker import server as server_module
from interchange.broker.server import AmqpConnection, BrokerServer
from interchange.broker.tls_stream import HANDSHAKE_TIMEOUT, TlsSession
from interchange.broker.ttl_policy import TtlPolicy
from interchange.testing.pki_fixtures import ACTOR, SERVER, files_for
from interchange.testing.memory_transport import MemoryTlsClient, MemoryTransport


SASL_HEADER = b"AMQP\x03\x01\x00\x00"


class Gate:
    """Holds a session's steps (their OpenSSL call) on the worker until opened; records the threads
    they ran on."""

    def __init__(self, session: TlsSession, hold_after: bool = False) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        self.threads: list[int] = []
        handshake = session.handshake

        def held() -> ssl.SSLError | None:
            self.threads.append(threading.get_ident())
            if hold_after:  # the call done, its outcome not yet back on the loop
                outcome = handshake()
            self.entered.set()
            assert self.open.wait(5), "the gate was never opened"
            return outcome if hold_after else handshake()

        session.handshake = held  # type: ignore[method-assign]


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("condition not reached in 4 s")


def core() -> BrokerCore:
    return BrokerCore(AddressBook(), Admission(TtlPolicy(), accelerated=False))


class BiConnection:
    def __init__(self, pki: TestPki, server: BrokerServer) -> None:
        self.raw = MemoryTransport(strict=True)
        self.protocol = AmqpConnection(server, None, server_context(files_for(pki, SERVER)))
        self.client = MemoryTlsClient(client_context(files_for(pki, ACTOR)), SERVER)
        self.protocol.connection_made(self.raw)
        assert self.protocol._tls is not None
        self.session = self.protocol._tls

    async def hello(self) -> None:
        """ClientHello in, ServerHello ... Finished back to the client."""
        self.protocol.data_received(self.client.step())
        await until(lambda: bool(self.raw.out))
        self.flight = self.client.step(self.raw.take())  # client certificate, Finished

    async def last_step_held(self) -> "Gate":
        """Hello, then the client's last flight in, its step held out on the worker by the gate returned."""
        await self.hello()
        gate = Gate(self.session)
        self.protocol.data_received(self.flight)
        await asyncio.to_thread(gate.entered.wait, 5)
        return gate


def late_clock(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list[float]:
    """``module``'s deadline clock (its ``_now``) ahead of the loop's by ``late[0]`` seconds, set by the test."""
    late = [0.0]
    real = asyncio.get_running_loop().time
    monkeypatch.setattr(module, "_now", lambda: real() + late[0])
    return late


def held_queue(in_flight: int = IN_FLIGHT) -> HandshakeQueue:
    """A queue whose worker runs at the loop's priority and is never rescued: these tests hold its steps
    on purpose, and a busy host must neither starve a SCHED_IDLE worker past the tests' waits nor make
    the loop step the waiting connections itself (the scheduling and the rescue have tests of their own)."""
    return HandshakeQueue(thread="normal", in_flight=in_flight, starved_s=60.0)


def bi_server() -> tuple[BrokerServer, list[tuple[str, dict]]]:
    events: list[tuple[str, dict]] = []
    server = BrokerServer(core(), event=lambda level, kind, fields: events.append((kind, fields)))
    server.handshakes = held_queue()
    return server, events


def test_a_bi_handshake_runs_on_the_worker_and_input_waits_for_its_step(pki_main: TestPki) -> None:
    async def main() -> None:
        server, events = bi_server()
        connection = BiConnection(pki_main, server)
        gate = Gate(connection.session)
        hello = connection.client.step()
        connection.protocol.data_received(hello[:10])
        await asyncio.to_thread(gate.entered.wait, 5)  # the first part is out on the worker
        connection.protocol.data_received(hello[10:])  # the rest waits: the session is the worker's
        assert server.handshakes.out == 1 and len(server.handshakes) == 0 and len(gate.threads) == 1
        gate.open.set()
        await until(lambda: bool(connection.raw.out))  # the rest stepped after the first came back
        assert len(gate.threads) == 2 and threading.get_ident() not in gate.threads
        connection.protocol.data_received(connection.client.step(connection.raw.take()))
        await until(lambda: connection.protocol in server.connections)
        assert [kind for kind, _ in events] == ["connect"] and connection.protocol.identity == ACTOR
        assert connection.client.obj.version() == "TLSv1.3" and not connection.raw.closed
        server.handshakes.close()

    asyncio.run(main())


def test_only_the_openssl_call_runs_on_the_worker_the_rest_of_a_step_on_the_loop(pki_main: TestPki) -> None:
    """The worker holds the GIL as little as there can be (at its low priority the kernel may stop it
    while it does, and the loop's thread then waits): the input is fed to the session and the step's
    outcome (the flight, the established session) made on the loop's thread; the worker runs the
    OpenSSL call alone."""
    async def main() -> None:
        server, events = bi_server()
        connection = BiConnection(pki_main, server)
        threads: dict[str, set[int]] = {"feed": set(), "handshake": set(), "handshook": set()}
        for name in threads:
            part = getattr(connection.session, name)

            def recorded(*args: Any, part: Callable[..., Any] = part, name: str = name) -> Any:
                threads[name].add(threading.get_ident())
                return part(*args)

            setattr(connection.session, name, recorded)
        await connection.hello()
        connection.protocol.data_received(connection.flight)
        await until(lambda: connection.protocol in server.connections)
        loop = threading.get_ident()
        assert threads["feed"] == threads["handshook"] == {loop}
        assert len(threads["handshake"]) == 1 and loop not in threads["handshake"]
        assert [kind for kind, _ in events] == ["connect"]
        server.handshakes.close()

    asyncio.run(main())


def test_bi_input_after_the_finishing_flight_waits_for_its_outcome(pki_main: TestPki) -> None:
    """The client's first AMQP bytes come while the step that establishes the session is still out
    (done on the worker, not yet back): they wait, and reach SASL once the outcome is applied."""
    async def main() -> None:
        server, events = bi_server()
        connection = BiConnection(pki_main, server)
        await connection.hello()
        gate = Gate(connection.session, hold_after=True)
        connection.protocol.data_received(connection.flight)
        await asyncio.to_thread(gate.entered.wait, 5)
        connection.client.obj.write(SASL_HEADER)
        connection.protocol.data_received(connection.client.outgoing.read())
        gate.open.set()
        await until(lambda: connection.protocol in server.connections and bool(connection.raw.out))
        await asyncio.sleep(0.01)
        connection.client.incoming.write(connection.raw.take())
        assert connection.client.obj.read(4096).startswith(SASL_HEADER)  # the SASL server answered
        assert [kind for kind, _ in events] == ["connect"]
        server.handshakes.close()

    asyncio.run(main())


def test_the_bi_protocol_header_deadline_runs_from_the_last_flight_not_from_its_turn(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's last flight arrives at t; its step's outcome is applied 3 s later (a flood of
    handshakes ahead of it, a busy loop): the protocol header's deadline is t + header_s, as the
    client, which sent the flight at t, counts it."""
    async def main() -> None:
        late = late_clock(monkeypatch, server_module)
        server, _ = bi_server()
        connection = BiConnection(pki_main, server)
        await connection.hello()
        gate = Gate(connection.session, hold_after=True)
        arrived = server_module._now()
        connection.protocol.data_received(connection.flight)
        await asyncio.to_thread(gate.entered.wait, 5)
        late[0] = 3.0  # the outcome comes back 3 s after the flight
        gate.open.set()
        await until(lambda: connection.protocol in server.connections)
        sasl = connection.protocol._sasl
        assert sasl is not None and sasl.deadline is not None
        header_s = server.limits.stage_timeouts.header_s
        assert sasl.deadline.at == pytest.approx(arrived + header_s, abs=0.5)
        server.handshakes.close()

    asyncio.run(main())


@pytest.mark.parametrize("with_finished", [True, False])
def test_the_bi_sasl_exchange_deadline_runs_from_the_sasl_header_arrival_not_from_its_turn(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch, with_finished: bool) -> None:
    """The client's SASL header arrives at t, with its Finished or while the Finished's step is out; the
    step's outcome is applied 3 s later: the SASL exchange's deadline is t + sasl_s, not the turn's + sasl_s."""
    async def main() -> None:
        late = late_clock(monkeypatch, server_module)
        server, _ = bi_server()
        connection = BiConnection(pki_main, server)
        await connection.hello()
        gate = Gate(connection.session, hold_after=True)
        connection.client.obj.write(SASL_HEADER)
        header = connection.client.outgoing.read()
        arrived = server_module._now()
        if with_finished:
            connection.protocol.data_received(connection.flight + header)
            await asyncio.to_thread(gate.entered.wait, 5)
        else:
            connection.protocol.data_received(connection.flight)
            await asyncio.to_thread(gate.entered.wait, 5)
            arrived = server_module._now()
            connection.protocol.data_received(header)
        late[0] = 3.0  # the outcome comes back 3 s after the header
        gate.open.set()
        await until(lambda: connection.protocol in server.connections and bool(connection.raw.out))
        await asyncio.sleep(0.01)
        sasl = connection.protocol._sasl
        assert sasl is not None and sasl.deadline is not None
        assert sasl.deadline.stage == "SASL exchange (sasl-init)"
        sasl_s = server.limits.stage_timeouts.sasl_s
        assert sasl.deadline.at == pytest.approx(arrived + sasl_s, abs=0.5)
        server.handshakes.close()

    asyncio.run(main())


def test_a_bi_flight_that_came_after_the_deadline_is_refused_and_its_outcome_dropped(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's last flight arrives after the handshake's deadline (in the loop turn whose timer is
    due): its step is out when the timer runs; refused then, the step's outcome never written."""
    async def main() -> None:
        late = late_clock(monkeypatch, server_module)
        server, events = bi_server()
        connection = BiConnection(pki_main, server)
        await connection.hello()
        gate = Gate(connection.session)
        late[0] = server.limits.handshake_timeout_s + 1.0
        connection.protocol.data_received(connection.flight)
        await asyncio.to_thread(gate.entered.wait, 5)
        connection.protocol._deadline_passed()  # as its timer does when the handshake deadline passes
        assert connection.raw.closed
        connection.protocol.connection_lost(None)  # the aborted socket's, while the step is out
        gate.open.set()
        await until(lambda: server.handshakes.out == 0)
        await asyncio.sleep(0.01)
        assert connection.raw.out == b""  # the established handshake's outcome was not applied
        assert events == [("tls_refused", {"peer": "127.0.0.1:40000", "reason": HANDSHAKE_TIMEOUT})]
        assert not server.connections
        server.handshakes.close()

    asyncio.run(main())


def test_a_bi_flight_that_came_in_time_is_judged_by_its_step_when_the_deadline_passes_meanwhile(
        pki_main: TestPki) -> None:
    """The last flight came before the deadline; its step is still out (a slow worker) when the timer
    runs: the node is late, not the client, so the step's outcome decides: established, connected."""
    async def main() -> None:
        server, events = bi_server()
        connection = BiConnection(pki_main, server)
        gate = await connection.last_step_held()
        connection.protocol._deadline_passed()  # as its timer does when the handshake deadline passes
        assert not connection.raw.closed and events == []
        gate.open.set()
        await until(lambda: connection.protocol in server.connections)
        assert [kind for kind, _ in events] == ["connect"] and not connection.raw.closed
        server.handshakes.close()

    asyncio.run(main())


def test_the_bi_handshake_deadline_counts_the_clients_time_not_the_nodes(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    """Part of a ClientHello arrives at t; its step is held on the worker (a starved worker) until
    t + T + 1: the timer that ran meanwhile waits for the step; once it is back the deadline has moved
    by the node's T + 1 s, so the client keeps its own T; when that has passed too, with nothing more
    from it, it is refused, and nothing of the step was written."""
    async def main() -> None:
        late = late_clock(monkeypatch, server_module)
        server, events = bi_server()
        connection = BiConnection(pki_main, server)
        handshake_s = server.limits.handshake_timeout_s
        gate = Gate(connection.session)
        arrived = server_module._now()
        connection.protocol.data_received(connection.client.step()[:10])
        await asyncio.to_thread(gate.entered.wait, 5)
        late[0] = handshake_s + 1.0
        connection.protocol._deadline_passed()  # as its timer does
        assert not connection.raw.closed and events == []
        gate.open.set()
        await until(lambda: server.handshakes.out == 0)
        await asyncio.sleep(0.01)
        deadline = connection.session.deadline
        assert deadline is not None and deadline.at == pytest.approx(arrived + 2 * handshake_s + 1.0, abs=0.5)
        connection.protocol._deadline_passed()  # before the moved deadline: nothing happens
        assert not connection.raw.closed and events == []
        late[0] = 2 * handshake_s + 2.0
        connection.protocol._deadline_passed()
        assert connection.raw.closed and connection.raw.out == b""
        assert events == [("tls_refused", {"peer": "127.0.0.1:40000", "reason": HANDSHAKE_TIMEOUT})]
        server.handshakes.close()

    asyncio.run(main())


def test_a_bi_peer_gone_while_its_last_step_is_out_is_heard_out_once_in_order(pki_main: TestPki) -> None:
    async def main() -> None:
        server, events = bi_server()
        connection = BiConnection(pki_main, server)
        gate = await connection.last_step_held()
        connection.raw.closed = True
        connection.protocol.connection_lost(None)  # the peer sent its flight and went
        assert events == []  # not yet: the step is still out
        gate.open.set()
        await until(lambda: len(events) == 2)
        await asyncio.sleep(0.01)
        assert [kind for kind, _ in events] == ["connect", "disconnect"]
        assert events[0][1]["identity"] == ACTOR and not server.connections and connection.raw.out == b""
        server.handshakes.close()

    asyncio.run(main())


def test_a_failing_step_drops_its_connection_and_the_queue_goes_on(pki_main: TestPki) -> None:
    async def main() -> None:
        server, events = bi_server()
        broken, healthy = BiConnection(pki_main, server), BiConnection(pki_main, server)

        def fails() -> ssl.SSLError | None:
            raise ValueError("a defect")

        broken.session.handshake = fails  # type: ignore[method-assign]
        broken.protocol.data_received(broken.client.step())
        await healthy.hello()
        await until(lambda: broken.raw.closed)
        healthy.protocol.data_received(healthy.flight)
        await until(lambda: healthy.protocol in server.connections)
        assert [kind for kind, _ in events] == ["connect"]
        server.handshakes.close()

    asyncio.run(main())


def test_no_more_than_in_flight_steps_are_out_and_the_rest_wait_in_order(pki_main: TestPki) -> None:
    async def main() -> None:
        server, _ = bi_server()
        # The bound alone: no rescue by the loop (a busy host may keep the worker from its first step
        # longer than STARVED_S, and the loop would then step the waiting ones itself, as it should).
        server.handshakes = held_queue(in_flight=2)
        arriving = [BiConnection(pki_main, server) for _ in range(5)]
        gates = [Gate(c.session) for c in arriving]
        for connection in arriving:
            connection.protocol.data_received(connection.client.step())
        await asyncio.to_thread(gates[0].entered.wait, 5)
        assert server.handshakes.out == 2 and len(server.handshakes) == 3
        assert not any(g.entered.is_set() for g in gates[1:])  # one worker: the second waits its turn
        for gate in gates:
            gate.open.set()
        await until(lambda: all(c.raw.out for c in arriving))
        assert server.handshakes.out == 0 and server.handshakes.stepped == 5
        assert server.handshakes.rescued_turns == 0
        server.handshakes.close()

    asyncio.run(main())


class IiConnection:
    def __init__(self, pki: TestPki, queue: HandshakeQueue, events: list[tuple[str, dict]]) -> None:
        self.raw, self.made = MemoryTransport(strict=True), False
        self.protocol = TlsServerProtocol(self._inner, server_context(files_for(pki, SERVER)),
                                          lambda level, kind, fields: events.append((kind, fields)),
                                          None, (10.0, 10.0, 10.0), queue)
        self.client = MemoryTlsClient(client_context(files_for(pki, ACTOR)), SERVER)
        self.protocol.connection_made(self.raw)
        assert self.protocol._session is not None
        self.session = self.protocol._session

    def _inner(self) -> asyncio.Protocol:
        self.made = True
        return Inner()


class Inner(asyncio.Protocol):
    """Stands for aiohttp's request handler: what reached it in plaintext."""

    received = b""

    def data_received(self, data: bytes) -> None:
        Inner.received += data


def test_ii_a_request_during_the_finishing_step_waits_for_its_outcome(pki_main: TestPki) -> None:
    async def main() -> None:
        queue, events = held_queue(), []
        connection = IiConnection(pki_main, queue, events)
        connection.protocol.data_received(connection.client.step())
        await until(lambda: bool(connection.raw.out))
        gate = Gate(connection.session, hold_after=True)
        connection.protocol.data_received(connection.client.step(connection.raw.take()))
        await asyncio.to_thread(gate.entered.wait, 5)
        Inner.received = b""
        connection.client.obj.write(b"GET / HTTP/1.1\r\n\r\n")
        connection.protocol.data_received(connection.client.outgoing.read())
        gate.open.set()
        await until(lambda: Inner.received == b"GET / HTTP/1.1\r\n\r\n")
        assert connection.made and events == [] and not connection.raw.closed
        queue.close()

    asyncio.run(main())


def test_ii_a_late_flight_or_a_close_while_the_step_is_out_drops_its_outcome(
        pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three connections' last flights, one worker: the first came after its handshake's deadline and its
    timer runs while its step is out (refused, outcome dropped); the second's peer goes while its step is
    out (dropped, nothing logged); the third came in time and its timer also ran meanwhile (established)."""
    async def main() -> None:
        late = late_clock(monkeypatch, tls_site_module)
        queue, events = held_queue(in_flight=3), []
        timed_out, gone, healthy = (IiConnection(pki_main, queue, events) for _ in range(3))
        for connection in (timed_out, gone, healthy):
            connection.protocol.data_received(connection.client.step())
        await until(lambda: all(c.raw.out for c in (timed_out, gone, healthy)))
        gates = [Gate(timed_out.session), Gate(gone.session)]
        late[0] = 11.0  # after the 10 s handshake deadline
        timed_out.protocol.data_received(timed_out.client.step(timed_out.raw.take()))
        late[0] = 0.0
        for connection in (gone, healthy):
            connection.protocol.data_received(connection.client.step(connection.raw.take()))
        await asyncio.to_thread(gates[0].entered.wait, 5)  # one worker: the others wait behind it
        timed_out.protocol._deadline_passed()  # as its timer does
        healthy.protocol._deadline_passed()  # a busy loop ran its timer late: its flight came in time
        gates[0].open.set()
        await asyncio.to_thread(gates[1].entered.wait, 5)
        gone.raw.closed = True
        gone.protocol.connection_lost(None)
        gates[1].open.set()
        await until(lambda: healthy.made and queue.out == 0)
        await asyncio.sleep(0.01)
        assert not timed_out.made and not gone.made and timed_out.raw.out == gone.raw.out == b""
        assert events == [("tls_refused", {"interface": "ii", "peer": "127.0.0.1:40000",
                                           "reason": HANDSHAKE_TIMEOUT})]
        queue.close()

    asyncio.run(main())


def scheduling() -> tuple[int, int]:
    """The calling thread's scheduling policy and nice value."""
    return os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class Probe:
    """A connection whose step reports the scheduling of the thread it runs on."""

    def __init__(self) -> None:
        self.outcome: Any = None

    def handshake_work(self) -> Callable[[], tuple[int, int, int]]:
        return lambda: (threading.get_ident(), *scheduling())

    def handshake_done(self, outcome: Any) -> None:
        self.outcome = outcome


@pytest.mark.parametrize(("thread", "policy", "nice"), [("idle", os.SCHED_IDLE, None), ("nice", os.SCHED_OTHER, 19),
                                                        ("normal", os.SCHED_OTHER, None)])
def test_the_worker_runs_at_the_priority_asked_for_and_the_loop_as_it_was(thread: HandshakeThread, policy: int,
                                                                         nice: int | None) -> None:
    before = scheduling()

    async def main() -> tuple[int, int, int]:
        queue, probe = HandshakeQueue(thread=thread), Probe()
        queue.submit(probe)
        await until(lambda: probe.outcome is not None)
        queue.close()
        assert queue.priority == thread
        return probe.outcome

    ident, got_policy, got_nice = asyncio.run(main())
    assert ident != threading.get_ident() and got_policy == policy
    assert got_nice == (nice if nice is not None else before[1])
    assert scheduling() == before  # only the worker's thread was lowered


class Held(Probe):
    """A step that does not finish until ``gate`` opens: a worker that gets no CPU (a busy machine)."""

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def handshake_work(self) -> Callable[[], tuple[int, int, int]]:
        def held() -> tuple[int, int, int]:
            assert self.gate.wait(5), "the gate was never opened"
            return (threading.get_ident(), *scheduling())
        return held


def test_a_starved_worker_leaves_the_waiting_steps_to_a_rescue_thread_at_the_loop_s_priority_until_it_is_back() -> None:
    """Not to the loop's turns: there each step would hold up the established connections' input."""
    loop_thread = (threading.get_ident(), *scheduling())

    async def main() -> None:
        queue, gate = HandshakeQueue(thread="idle", in_flight=1, starved_s=0.02), threading.Event()
        held, waiting = Held(gate), [Probe() for _ in range(3)]
        for connection in (held, *waiting):
            queue.submit(connection)
        await until(lambda: all(p.outcome is not None for p in waiting))
        rescuers = {p.outcome for p in waiting}
        assert len(rescuers) == 1 and loop_thread not in rescuers  # one thread, not the loop's
        assert next(iter(rescuers))[1:] == loop_thread[1:]  # at the loop's scheduling, not SCHED_IDLE
        assert queue.rescued_turns == 3 and held.outcome is None and queue.out == 1
        gate.set()
        await until(lambda: held.outcome is not None and queue.out == 0)
        assert held.outcome[1] == os.SCHED_IDLE
        later = [Probe() for _ in range(5)]  # the worker is back: it takes the next ones
        for connection in later:
            queue.submit(connection)
        await until(lambda: all(p.outcome is not None for p in later))
        assert later[0].outcome == held.outcome  # the worker, not starved now, is handed steps again
        queue.close()

    asyncio.run(main())


def test_a_worker_that_keeps_up_is_left_alone() -> None:
    async def main() -> None:
        queue = HandshakeQueue(thread="normal", starved_s=1.0)
        probes = [Probe() for _ in range(50)]
        for connection in probes:
            queue.submit(connection)
        await until(lambda: all(p.outcome is not None for p in probes))
        assert threading.get_ident() not in {p.outcome[0] for p in probes} and queue.rescued_turns == 0
        queue.close()

    asyncio.run(main())


def test_a_bi_outcome_that_fails_to_apply_still_finishes_a_peer_that_left(pki_main: TestPki) -> None:
    """Fault injection: opening the connection raises once the step is back; the peer left while the
    step was out. The connection is logged as failed and finished (not kept in the server's set)."""
    async def main() -> None:
        server, events = bi_server()
        opened = server.connection_opened

        def fails(connection: AmqpConnection) -> None:
            opened(connection)
            raise RuntimeError("a defect")

        server.connection_opened = fails  # type: ignore[method-assign]
        connection = BiConnection(pki_main, server)
        gate = await connection.last_step_held()
        connection.raw.closed = True
        connection.protocol.connection_lost(None)
        gate.open.set()
        await until(lambda: server.handshakes.out == 0)
        await asyncio.sleep(0.01)
        assert [kind for kind, _ in events] == ["connect", "disconnect"] and not server.connections
        server.handshakes.close()

    asyncio.run(main())


def test_a_bi_step_back_while_the_socket_closes_is_heard_out_when_it_is_lost(pki_main: TestPki) -> None:
    """The peer sent its last flight and reset the socket: asyncio marks the transport closing at once
    and calls connection_lost a turn later. A step that comes back in between is kept, not dropped:
    connection_lost hears it out (connect, then disconnect, once)."""
    async def main() -> None:
        server, events = bi_server()
        connection = BiConnection(pki_main, server)
        gate = await connection.last_step_held()
        connection.raw.closed = True  # closing: the reset seen, connection_lost not yet called
        gate.open.set()
        await until(lambda: server.handshakes.out == 0)
        await asyncio.sleep(0.01)
        assert events == [] and connection.raw.out == b""
        connection.protocol.connection_lost(ConnectionResetError())
        assert [kind for kind, _ in events] == ["connect", "disconnect"] and not server.connections
        assert events[0][1]["identity"] == ACTOR
        server.handshakes.close()

    asyncio.run(main())
