"""The Basic Interface as an actor sees it: publish to a delivery's target, listen to a source.

One :class:`BiConnection` per endpoint (mutual TLS 1.3, SASL EXTERNAL: the actor's identity is its
certificate, IP_050) on the node's own AMQP client (:mod:`interchange.broker.client`).
:meth:`Publisher.publish` returns the broker's outcome (:class:`PublishOutcome`). A
:class:`Listener` iterates over a source's messages, each :class:`Received` unsettled until the
actor settles it, at most ``credit`` at a time (the flow control); a refused attach or a lost
connection ends the iteration with an ActorError. docs/actors.md ("The library").
"""
from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from proton import Message

from interchange.actor.errors import ActorError
from interchange.actor.properties import OutgoingMessage
from interchange.broker.client import RELEASE, ClientConnection, Outcome, ReceiverState, SenderState

__all__ = ["BiConnection", "Listener", "PublishOutcome", "Publisher", "Received"]

CHECK_S = 0.25
CONNECT_HINT = "is the node's AMQPS port reachable? your certificate must be of its trust chain"


@dataclass(frozen=True)
class PublishOutcome:
    """The broker's answer to one published message."""

    accepted: bool
    reason: str | None = None  #: why not: the broker's rejection (condition: description), or the link's loss

    @classmethod
    def of(cls, outcome: Outcome) -> PublishOutcome:
        return cls(outcome.accepted, outcome.error)

    def __str__(self) -> str:
        return "accepted" if self.accepted else f"not accepted: {self.reason}"


class BiConnection:
    """One AMQPS connection to a node's broker, as the actor."""

    def __init__(self, connection: ClientConnection, host: str, port: int) -> None:
        self.connection, self.host, self.port = connection, host, port

    @classmethod
    async def open(cls, host: str, port: int, context: ssl.SSLContext, node: str, container_id: str,
                   timeout_s: float = 10.0) -> BiConnection:
        try:
            connection = await ClientConnection.open(host, port, context, node, container_id, timeout=timeout_s)
        except ssl.SSLCertVerificationError as exc:
            raise ActorError(f"amqps://{host}:{port}: the node's certificate was refused: {exc.verify_message}",
                             f"it must name {node} and chain to trust_bundle") from None
        except (OSError, ConnectionError, TimeoutError, ssl.SSLError) as exc:
            raise ActorError(f"amqps://{host}:{port}: cannot connect: {str(exc) or type(exc).__name__}",
                             CONNECT_HINT) from None
        return cls(connection, host, port)

    @property
    def lost(self) -> bool:
        return self.connection.lost.done()

    async def close(self) -> None:
        await self.connection.close()

    def publisher(self, target: str) -> Publisher:
        return Publisher(self, self.connection.open_sender(target), target)

    def listener(self, source: str, *, credit: int = 100, selector: str | None = None) -> Listener:
        return Listener(self, source, credit, selector)


class Publisher:
    """A sender link to one target (a delivery's)."""

    def __init__(self, bi: BiConnection, link: SenderState, target: str) -> None:
        self.bi, self._link, self.target = bi, link, target

    @property
    def sent(self) -> int:
        return self._link.sent

    async def publish(self, message: OutgoingMessage | bytes) -> PublishOutcome:
        """Send one message (an encoded one as it is) and wait for the broker's outcome."""
        raw = message.encode() if isinstance(message, OutgoingMessage) else message
        return PublishOutcome.of(await self.bi.connection.publish(self._link, raw))


@dataclass
class Received:
    """One message from a source, unsettled until :meth:`accept`, :meth:`release` or :meth:`reject`."""

    raw: bytes
    properties: dict[str, Any]
    body: bytes
    ttl_ms: int | None
    durable: bool
    _settle: Callable[[str | None], None] = field(repr=False, default=lambda outcome: None)
    settled: str | None = None  #: "accepted", "released" or "rejected" once settled

    @classmethod
    def decode(cls, raw: bytes, settle: Callable[[str | None], None]) -> Received:
        message = Message()
        message.decode(raw)
        body = message.body
        if isinstance(body, memoryview):
            body = body.tobytes()
        elif isinstance(body, str):
            body = body.encode()
        elif not isinstance(body, bytes):
            body = repr(body).encode() if body is not None else b""
        ttl = round(message.ttl * 1000) if message.ttl else None
        return cls(raw, dict(message.properties or {}), body, ttl, bool(message.durable), settle)

    def _done(self, outcome: str | None, word: str) -> None:
        if self.settled is None:
            self.settled = word
            self._settle(outcome)

    def accept(self) -> None:
        """Done with it: the source forgets it."""
        self._done(None, "accepted")

    def release(self) -> None:
        """Not now: the source gives it out again."""
        self._done(RELEASE, "released")

    def reject(self, reason: str) -> None:
        """Unusable (``reason`` goes to the broker's log): the source forgets it."""
        self._done(reason or "rejected by the consumer", "rejected")


class Listener:
    """An async iterator over a source's messages (see the module docstring)."""

    def __init__(self, bi: BiConnection, source: str, credit: int, selector: str | None) -> None:
        self.bi, self.source, self.credit = bi, source, credit
        self._queue: asyncio.Queue[Received] = asyncio.Queue()
        self._arrival = asyncio.Event()
        self.received = 0
        self.undecodable = 0  #: messages rejected because they could not be decoded
        self._state: ReceiverState = bi.connection.open_deferred_receiver(source, self._arrived, selector, credit)

    def _arrived(self, raw: bytes, delivery: Any) -> None:
        def settle(outcome: str | None) -> None:
            self.bi.connection.settle(self._state, delivery, outcome)
        try:
            received = Received.decode(raw, settle)
        except Exception as exc:  # noqa: BLE001 - proton's decoder: one bad message must not stop the link
            self.undecodable += 1
            settle(f"not an AMQP message this client can decode: {exc}")
            return
        self._queue.put_nowait(received)
        self._arrival.set()

    @property
    def unsettled(self) -> int:
        return len(self._state.unsettled)

    def _ended(self) -> ActorError | None:
        state = self._state
        if state.closed:
            error = state.error or self.bi.connection.engine.remote_error or "the link was closed"
            return ActorError(f"source {self.source}: {error}",
                              "check the subscription's status and endpoint (interchange actor subscriptions)")
        if self.bi.lost:
            return ActorError(f"amqps://{self.bi.host}:{self.bi.port}: connection lost: "
                              f"{self.bi.connection.engine.remote_error or 'closed'}", CONNECT_HINT)
        return None

    def __aiter__(self) -> AsyncIterator[Received]:
        return self

    async def __anext__(self) -> Received:
        return await self.next()

    async def next(self, timeout_s: float | None = None) -> Received:
        """The next message; TimeoutError after ``timeout_s`` without one; ActorError when the
        link or connection ended (messages that came before are handed out first). A message
        leaves the queue only here, after the wait: a timeout never loses one."""
        async with asyncio.timeout(timeout_s):
            while self._queue.empty():
                if (ended := self._ended()) is not None:
                    raise ended
                self._arrival.clear()
                try:  # the link's end is a state, not an event of its own: looked at 4 times a second
                    async with asyncio.timeout(CHECK_S):
                        await self._arrival.wait()
                except TimeoutError:
                    pass
        self.received += 1
        return self._queue.get_nowait()
