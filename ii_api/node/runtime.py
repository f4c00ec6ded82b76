"""Starting and stopping the Improved Interface inside a node (same process and event loop as the
broker, its own HTTPS port). Its TLS contexts are the node's (:class:`~certs.node_tls.NodeTls`):
a reload applies to its new connections, and :meth:`RunningII.close_revoked` closes the open
ones whose client certificate a reloaded CRL revokes, and the federation links to neighbours whose
server certificate it revokes."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from certs.node_tls import NodeTls
from certs.revocation import Revocations
from ii_api.http.server import start_server
from ii_api.node.service import IIService
from ii_api.resources.doors import AddressBookDoor, EventSink, ImportSink
from ii_api.settings.config import IIConfig
from ii_api.storage.store import AsyncStore
from interchange.broker.handshake_queue import HandshakeQueue
from interchange.broker.placement import Placement

__all__ = ["RunningII", "start_ii"]


@dataclass
class RunningII:
    """The II of a running node."""

    service: IIService
    port: int
    runner: web.AppRunner
    store: AsyncStore

    def close_revoked(self, revocations: Revocations) -> int:
        """Close the open HTTPS connections (keep-alive included) whose client certificate
        ``revocations`` lists, and the federation links to neighbours whose server certificate it
        lists; each is logged. Returns how many were closed."""
        closed = 0
        for endpoint, reason in self.service.outgoing.close_revoked(revocations):
            self.service.event("warning", "connection_revoked", {
                "interface": "federation", "peer": f"{endpoint.host}:{endpoint.port}",
                "neighbour": endpoint.neighbour, "source": endpoint.source, "reason": reason})
            closed += 1
        server = self.runner.server
        for handler in server.connections if server is not None else ():
            transport = handler.transport
            ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            entry = revocations.lookup(der) if der else None
            if entry is None or transport is None:
                continue
            self.service.event("warning", "connection_revoked", {
                "interface": "ii", "peer": str(transport.get_extra_info("peername")), "reason": entry.describe()})
            handler.force_close()  # no further request on this connection
            transport.close()
            closed += 1
        return closed

    async def close(self) -> None:
        try:
            await self.service.close()
        finally:
            try:
                await self.runner.cleanup()
            finally:
                await self.store.close()


async def start_ii(name: str, ii: IIConfig, data_dir: str | Path, tls: NodeTls, addresses: AddressBookDoor,
                   core: ImportSink, amqps_ports: list[int], placement: Placement,
                   event: EventSink | None = None, handshakes: HandshakeQueue | None = None) -> RunningII:
    """Open the store in ``data_dir``, restore the state (broker addresses included), listen, start
    the timers of the II of interchange ``name``.

    ``amqps_ports`` are the AMQPS ports of broker processes 0..N-1; with ``ii.public_port`` set,
    process k is advertised on public_port + k. ``handshakes``: the BI server's queue of handshake
    steps, so that both interfaces' arriving connections share one bound per loop turn."""
    store = await AsyncStore.for_data_dir(data_dir).open()
    try:
        service = IIService(name=name, config=ii, store=store, addresses=addresses, core=core,
                            client_context=tls.client.current, amqp_host=ii.public_host or name,
                            amqp_ports=[ii.public_port + k for k in range(len(amqps_ports))] if ii.public_port
                            else amqps_ports, placement=placement, event=event,
                            max_certificate_days=tls.max_certificate_days)
        runner, port = await start_server(service, ii.host, ii.port, tls.server.current,
                                          limits=ii.limits, max_certificate_days=tls.max_certificate_days,
                                          handshakes=handshakes)
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
