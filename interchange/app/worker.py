"""An extra broker process of a node (``python -m interchange.app.worker``), started by
:class:`interchange.app.processes.BrokerProcesses`.

It reads control messages (:mod:`interchange.broker.control`) on stdin: first ``start`` with the
node config, its index k and its CPUs (where it places all its threads before anything else:
:mod:`interchange.broker.cpu_placement`), then the address book changes; it answers ``ready`` with its ports
on its original stdout (everything else it prints goes to stderr). It runs the same broker as
the node process, on port + k, with its own log file and admin endpoint, serving the targets
:class:`~interchange.broker.placement.Placement` gives it and a copy of every source. It stops
when stdin closes (the node stopped or died) or on SIGTERM; SIGINT is left to the node, which
stops its workers itself, and so is SIGHUP (the node reloads TLS and sends ``reload_tls``).
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from certs.node_tls import TlsReloadError
from interchange.app.config import NodeConfig
from interchange.app.node import RunningNode, start_node
from interchange.broker.addresses import AddressError
from interchange.broker.control import (ControlCodec, ControlError, Failed, LogChange, PutSource, PutTarget, Ready,
                                        ReloadTls, Remove, Start)
from interchange.broker.cpu_placement import place_process


def worker_config(config: dict, index: int, ports: Ready | None = None) -> dict:
    """The node config as broker process ``index`` runs it: ports shifted by ``index`` (0 stays 0,
    any free port) or exactly ``ports`` (a restart), its own log file, no Improved Interface, no
    static addresses (they come over the control channel, like the II's)."""
    broker = dict(config.get("broker") or {})
    admin = dict(config.get("admin") or {})
    for key in ("port", "plain_port"):
        if broker.get(key):
            broker[key] = broker[key] + index
    if admin.get("port"):
        admin["port"] = admin["port"] + index
    if ports is not None:
        for section, key, port in ((broker, "port", ports.amqps_port), (broker, "plain_port", ports.amqp_port),
                                   (admin, "port", ports.admin_port)):
            if port is not None:
                section[key] = port
    broker["targets"], broker["sources"] = [], []
    log = dict(config.get("log") or {})
    if log.get("path"):
        path = Path(log["path"])
        log["path"] = str(path.with_name(f"{path.stem}.p{index}{path.suffix}"))
    return {**config, "broker": broker, "admin": admin, "log": log, "ii": None}


async def _read_start(reader: asyncio.StreamReader, codec: ControlCodec) -> list[object]:
    """The first control messages (``start`` first); [] when the node went away before starting us."""
    pending: list[object] = []
    while not pending:
        data = await reader.read(65536)
        if not data:
            return []
        pending = list(codec.feed(data))
    return pending


async def apply(node: RunningNode, message: object) -> None:
    """One control message after ``start``: the node's address book or log settings, mirrored, or a
    TLS reload (its outcome is logged by the reload)."""
    try:
        match message:
            case ReloadTls():
                await node.reload_tls()
            case PutTarget(spec=spec):
                node.addresses.put_target(spec)
            case PutSource(spec=spec):
                node.addresses.put_source(spec)
            case Remove(address=address):
                node.addresses.remove(address)
            case LogChange(settings=settings):
                node.log.update(settings)
            case _:
                node.log.event("error", "control_message_ignored", {"op": getattr(message, "op", None)})
    except AddressError as exc:  # the node checked it already: a mirror out of step
        node.log.event("error", "control_message_failed", {"error": str(exc)})
    except TlsReloadError:
        pass  # logged as tls_reload_failed; this process keeps its previous TLS settings


async def _follow(node: RunningNode, reader: asyncio.StreamReader, codec: ControlCodec,
                  pending: list[object]) -> None:
    """Apply the control messages that came with ``start``, then every later one until stdin closes."""
    for message in pending:
        await apply(node, message)
    while data := await reader.read(65536):
        try:
            messages = codec.feed(data)
        except ControlError as exc:
            node.log.event("error", "control_channel_broken", {"error": str(exc)})
            return
        for message in messages:
            await apply(node, message)


async def serve(reader: asyncio.StreamReader, send: Callable[[bytes], None]) -> int:
    """Run one worker: ``reader`` delivers the control stream, ``send`` writes answers."""
    codec = ControlCodec()
    pending = await _read_start(reader, codec)
    if not pending:
        return 0  # the node went away before starting us
    start, rest = pending[0], pending[1:]
    if not isinstance(start, Start):
        send(codec.encode(Failed(reason=f"expected a start message, got {getattr(start, 'op', None)!r}")))
        return 2
    if start.cpus is not None:  # first: the config check and every thread started later see this set
        place_process(frozenset(start.cpus))
    try:
        config = NodeConfig.model_validate(worker_config(start.config, start.index, start.ports))
        node = await start_node(config, placement=config.broker.placement(start.index))
    except (ValidationError, OSError, ValueError) as exc:
        send(codec.encode(Failed(reason=f"broker process {start.index}: {exc}")))
        return 2
    node.freeze_startup_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    send(codec.encode(Ready(amqps_port=node.amqps_port, amqp_port=node.amqp_port, admin_port=node.admin_port)))
    control = loop.create_task(_follow(node, reader, codec, rest))
    stopped = loop.create_task(stop.wait())
    try:
        await asyncio.wait({control, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (control, stopped):
            task.cancel()
        await node.shutdown()  # graceful, bounded: the node closed our stdin or sent SIGTERM
    return 0


async def _main() -> int:
    control_out = os.dup(1)
    os.dup2(2, 1)  # stray prints must not corrupt the control channel
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def send(data: bytes) -> None:
        os.write(control_out, data)  # a few hundred bytes, once or twice: below PIPE_BUF

    return await serve(reader, send)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the node reloads TLS and tells its workers (reload_tls)
    sys.exit(asyncio.run(_main()))


if __name__ == "__main__":
    main()
