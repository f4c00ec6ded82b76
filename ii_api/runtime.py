"""Starting and stopping the Improved Interface inside a node (same process and event loop as the
broker, its own HTTPS port)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from certs.tls import ReloadingTls, TlsFiles
from ii_api.config import IIConfig
from ii_api.doors import AddressBookDoor, EventSink, ImportSink
from ii_api.server import start_server
from ii_api.service import IIService
from ii_api.store import AsyncStore
from interchange.broker.placement import Placement

__all__ = ["RunningII", "start_ii"]


@dataclass
class RunningII:
    """The II of a running node."""

    service: IIService
    port: int
    runner: web.AppRunner
    store: AsyncStore

    async def close(self) -> None:
        try:
            await self.service.close()
        finally:
            try:
                await self.runner.cleanup()
            finally:
                await self.store.close()


async def start_ii(name: str, ii: IIConfig, data_dir: str | Path, files: TlsFiles, addresses: AddressBookDoor,
                   core: ImportSink, amqps_ports: list[int], placement: Placement,
                   event: EventSink | None = None) -> RunningII:
    """Open the store in ``data_dir``, restore the state (broker addresses included), listen, start
    the timers of the II of interchange ``name``.

    ``amqps_ports`` are the AMQPS ports of broker processes 0..N-1; with ``ii.public_port`` set,
    process k is advertised on public_port + k."""
    store = await AsyncStore.for_data_dir(data_dir).open()
    try:
        client_tls = ReloadingTls(files, "client")
        service = IIService(name=name, config=ii, store=store, addresses=addresses, core=core,
                            client_context=client_tls.current, amqp_host=ii.public_host or name,
                            amqp_ports=[ii.public_port + k for k in range(len(amqps_ports))] if ii.public_port
                            else amqps_ports, placement=placement, event=event)
        server_tls = ReloadingTls(files, "server")  # a new CRL applies to new connections
        runner, port = await start_server(service, ii.host, ii.port, server_tls.listener_context(),
                                          max_body_bytes=ii.max_body_bytes)
        try:
            await service.start()
        except BaseException:
            await service.close()
            await runner.cleanup()
            raise
    except BaseException:
        await store.close()
        raise
    return RunningII(service, port, runner, store)
