"""The node's extra broker processes (1..N-1 of ``broker.processes``), run from the node process.

Each is ``python -m interchange.app.worker``, fed over its stdin (:mod:`interchange.broker.control`)
the node config, a snapshot of the node's :class:`AddressBook`, every later change and the log
settings; the node process stays the one place addresses are decided. A worker that exits is
restarted (0.5 s back-off doubling up to 30 s) on the ports it had, its durable messages back from
``<data_dir>/store/p<k>``. Each (re)start tells the worker its CPUs (:attr:`Start.cpus`: its ``process_cpus``
entry, else the node's CPUs at start), as one started from the loop's thread would inherit that thread's,
narrowed by ``handshake_cpus``. Changes are written as fast as the worker reads them, the latest per
address replacing a waiting one. Why: docs/broker.md ("Several broker processes").
"""
from __future__ import annotations

import asyncio
import contextlib
import sys

from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.control import (ControlCodec, ControlError, Failed, LogChange, PutSource, PutTarget, Ready,
                                        ReloadTls, Remove, Start)
from interchange.broker.message_log import JsonLog
from interchange.ground.timing import backoff_s

__all__ = ["BrokerProcesses", "WorkerStartError"]

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
RESTART_MIN_S = 0.5
RESTART_MAX_S = 30.0
STABLE_S = 60.0  #: a worker that ran this long failed afresh: its restart delay starts over


class WorkerStartError(RuntimeError):
    """A broker process did not start (its reason, or a time-out)."""


Outgoing = Start | PutTarget | PutSource | Remove | LogChange | ReloadTls


def _slot(message: Outgoing) -> object:
    """What a later message replaces an unsent one by: its address (or its kind)."""
    match message:
        case PutTarget(spec=spec) | PutSource(spec=spec):
            return ("address", spec.address)
        case Remove(address=address):
            return ("address", address)
    return message.op


class _Worker:
    """One running worker process and its end of the control channel."""

    def __init__(self, index: int, process: asyncio.subprocess.Process) -> None:
        self.index = index
        self.process = process
        self.codec = ControlCodec()
        self._outbox: dict[object, Outgoing] = {}  #: unsent, by slot, in order of first change
        self._writer: asyncio.Task[None] | None = None

    @classmethod
    async def spawn(cls, start: Start, timeout_s: float) -> tuple["_Worker", Ready]:
        """Start a worker with ``start`` and wait until it listens."""
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "interchange.app.worker",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        worker = cls(start.index, process)
        worker.send(start)
        try:
            async with asyncio.timeout(timeout_s):
                ready = await worker._wait_ready()
        except BaseException as exc:
            await worker.stop()
            if isinstance(exc, TimeoutError):
                raise WorkerStartError(f"broker process {start.index} not ready within {timeout_s:.0f} s") from None
            raise
        return worker, ready

    def send(self, message: Outgoing) -> None:
        """Queue ``message`` (replacing an unsent one of its address); written as the worker reads."""
        self._outbox[_slot(message)] = message
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write(), name=f"broker-process-{self.index}-control")

    @property
    def unsent(self) -> int:
        """Messages waiting for the worker to read what it was sent before."""
        return len(self._outbox) + int(self._writer is not None and not self._writer.done())

    async def _write(self) -> None:
        stdin = self.process.stdin
        while self._outbox and stdin is not None and not stdin.is_closing():
            slot = next(iter(self._outbox))
            stdin.write(self.codec.encode(self._outbox.pop(slot)))
            try:
                await stdin.drain()
            except (ConnectionError, RuntimeError):  # the worker is gone; its supervisor restarts it
                return

    async def _wait_ready(self) -> Ready:
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            data = await stdout.read(65536)
            if not data:
                code = await self.process.wait()
                raise WorkerStartError(f"broker process {self.index} exited with status {code} before it was ready")
            try:
                messages = self.codec.feed(data)
            except ControlError as exc:
                raise WorkerStartError(f"broker process {self.index}: {exc}") from None
            for message in messages:
                if isinstance(message, Failed):
                    raise WorkerStartError(message.reason)
                if isinstance(message, Ready):
                    return message

    async def stop(self) -> None:
        """Close the control channel (the worker stops by itself), kill it if it does not."""
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await self.process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


class BrokerProcesses:
    """Broker processes 1..N-1 of a node, kept running and in step with its address book and log."""

    def __init__(self, config: dict, processes: int, addresses: AddressBook, log: JsonLog,
                 cpus: frozenset[int] | None = None) -> None:
        self._config = config
        self._cpus = cpus  #: the node's CPUs at start (a worker's without process_cpus)
        self._processes = processes
        self._addresses = addresses
        self._log = log
        self._workers: dict[int, _Worker] = {}
        self._ready: dict[int, Ready] = {}
        self._supervisors: list[asyncio.Task[None]] = []
        self._closing = False
        self.restarts = 0  #: worker restarts so far (operators, tests)

    @property
    def ready(self) -> list[Ready]:
        """Ports of processes 1..N-1, in order."""
        return [self._ready[k] for k in sorted(self._ready)]

    @property
    def pids(self) -> list[int]:
        """Process ids of the running workers, in order."""
        return [self._workers[k].process.pid for k in sorted(self._workers)]

    @classmethod
    async def start(cls, config: dict, processes: int, addresses: AddressBook, log: JsonLog,
                    timeout_s: float = START_TIMEOUT_S, cpus: frozenset[int] | None = None) -> "BrokerProcesses":
        """Start processes 1..``processes``-1 with ``config`` (a NodeConfig as JSON), wait until each
        listens, then mirror ``addresses`` to them from now on; ``cpus``: the node's CPUs at start."""
        pool = cls(config, processes, addresses, log, cpus)
        try:
            started = await asyncio.gather(
                *(_Worker.spawn(pool._start_message(k, None), timeout_s) for k in range(1, processes)),
                return_exceptions=True)
            for result in started:
                if not isinstance(result, BaseException):
                    worker, ready = result
                    pool._adopt(worker, ready)
            for result in started:
                if isinstance(result, BaseException):
                    raise result
        except BaseException:
            await pool.close()
            raise
        addresses.subscribe(pool._on_address_change)
        log.on_change(lambda: pool._broadcast(LogChange(settings=log.settings)))
        loop = asyncio.get_running_loop()
        pool._supervisors = [loop.create_task(pool._supervise(k), name=f"broker-process-{k}")
                             for k in range(1, processes)]
        return pool

    def _start_message(self, index: int, ports: Ready | None) -> Start:
        return Start(index=index, processes=self._processes, config=self._config, ports=ports,
                     cpus=self.worker_cpus(index))

    def worker_cpus(self, index: int) -> list[int] | None:
        """The CPUs worker ``index`` places itself on: its process_cpus entry, else the node's at start."""
        placed = (self._config.get("broker") or {}).get("process_cpus")
        if placed:
            return sorted(placed[index])
        return None if self._cpus is None else sorted(self._cpus)

    def _adopt(self, worker: _Worker, ready: Ready) -> None:
        """Take a worker that listens into service: the current addresses, then every change."""
        self._workers[worker.index] = worker
        self._ready[worker.index] = ready
        for target in self._addresses.targets.values():
            worker.send(PutTarget(spec=target))
        for source in self._addresses.sources.values():
            worker.send(PutSource(spec=source))
        worker.send(LogChange(settings=self._log.settings))  # as switched at run time, if it was

    def _on_address_change(self, kind: str, address: str, spec: TargetSpec | SourceSpec | None) -> None:
        if spec is None:
            self._broadcast(Remove(address=address))
        elif isinstance(spec, TargetSpec):
            self._broadcast(PutTarget(spec=spec))
        else:
            self._broadcast(PutSource(spec=spec))

    def reload_tls(self) -> int:
        """Ask every running worker to reload its TLS files (it logs the outcome); how many were asked."""
        self._broadcast(ReloadTls())
        return len(self._workers)

    def _broadcast(self, message: Outgoing) -> None:
        for worker in self._workers.values():
            worker.send(message)

    async def _supervise(self, index: int) -> None:
        """Restart worker ``index`` whenever it exits while the node runs, on the ports it had."""
        failures = 0  # exits and failed restarts since it last ran for STABLE_S
        loop = asyncio.get_running_loop()
        while not self._closing:
            worker = self._workers.get(index)
            if worker is not None:
                since = loop.time()
                code = await worker.process.wait()
                if self._closing:
                    return
                del self._workers[index]
                if loop.time() - since > STABLE_S:
                    failures = 0
            failures += 1
            delay = backoff_s(failures, RESTART_MIN_S, RESTART_MAX_S)
            if worker is not None:
                self._log.event("error", "broker_process_exited",
                                {"process": index, "status": code, "restart_in_s": delay})
            await asyncio.sleep(delay)
            try:
                worker, ready = await _Worker.spawn(self._start_message(index, self._ready[index]), START_TIMEOUT_S)
            except (WorkerStartError, OSError) as exc:
                self._log.event("error", "broker_process_restart_failed", {"process": index, "error": str(exc)})
                continue
            if self._closing:
                await worker.stop()
                return
            self._adopt(worker, ready)
            self.restarts += 1
            self._log.event("warning", "broker_process_restarted", {"process": index, "pid": worker.process.pid,
                                                                    "amqps_port": ready.amqps_port})

    async def close(self) -> None:
        """Stop every worker: close its control channel, wait, then kill if it must."""
        self._closing = True
        for task in self._supervisors:
            task.cancel()
        await asyncio.gather(*self._supervisors, return_exceptions=True)
        await asyncio.gather(*(worker.stop() for worker in self._workers.values()))
