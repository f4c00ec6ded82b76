"""Data exchange between interchanges (chapter 4.2.8): receiver links to a neighbour's endpoints.

:class:`Federation` pulls each endpoint of a CREATED subscription at a neighbour over AMQP, TLS 1.3
with our interchange certificate (SASL EXTERNAL), the neighbour's name checked against its server
certificate (IP_125); what arrives is routed into the local broker as imported data (IP_109), and a
dropped connection is re-established with exponential back-off until the subscription goes.
Settle after store: a durable message is accepted upstream only once the local store has it
(released if it could not be written), so a killed node loses nothing its neighbour considers
delivered (at-least-once). A link belongs to one subscription and only its owner dials it, so no
double-connect resolution is needed. Every link state change is a ``federation_link_up`` /
``federation_link_down`` record (reason, retry delay); a link refused or lost tells its owner
(``on_down``: poll the subscription now), and AMQP's idle time-out (``idle_timeout_s``) drops a
silent neighbour within twice it. Why, in full: docs/improved-interface.md ("Data links").
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Any

from certs.revocation import Revocations
from certs.tls import certificate_lifetime_problem
from ii_api.peers.doors import ClientContext, EventSink, LinkDown, MessageSink
from interchange.broker.client import RELEASE, ClientConnection, ReceiverState
from interchange.broker.engine import Rejected
from interchange.ground.timing import backoff_s

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RemoteEndpoint:
    """Where to pull one subscription's messages from."""

    neighbour: str  #: the neighbour interchange's name = its server certificate name
    host: str
    port: int
    source: str


@dataclass
class LinkStatus:
    """What an operator (and the tests) can see of one federation link."""

    endpoint: RemoteEndpoint
    connected: bool = False
    received: int = 0
    rejected: int = 0
    connects: int = 0
    last_error: str | None = None


class Federation:
    """Supervises the node's receiver links to other interchanges."""

    def __init__(self, core: MessageSink, client_context: ClientContext, own_name: str,
                 min_backoff: float = 0.5, max_backoff: float = 60.0, max_certificate_days: int | None = None,
                 *, idle_timeout_s: float = 30.0, events: EventSink | None = None,
                 on_down: LinkDown | None = None) -> None:
        self._core = core
        self._idle_timeout_s = idle_timeout_s
        self._events = events
        self._on_down = on_down
        self._max_days = max_certificate_days  #: IP_051: neighbours' certificates valid longer are refused
        self._context = client_context
        self._own_name = own_name
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._tasks: dict[str, list[asyncio.Task]] = {}
        self.status: dict[str, list[LinkStatus]] = {}
        self._open: dict[int, tuple[LinkStatus, ClientConnection]] = {}  #: by id(status): the live connections

    def pull(self, key: str, endpoints: list[RemoteEndpoint]) -> None:
        """Start (or restart with new endpoints) the links of subscription ``key``."""
        self.stop(key)
        statuses = [LinkStatus(endpoint) for endpoint in endpoints]
        self.status[key] = statuses
        loop = asyncio.get_running_loop()
        self._tasks[key] = [loop.create_task(self._supervise(status), name=f"federation-{key}")
                            for status in statuses]

    def stop(self, key: str) -> None:
        """Close the links of subscription ``key``."""
        for task in self._tasks.pop(key, []):
            task.cancel()
        self.status.pop(key, None)

    async def close(self) -> None:
        tasks = [t for ts in self._tasks.values() for t in ts]
        for key in list(self._tasks):
            self.stop(key)
        await asyncio.gather(*tasks, return_exceptions=True)

    def _check_lifetime(self, connection: ClientConnection) -> None:
        """IP_051 with ``tls.max_certificate_days``: a neighbour whose server certificate is valid
        for longer is refused before any link (ConnectionError: retried with back-off, shown in the
        link's ``last_error``)."""
        if self._max_days is None:
            return
        problem = certificate_lifetime_problem(connection.peer_certificate(), self._max_days)
        if problem is not None:
            connection.abort()
            raise ConnectionError(f"neighbour certificate refused: {problem}")

    def peer_certificates(self) -> list[tuple[RemoteEndpoint, bytes]]:
        """The server certificate (DER) of the neighbour behind each open link (operators watch
        its expiry)."""
        return [(status.endpoint, der) for status, connection in self._open.values()
                if (der := connection.peer_certificate())]

    def close_revoked(self, revocations: Revocations) -> list[tuple[RemoteEndpoint, str]]:
        """Drop the open links whose neighbour's server certificate ``revocations`` lists (a CRL
        reload): each is retried with back-off, and the new CRLs refuse the handshake.
        Returns (endpoint, revocation) of each link dropped."""
        dropped = []
        for status, connection in list(self._open.values()):
            der = connection.peer_certificate()
            entry = revocations.lookup(der) if der else None
            if entry is not None:
                status.last_error = f"neighbour certificate revoked: {entry.describe()}"
                connection.abort()
                dropped.append((status.endpoint, entry.describe()))
        return dropped

    def _open_receiver(self, status: LinkStatus, connection: ClientConnection) -> ReceiverState:
        """A receiver on the endpoint's source whose deliveries are settled here, a durable one once stored."""
        receiver = ReceiverState(status.endpoint.source, None, 500, lambda raw: self._on_settled(status, raw),
                                 deferred=lambda raw, delivery: self._on_message(status, connection, receiver,
                                                                                 raw, delivery))
        connection.engine.open_receiver(receiver)
        connection.flush()
        return receiver

    def _on_settled(self, status: LinkStatus, raw: bytes) -> str | None:
        """A delivery the neighbour sent settled: routed, nothing to answer."""
        try:
            self._core.publish_imported(raw, status.endpoint.neighbour)
        except Rejected as exc:
            status.rejected += 1
            return exc.description
        status.received += 1
        return None

    def _on_message(self, status: LinkStatus, connection: ClientConnection, receiver: ReceiverState,
                    raw: bytes, delivery: Any) -> None:
        try:
            receipt = self._core.publish_imported(raw, status.endpoint.neighbour)
        except Rejected as exc:
            status.rejected += 1
            connection.engine.settle(receiver, delivery, exc.description)  # flushed after this input
            return
        status.received += 1
        if receipt is None:
            connection.engine.settle(receiver, delivery, None)
        else:  # durable: settled upstream once stored
            receipt.add(_settle_stored, (connection, receiver, delivery))

    async def _supervise(self, status: LinkStatus) -> None:
        failures = 0  # since the link was last up
        while True:
            was_up = await self._pull_once(status)
            failures = 1 if was_up else failures + 1
            delay = backoff_s(failures, self._min_backoff, self._max_backoff)
            self._went_down(status, delay)
            await asyncio.sleep(delay)

    async def _pull_once(self, status: LinkStatus) -> bool:
        """One connection: the receiver attached, messages pulled until the link or the connection
        goes; whether the neighbour attached it (``status.last_error`` says why it ended)."""
        endpoint = status.endpoint
        connection: ClientConnection | None = None
        attached = False
        try:
            connection = await ClientConnection.open(endpoint.host, endpoint.port, self._context(), endpoint.neighbour,
                                                     self._own_name, idle_timeout_s=self._idle_timeout_s)
            self._check_lifetime(connection)
            status.connects += 1
            self._open[id(status)] = (status, connection)
            receiver = self._open_receiver(status, connection)
            attached = await self._until(connection, connection.link_opened) and receiver.opened and not receiver.closed
            if attached:
                status.connected = True
                self._event("info", "federation_link_up", status, connects=status.connects)
                await self._until(connection, None)
            status.last_error = (receiver.error or connection.engine.remote_error or connection.engine.transport_error
                                 or "connection closed")
            await connection.close()
        except asyncio.CancelledError:
            if connection is not None:
                connection.abort()  # stopping: no graceful close that could hold shutdown up
            raise
        except (OSError, ssl.SSLError, ConnectionError, asyncio.TimeoutError) as exc:
            status.last_error = f"{type(exc).__name__}: {exc}"
        finally:
            status.connected = False
            self._open.pop(id(status), None)
        return attached

    @staticmethod
    async def _until(connection: ClientConnection, event: asyncio.Event | None) -> bool:
        """Wait until ``event`` is set (True), or one of our links is detached or the connection lost (False)."""
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(connection.link_closed.wait())]
        if event is not None:
            waits.append(asyncio.ensure_future(event.wait()))
        try:
            await asyncio.wait([connection.lost, *waits], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return event is not None and event.is_set() and not connection.lost.done()

    def _went_down(self, status: LinkStatus, retry_in_s: float) -> None:
        """A link refused, lost or never connected: logged, and its owner told (it polls the subscription)."""
        reason = status.last_error or "connection closed"
        self._event("warning", "federation_link_down", status, reason=reason, retry_in_s=round(retry_in_s, 3))
        log.debug("federation link to %s:%s/%s down (%s); retrying in %.1f s", status.endpoint.host,
                  status.endpoint.port, status.endpoint.source, reason, retry_in_s)
        if self._on_down is not None:
            self._on_down(status.endpoint, reason)

    def _event(self, level: str, kind: str, status: LinkStatus, **fields: object) -> None:
        if self._events is not None:
            endpoint = status.endpoint
            self._events(level, kind, {"neighbour": endpoint.neighbour, "host": endpoint.host, "port": endpoint.port,
                                       "source": endpoint.source, **fields})


def _settle_stored(arg: tuple[ClientConnection, ReceiverState, Any], ok: bool) -> None:
    """The local store has the imported message (accept upstream) or could not write it (release:
    the neighbour sends it again). A link gone meanwhile leaves it to the neighbour's redelivery."""
    connection, receiver, delivery = arg
    connection.settle(receiver, delivery, None if ok else RELEASE)
