"""The node's extra broker processes (1..N-1 of ``broker.processes``), run from the node process.

Each is ``python -m interchange.broker.worker``, fed over its stdin (:mod:`interchange.broker.control`)
with the node config, then a snapshot of the node's :class:`AddressBook` and every later change
(from config or the II), and the log settings when an operator switches them. The node process
stays the one place addresses are decided; the workers only mirror them.
"""
from __future__ import annotations

import asyncio
import contextlib
import sys

from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.control import (ControlCodec, ControlError, Failed, LogChange, PutSource, PutTarget, Ready,
                                        Remove, Start)
from interchange.message_log import JsonLog

__all__ = ["BrokerProcesses", "WorkerStartError"]

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


class WorkerStartError(RuntimeError):
    """A broker process did not start (its reason, or a time-out)."""


class _Worker:
    def __init__(self, index: int, process: asyncio.subprocess.Process) -> None:
        self.index = index
        self.process = process
        self.codec = ControlCodec()
        self.ready: Ready | None = None
        self.watcher: asyncio.Task[None] | None = None

    def send(self, message: object) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.write(self.codec.encode(message))  # type: ignore[arg-type]

    async def wait_ready(self) -> Ready:
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


class BrokerProcesses:
    """Broker processes 1..N-1 of a node, kept in step with its address book and log settings."""

    def __init__(self, workers: list[_Worker], log: JsonLog) -> None:
        self._workers = workers
        self._log = log
        self._closing = False

    @property
    def ready(self) -> list[Ready]:
        """Ports of processes 1..N-1, in order."""
        return [w.ready for w in self._workers if w.ready is not None]

    @classmethod
    async def start(cls, config: dict, processes: int, addresses: AddressBook, log: JsonLog,
                    timeout_s: float = START_TIMEOUT_S) -> "BrokerProcesses":
        """Start processes 1..``processes``-1 with ``config`` (a NodeConfig as JSON), wait until each
        listens, then mirror ``addresses`` to them from now on."""
        workers: list[_Worker] = []
        pool = cls(workers, log)
        try:
            for index in range(1, processes):
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "interchange.broker.worker",
                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
                worker = _Worker(index, process)
                workers.append(worker)
                worker.send(Start(index=index, processes=processes, config=config))
            for worker in workers:
                try:
                    worker.ready = await asyncio.wait_for(worker.wait_ready(), timeout_s)
                except TimeoutError:
                    raise WorkerStartError(f"broker process {worker.index} not ready within {timeout_s:.0f} s") from None
        except BaseException:
            await pool.close()
            raise
        for spec in addresses.targets.values():
            pool._broadcast(PutTarget(spec=spec))
        for spec in addresses.sources.values():
            pool._broadcast(PutSource(spec=spec))
        addresses.subscribe(pool._on_address_change)
        log.on_change(lambda: pool._broadcast(LogChange(settings=log.settings)))
        for worker in workers:
            worker.watcher = asyncio.get_running_loop().create_task(pool._watch(worker))
        return pool

    def _on_address_change(self, kind: str, address: str, spec: TargetSpec | SourceSpec | None) -> None:
        if spec is None:
            self._broadcast(Remove(address=address))
        elif isinstance(spec, TargetSpec):
            self._broadcast(PutTarget(spec=spec))
        else:
            self._broadcast(PutSource(spec=spec))

    def _broadcast(self, message: object) -> None:
        for worker in self._workers:
            worker.send(message)

    async def _watch(self, worker: _Worker) -> None:
        """Report a broker process that exits while the node runs (its ports stop answering)."""
        code = await worker.process.wait()
        if not self._closing:
            self._log.event("error", "broker_process_exited", {"process": worker.index, "status": code})

    async def close(self) -> None:
        """Stop every worker: close its control channel, wait, then terminate/kill if it must."""
        self._closing = True
        for worker in self._workers:
            if worker.process.stdin is not None:
                worker.process.stdin.close()
        for worker in self._workers:
            try:
                await asyncio.wait_for(worker.process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
                await worker.process.wait()
            if worker.watcher is not None:
                worker.watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker.watcher


