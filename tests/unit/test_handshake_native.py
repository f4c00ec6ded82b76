"""Handshake steps on the C thread that never takes the GIL (interchange.broker._handshake, through
interchange.broker.tls_stream and the ``native`` worker of interchange.broker.handshake_queue): the
self-test holds here, a step there gives the same outcome as ``SSLObject.do_handshake`` on a Python
thread (the same exception, reason and verify result), a context with a Python callback keeps its steps in
Python, and the queue's native worker completes a BI connection's handshake. Real TLS in memory BIOs."""
from __future__ import annotations

import asyncio
import os
import select
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from certs import TestPki
from certs.tls import client_context, server_context
from interchange.broker import _handshake  # built by scripts/setup.sh: a missing build fails here, loudly
from interchange.broker import handshake_queue as queue_module
from interchange.broker import tls_stream
from interchange.broker.handshake_queue import HandshakeQueue
from interchange.broker.tls_stream import TlsSession, TlsStep, describe, native_problem
from interchange.testing.memory_transport import MemoryTlsClient
from interchange.testing.pki_fixtures import ACTOR, REVOKED_ACTOR, SERVER, files_for, plain_client_context



def tls_client(context: ssl.SSLContext) -> MemoryTlsClient:
    return MemoryTlsClient(context, SERVER)


def on_c_thread(stepper: object, server: TlsSession, data: bytes) -> tuple[TlsStep, ssl.SSLError | None, float]:
    """A handshake step as the native worker runs it: fed here, the OpenSSL call on the C thread, its
    outcome made :meth:`TlsSession.handshake`'s here."""
    server.feed(data)
    stepper.submit("token", server.native)  # type: ignore[attr-defined]
    ready, _, _ = select.select([stepper.fileno()], [], [], 5)  # type: ignore[attr-defined]
    assert ready, "no outcome from the C thread in 5 s"
    [(token, status, cost, errors)] = stepper.results()  # type: ignore[attr-defined]
    assert token == "token"
    outcome = server.native_outcome(status, errors)
    return server.handshook(outcome), outcome, cost


def on_python_thread(server: TlsSession, data: bytes) -> tuple[TlsStep, ssl.SSLError | None]:
    server.feed(data)
    got: list[ssl.SSLError | None] = []
    thread = threading.Thread(target=lambda: got.append(server.handshake()))
    thread.start()
    thread.join(5)
    return server.handshook(got[0]), got[0]


@pytest.fixture
def stepper() -> Iterator[Any]:
    made = _handshake.Stepper()
    yield made
    made.close()


def test_the_self_test_holds_on_this_interpreter_and_openssl() -> None:
    assert native_problem() is None


def test_a_whole_handshake_on_the_c_thread(pki_main: TestPki, stepper: object) -> None:
    server = TlsSession(server_context(files_for(pki_main, SERVER)))
    assert server.native is not None
    client = tls_client(client_context(files_for(pki_main, ACTOR)))
    flight, outcome, cost = on_c_thread(stepper, server, client.step())
    assert isinstance(outcome, ssl.SSLWantReadError) and flight.send and not server.established
    assert cost > 0  # the step's CPU, measured on the C thread (its key share and signature)
    finished = client.step(flight.send)
    client.obj.write(b"AMQP\x03\x01\x00\x00")
    step, outcome, _ = on_c_thread(stepper, server, finished + client.outgoing.read())
    assert outcome is None and step.established and step.data == b"AMQP\x03\x01\x00\x00"
    assert server.ssl_object.getpeercert()["subject"][-1][0][1] == ACTOR  # type: ignore[index]


@pytest.mark.parametrize("who", ["no certificate", "revoked", "TLS 1.2"])
def test_a_refusal_on_the_c_thread_is_the_one_python_raises(pki_main: TestPki, stepper: object, who: str) -> None:
    def client() -> MemoryTlsClient:
        if who == "no certificate":
            return tls_client(plain_client_context(pki_main.trust_bundle))
        context = client_context(files_for(pki_main, REVOKED_ACTOR if who == "revoked" else ACTOR))
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        if who == "TLS 1.2":
            context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
        return tls_client(context)

    def run(step: object) -> tuple[TlsStep, ssl.SSLError | None]:
        server, peer = TlsSession(server_context(files_for(pki_main, SERVER))), client()
        last, outcome = step(server, peer.step())  # type: ignore[operator]
        while not (last.error or last.established):
            last, outcome = step(server, peer.step(last.send))  # type: ignore[operator]
        return last, outcome

    native, native_error = run(lambda server, data: on_c_thread(stepper, server, data)[:2])
    python, python_error = run(on_python_thread)
    assert native_error is not None and python_error is not None
    assert type(native_error) is type(python_error)
    assert (native_error.library, native_error.reason, str(native_error)) == (
        python_error.library, python_error.reason, str(python_error))
    assert getattr(native_error, "verify_message", None) == getattr(python_error, "verify_message", None)
    assert native.error == python.error == describe(python_error)
    assert len(native.send) == len(python.send) > 0  # the alert (encrypted under TLS 1.3: its length)


def test_a_context_with_a_python_callback_keeps_its_steps_in_python(pki_main: TestPki) -> None:
    context = server_context(files_for(pki_main, SERVER))
    assert TlsSession(context).native is not None
    context.sni_callback = lambda *_: None
    assert TlsSession(context).native is None


def test_when_the_self_test_fails_sessions_step_in_python(pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tls_stream, "native_problem", lambda: "a layout this module does not read")
    assert TlsSession(server_context(files_for(pki_main, SERVER))).native is None


class Connection:
    """A :class:`~interchange.broker.handshake_queue.Handshaking` over a TLS session and a client."""

    def __init__(self, pki: TestPki) -> None:
        self.session = TlsSession(server_context(files_for(pki, SERVER)))
        self.client = tls_client(client_context(files_for(pki, ACTOR)))
        self.input: bytes | None = self.client.step()
        self.steps: list[TlsStep] = []
        self.threads: list[int] = []

    def handshake_work(self) -> Callable[[], ssl.SSLError | None] | None:
        data, self.input = self.input, None
        if data is None:
            return None
        self.session.feed(data)
        return self.session.handshake

    def handshake_done(self, outcome: object) -> None:
        self.threads.append(threading.get_native_id())
        step = self.session.handshook(outcome)  # type: ignore[arg-type]
        self.steps.append(step)
        if not (step.established or step.error):
            self.input = self.client.step(step.send)


async def _through_the_queue(pki: TestPki, queue: HandshakeQueue) -> Connection:
    connection = Connection(pki)
    for _ in range(500):
        if connection.input is not None:
            queue.submit(connection)
        if connection.steps and (connection.steps[-1].established or connection.steps[-1].error):
            return connection
        await asyncio.sleep(0.005)
    raise AssertionError("the handshake did not finish through the queue")


def test_the_native_worker_completes_a_handshake_off_python(pki_main: TestPki) -> None:
    async def main() -> tuple[Connection, HandshakeQueue, list[str], object]:
        queue = HandshakeQueue(thread="native")
        try:
            connection = await _through_the_queue(pki_main, queue)
            return connection, queue, [thread.name for thread in threading.enumerate()], queue._executor
        finally:
            queue.close()

    connection, queue, names, worker = asyncio.run(main())
    assert connection.steps[-1].established and queue.stepped == 2
    assert isinstance(worker, queue_module._NativeWorker) and "tls-handshake" not in names  # no Python worker
    assert queue.priority == "idle"  # the C thread is scheduled SCHED_IDLE
    assert set(connection.threads) == {threading.get_native_id()}  # outcomes applied on the loop's thread


def test_the_native_mode_falls_back_to_the_python_worker(pki_main: TestPki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_module, "native_problem", lambda: "a layout this module does not read")

    async def main() -> tuple[Connection, list[str]]:
        queue = HandshakeQueue(thread="native")
        try:
            connection = await _through_the_queue(pki_main, queue)
            return connection, [thread.name for thread in threading.enumerate()]
        finally:
            queue.close()

    connection, names = asyncio.run(main())
    assert connection.steps[-1].established and "tls-handshake" in names


def test_a_starved_native_worker_is_rescued_by_a_second_c_thread_at_the_loop_s_priority(pki_main: TestPki) -> None:
    """Starvation made immediate (``starved_s=0``, one step out): the second connection's steps go to the
    rescue thread, which is a C thread as well (no Python thread made, so a rescued step never holds the
    GIL), scheduled as the loop, not SCHED_IDLE; both handshakes complete."""
    async def main() -> tuple[list[Connection], HandshakeQueue, list[str], object, int]:
        queue = HandshakeQueue(thread="native", in_flight=1, starved_s=0.0)
        try:
            connections = await asyncio.gather(*(_through_the_queue(pki_main, queue) for _ in range(2)))
            rescuer = queue._rescuer
            policy = os.sched_getscheduler(rescuer.native_id) if isinstance(rescuer, queue_module._NativeWorker) else -1
            return connections, queue, [thread.name for thread in threading.enumerate()], rescuer, policy
        finally:
            queue.close()

    connections, queue, names, rescuer, policy = asyncio.run(main())
    assert all(c.steps[-1].established for c in connections)
    assert queue.rescued_turns >= 1 and isinstance(rescuer, queue_module._NativeWorker)
    assert not any(name.startswith("tls-handshake") for name in names)  # neither worker is a Python thread
    assert policy == os.sched_getscheduler(0) == os.SCHED_OTHER  # the rescue thread runs as the loop
