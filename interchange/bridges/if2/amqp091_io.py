"""The asyncio side of :mod:`.amqp091`: a Protocol that moves bytes between the socket (TLS) and
the sans-I/O :class:`~.amqp091.Connection`, and time (heartbeats). Writes are gathered
(:meth:`Client.flush_soon`: after the input of the next loop turn; what a read caused at its end),
so the publishes of two turns' BI deliveries go in one write however many there are.

Under load the socket rests between reads (:data:`REST_AFTER`, :data:`REST_S`): after a read that
carried many deliveries, or confirmed many publishes, it is not read again for a millisecond, so the
next read takes what came meanwhile in one go (for the publisher: the next confirms, and with them
the next run of publishes, in one go too). Each read costs the node a fixed share (the TLS read, a loop turn, the BI
write it causes and the dispositions that come back for it) whatever it carries; RabbitMQ writes a
handful of deliveries at a time, so a node that keeps up reads a handful at a time and pays that
share per handful. A read of few deliveries (paced traffic) never rests: its latency is untouched.

Synchronous methods (declarations, bindings, qos, consume, confirm.select) are awaited with
:meth:`Client.call`; the deliveries of each read go to ``on_deliveries`` as one list, in order; a
publish's ``on_confirm`` is called with True once the broker confirmed it, with False when it nacked
it or the connection went first. A publisher that handles many confirms at once sets
:attr:`Client.on_confirmed` instead: it is then given the tokens of each ``basic.ack``/``basic.nack``
(a run of publishes) in one call, and a publish's token is whatever that publisher wants back. Any
channel the broker closes ends the whole connection (the bridge opens a new one, with new Table 3
queues): :attr:`Client.closed` then holds the reason.
"""
from __future__ import annotations

import asyncio
import ssl
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from typing import Any

from pamqp import base, commands

from interchange.bridges.if2.amqp091 import Closed, Confirmed, Connection, Delivery, ProtocolError, Reply
from interchange.broker.tls_stream import TlsSession

__all__ = ["AmqpClosed", "Client", "OnConfirmed", "confirm_each"]

Confirm = Callable[[bool], None]
#: the tokens of publishes that the broker confirmed (True) or did not (False), in publishing order
OnConfirmed = Callable[[Sequence[Any], bool], None]
#: a read that carried at least this many deliveries, or confirmed as many publishes, makes the socket rest
#: (:meth:`Client.rest`): a node that handles a read quickly reads again soon, fewer deliveries (or
#: confirms) a read, unless a smaller read rests too
REST_AFTER = 4
#: how long it rests (RabbitMQ keeps up to ``prefetch`` unacknowledged deliveries coming meanwhile)
REST_S = 0.001


#: the event types of a read of deliveries alone
_DELIVERIES_ONLY = {Delivery}


class AmqpClosed(ConnectionError):
    """The AMQP 0-9-1 connection (or one of its channels) was closed; the message says why."""


#: the bytes one socket read takes at most (into one buffer kept for the connection's reads)
READ_BUFFER = 64 * 1024


class Client(asyncio.BufferedProtocol):
    def __init__(self, connection: Connection, tls: TlsSession | None = None) -> None:
        self.amqp = connection
        self._tls = tls  #: TLS over the plain transport (the client's side), None for plain AMQP
        #: the deliveries of one read, in order (one call per read, not per delivery)
        self.on_deliveries: Callable[[list[Delivery]], None] = lambda deliveries: None
        #: the confirms of each ack or nack frame (or of every unconfirmed publish when the connection went)
        self.on_confirmed: OnConfirmed = confirm_each
        self.closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters: defaultdict[int, deque[asyncio.Future[base.Frame]]] = defaultdict(deque)
        self._transport: asyncio.Transport | None = None
        self._flushing: asyncio.Handle | None = None
        self._heartbeat: asyncio.TimerHandle | None = None
        self.rest_after, self.rest_s = REST_AFTER, REST_S  #: (rest_s 0: never rests)
        self._resting: asyncio.TimerHandle | None = None
        self._buffer = memoryview(bytearray(READ_BUFFER))  #: each socket read goes here (no bytes made per read)

    @classmethod
    async def open(cls, host: str, port: int, connection: Connection, context: ssl.SSLContext | None,
                   server_hostname: str | None, timeout: float = 10.0) -> "Client":
        """Connected, the handshake done and the virtual host open; AmqpClosed/OSError otherwise."""
        loop = asyncio.get_running_loop()
        tls = TlsSession(context, server_side=False, server_hostname=server_hostname) if context is not None else None
        async with asyncio.timeout(timeout):
            _, client = await loop.create_connection(lambda: cls(connection, tls), host, port)
            try:
                await client.opened
            except BaseException:
                client.abort()
                raise
        client.beat()
        return client

    # ------------------------------------------------------------------ sending
    async def call(self, channel: int, method: base.Frame) -> base.Frame:
        """Send a synchronous method and wait for its answer on the same channel."""
        if self.closed.done():
            raise AmqpClosed(self.closed.result())
        answer: asyncio.Future[base.Frame] = asyncio.get_running_loop().create_future()
        self._waiters[channel].append(answer)
        self.amqp.send(channel, method)
        self.flush_soon()
        return await answer

    async def channel(self, number: int, confirms: bool = False) -> None:
        await self.call(number, commands.Channel.Open())
        if confirms:
            await self.call(number, commands.Confirm.Select())

    def publish(self, channel: int, exchange: str, routing_key: str, properties: Any, body: bytes,
                on_confirm: Any) -> None:
        """basic.publish; ``on_confirm`` (a :data:`Confirm`, or a token of :attr:`on_confirmed`'s) comes back
        with its confirm."""
        if self.closed.done():
            self.on_confirmed((on_confirm,), False)
            return
        self.amqp.publish(channel, exchange, routing_key, properties, body, on_confirm)
        self.flush_soon()

    def publish_run(self, channel: int, exchange: str, routing_key: str, properties: Any, bodies: Sequence[bytes],
                    tokens: Sequence[Any]) -> None:
        """:meth:`publish` of each of ``bodies`` with the token at its place in ``tokens`` (one exchange,
        routing key and properties object for the run: :meth:`Connection.publish_run`)."""
        if self.closed.done():
            self.on_confirmed(tuple(tokens), False)
            return
        self.amqp.publish_run(channel, exchange, routing_key, properties, bodies, tokens)
        self.flush_soon()

    def ack(self, channel: int, delivery_tag: int, multiple: bool) -> None:
        self.amqp.ack(channel, delivery_tag, multiple)
        self.flush_soon()

    def reject(self, channel: int, delivery_tag: int) -> None:
        self.amqp.reject(channel, delivery_tag, requeue=False)
        self.flush_soon()

    def flush_soon(self) -> None:
        """:meth:`flush` after the input the next loop turn reads (as the broker's flush): one write
        carries the publishes of several turns' BI deliveries; with nothing more to read it comes then."""
        if self._flushing is None:
            self._flushing = asyncio.get_running_loop().call_soon(self._flush_after_input)

    def _flush_after_input(self) -> None:
        if self._flushing is not None:  # (None: flushed meanwhile)
            self._flushing = asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flushing = None
        transport = self._transport
        if transport is None or transport.is_closing() or (self._tls is not None and not self._tls.established):
            return  # (before the TLS handshake completed: AMQP starts once it has)
        out = self.amqp.take_output()
        if out:
            transport.write(out if self._tls is None else self._tls.send(out))
            self.amqp.sent(asyncio.get_running_loop().time())

    async def close(self, timeout: float = 5.0) -> None:
        """connection.close, its close-ok awaited (at most ``timeout``), then the socket closed."""
        if not self.closed.done() and self._transport is not None:
            self.amqp.close()
            self.flush()
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(self.closed)
            except TimeoutError:
                pass
        if self._tls is not None and self._tls.established and self._transport is not None \
                and not self._transport.is_closing():
            self._transport.write(self._tls.close())  # (close_notify, as asyncio's TLS transport gives)
        self.abort()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
        self._end("closed by the client")

    # ------------------------------------------------------------------ receiving
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if self._tls is not None:
            transport.write(self._tls.start().send)
            return  # (AMQP starts once the handshake completed)
        self._start()

    def _start(self) -> None:
        self.amqp.start(asyncio.get_running_loop().time())
        self.flush()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        """One socket read (into :attr:`_buffer`): decrypted from there, or copied once for plain AMQP."""
        self.data_received(self._buffer[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        plaintext = self._decrypt(data) if self._tls is not None else bytes(data)
        if not plaintext:
            return
        try:
            events = self.amqp.receive(plaintext, asyncio.get_running_loop().time())
        except ProtocolError as exc:
            self._end(str(exc))
            if self._transport is not None:
                self._transport.abort()
            return
        if events and set(map(type, events)) == _DELIVERIES_ONLY:  # (the usual read: handed on as it is)
            self._deliver(events)  # type: ignore[arg-type]
            self.flush()
            if len(events) >= self.rest_after:
                self.rest()
            return
        deliveries: list[Delivery] = []
        delivered = confirmed = 0
        for event in events:
            if type(event) is Delivery:  # (nearly every event: no match statement for it)
                deliveries.append(event)
                continue
            if deliveries:  # (in order: what came before this event first)
                delivered += len(deliveries)
                self._deliver(deliveries)
                deliveries = []
            if type(event) is Confirmed:
                confirmed += len(event.tokens)
            if not self.closed.done():
                self._dispatch(event)
        if deliveries:
            delivered += len(deliveries)
            self._deliver(deliveries)
        self.flush()
        if delivered >= self.rest_after or confirmed >= self.rest_after:
            self.rest()

    def rest(self) -> None:
        """Read nothing more for :attr:`rest_s` (none when 0): what RabbitMQ sends meanwhile waits in
        the socket (and TLS) buffers and comes in one read after."""
        transport = self._transport
        if self._resting is not None or not self.rest_s or transport is None or self.closed.done():
            return
        transport.pause_reading()
        self._resting = asyncio.get_running_loop().call_later(self.rest_s, self._rested)

    def _rested(self) -> None:
        self._resting = None
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def _decrypt(self, data: bytes | memoryview) -> bytes:
        """The plaintext of what the socket gave (b"" when none): handshake replies written, AMQP started
        once the handshake completed, the connection ended on a TLS failure (its alert written first) or
        the peer's close_notify."""
        assert self._tls is not None and self._transport is not None
        step = self._tls.receive(data)
        if step.send:
            self._transport.write(step.send)
        if step.error is not None:
            self._end(f"TLS: {step.error}")
            self._transport.abort()
            return b""
        if step.established:
            self._start()
        if step.closed:
            self._transport.close()
        return step.data

    def _deliver(self, deliveries: list[Delivery]) -> None:
        if not self.closed.done():  # (what came after a close is not handed on: RabbitMQ redelivers it)
            self.on_deliveries(deliveries)

    def _dispatch(self, event: Delivery | Confirmed | Reply | Closed) -> None:
        match event:
            case Delivery():
                self._deliver([event])
            case Confirmed(tokens=tokens, ack=ack):
                self.on_confirmed(tokens, ack)
            case Reply(channel=channel, method=method):
                if isinstance(method, commands.Connection.OpenOk):
                    if not self.opened.done():
                        self.opened.set_result(None)
                elif self._waiters[channel]:
                    waiter = self._waiters[channel].popleft()
                    if not waiter.done():
                        waiter.set_result(method)
            case Closed(channel=channel, code=code, text=text, unconfirmed=unconfirmed):
                if unconfirmed:
                    self.on_confirmed(unconfirmed, False)
                what = "connection" if channel == 0 else f"channel {channel}"
                self._end(f"the broker closed the {what}: {code} {text}")
                if self._transport is not None:
                    self.flush()  # (its close-ok)
                    self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(f"connection lost: {exc!r}" if exc else "connection closed")

    def _end(self, reason: str) -> None:
        """Everything waiting learns that the connection is gone (once)."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        if self._resting is not None:
            self._resting.cancel()
            self._resting = None
        if self.closed.done():
            return
        self.closed.set_result(reason)
        if not self.opened.done():
            self.opened.set_exception(AmqpClosed(reason))
        for waiters in self._waiters.values():
            while waiters:
                if not (waiter := waiters.popleft()).done():
                    waiter.set_exception(AmqpClosed(reason))
        if lost := self.amqp.lost():
            self.on_confirmed(lost, False)

    def beat(self) -> None:
        """Every half heartbeat interval: a heartbeat if the connection was quiet, or its end if the broker was."""
        self._heartbeat = None
        if self.closed.done() or not self.amqp.heartbeat_s:
            return
        loop = asyncio.get_running_loop()
        if (dead := self.amqp.tick(loop.time())) is not None:
            self._end(dead.text)
            if self._transport is not None:
                self._transport.abort()
            return
        self.flush()
        self._heartbeat = loop.call_later(self.amqp.heartbeat_s / 2, self.beat)


def confirm_each(tokens: Sequence[Any], ack: bool) -> None:
    """The default :attr:`Client.on_confirmed`: each token is a :data:`Confirm`, called with the outcome."""
    for on_confirm in tokens:
        on_confirm(ack)
