"""The bridge's publish path into the Basic Interface: a bounded queue, drained into the sender link
as the broker's credit allows, once per event-loop turn (every payload of one TCPStreaming read goes
out in one write), and what becomes of each message.

- refused for good, counted and reported (``on_refused``): larger than the broker's
  max-message-size (AMQP 1.0 2.7.3, checked before sending) or ``rejected``;
- retried in order on the next link: no outcome, ``released`` or ``modified``; at most
  :data:`MAX_ATTEMPTS` sends and not after its TTL.

:class:`MessageEncoder` makes the AMQP bytes. Why: docs/tlex-bridge.md ("The publish path").
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from proton import Data, Described, ulong

from interchange.bridges.tlex.publication import BiMessage
from interchange.broker.client import Outcome

QUEUE_LIMIT = 50_000
MAX_ATTEMPTS = 3  #: sends of one message at most (the first and two after a lost link)

#: (message, reason) of a message refused for good
RefusedSink = Callable[[BiMessage, str], None]


class Link(Protocol):
    """What the publish path needs of the AMQP connection (:class:`~interchange.broker.client.ClientConnection`)."""

    def flush(self) -> None: ...


class Sender(Protocol):
    """The sender link as the publish path reads it: :class:`~interchange.broker.client.SenderState`,
    or the broker's in-process door (:class:`~.door.DoorSender`)."""

    @property
    def credit(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def max_message_size(self) -> int | None: ...


class Engine(Protocol):
    #: ``state`` is the :class:`Sender` given to :meth:`Outbound.attach` with this engine (its own kind)
    def send(self, state: Any, message: bytes, on_outcome: Callable[[Outcome], None] | None = None) -> bool: ...


class Tally(Protocol):
    """Per-controller counting (:class:`~.bridge.BridgeCounters`)."""

    def published(self, tlc: str) -> None: ...
    def queue_dropped(self, tlc: str) -> None: ...


class Outbound:
    """The queue, the sender and the fate of each message (see the module docstring)."""

    def __init__(self, tally: Tally, on_refused: RefusedSink, now_ms: Callable[[], int],
                 limit: int = QUEUE_LIMIT) -> None:
        self._tally, self._on_refused, self._now_ms, self._limit = tally, on_refused, now_ms, limit
        self.queue: deque[tuple[BiMessage, int]] = deque()  #: (message, sends so far)
        self._encoder = MessageEncoder()
        self._link: Link | None = None
        self._engine: Engine | None = None
        self._sender: Sender | None = None
        self._retry: list[tuple[BiMessage, int, str]] = []
        self.retried = 0

    def attach(self, link: Link, engine: Engine, sender: Sender) -> None:
        self._link, self._engine, self._sender = link, engine, sender

    def detach(self) -> None:
        """The connection is gone (its messages in flight have had their outcomes): what is to be
        sent again waits at the head of the queue for the next one."""
        self._link = self._engine = self._sender = None
        self._requeue()

    @property
    def max_message_size(self) -> int | None:
        return self._sender.max_message_size if self._sender is not None else None

    def offer(self, message: BiMessage) -> bool:
        """Queue a message (False: refused at once, too large for the broker's last known limit)."""
        limit = self.max_message_size
        if limit is not None and self._encoder.size(message) > limit:
            self._on_refused(message, _too_large(self._encoder.size(message), limit))
            return False
        if len(self.queue) >= self._limit:
            dropped, _ = self.queue.popleft()
            self._tally.queue_dropped(dropped.tlc)
        self.queue.append((message, 0))
        return True

    def withdraw(self, tlc: str, kind: str) -> list[BiMessage]:
        """Take the queued messages of controller ``tlc`` and type ``kind`` out of the queue, in place
        (a drain in progress goes on with what is left), and return them."""
        taken = [message for message, _ in self.queue if message.tlc == tlc and message.kind == kind]
        if taken:
            kept = [entry for entry in self.queue if not (entry[0].tlc == tlc and entry[0].kind == kind)]
            self.queue.clear()
            self.queue.extend(kept)
        return taken

    def drain(self) -> None:
        """Send what the credit allows; the retried ones first."""
        self._requeue()
        link, engine, sender = self._link, self._engine, self._sender
        if link is None or engine is None or sender is None or sender.closed:
            return
        limit, queue, encode = sender.max_message_size, self.queue, self._encoder.encode
        while queue and sender.credit > 0:
            message, sends = queue.popleft()
            data = encode(message)
            if limit is not None and len(data) > limit:
                self._on_refused(message, _too_large(len(data), limit))
                continue
            engine.send(sender, data, partial(self._outcome, message, sends + 1))
            self._tally.published(message.tlc)
        link.flush()

    def _outcome(self, message: BiMessage, sends: int, outcome: Outcome) -> None:
        if outcome.accepted:
            return
        error = outcome.error or "not accepted"
        if error.startswith("rejected"):
            self._on_refused(message, f"the broker refused it: {error}")
        else:  # lost with its link or connection, released, modified: transient
            self._retry.append((message, sends, error))

    def _requeue(self) -> None:
        """Messages to send again go back to the head of the queue, in the order they were sent."""
        if not self._retry:
            return
        retry, self._retry = self._retry, []
        now = self._now_ms()
        again: list[tuple[BiMessage, int]] = []
        for message, sends, error in retry:
            if sends >= MAX_ATTEMPTS:
                self._on_refused(message, f"not accepted after {sends} sends: {error}")
            elif message.made_ms and now - message.made_ms > message.ttl_ms:
                self._on_refused(message, f"expired ({message.ttl_ms} ms TTL) before it could be sent again: {error}")
            else:
                again.append((message, sends))
        self.retried += len(again)
        self.queue.extendleft(reversed(again))


def _too_large(size: int, limit: int) -> str:
    return f"a BI message of {size} bytes: the broker takes at most {limit} (its max-message-size)"


class MessageEncoder:
    """BI messages as AMQP 1.0 bytes: header (TTL in ms), application-properties, one data section
    (the payload unchanged). A controller's properties are the same for every payload of a kind, so
    their section is encoded once (proton's codec) and reused: ~2 us per message instead of ~55 us
    for a full ``proton.Message.encode``; ``tests/unit/test_tlex_bridge_parts.py`` checks both give the same message."""

    def __init__(self) -> None:
        self._sections: dict[tuple[str, str], bytes] = {}

    def _section(self, message: BiMessage) -> bytes:
        key = (message.tlc, message.kind)
        section = self._sections.get(key)
        if section is None:
            data = Data()
            data.put_object(Described(ulong(_APPLICATION_PROPERTIES), dict(message.properties)))  # type: ignore[arg-type]
            section = self._sections[key] = bytes(data.encode())
        return section

    def encode(self, message: BiMessage) -> bytes:
        section = self._section(message)
        body = message.body
        size = bytes([0xA0, len(body)]) if len(body) < 256 else b"\xb0" + len(body).to_bytes(4, "big")
        return _HEADER_TTL + message.ttl_ms.to_bytes(4, "big") + section + _DATA + size + body

    def size(self, message: BiMessage) -> int:
        """len(encode(message)), without building it."""
        body = len(message.body)
        return len(_HEADER_TTL) + 4 + len(self._section(message)) + len(_DATA) + (2 if body < 256 else 5) + body


#: header section: list8 of 3 fields, durable and priority null, ttl as uint (AMQP 1.0 3.2.1)
_HEADER_TTL = bytes.fromhex("005370" "c00803" "4040" "70")
_APPLICATION_PROPERTIES = 0x74
_DATA = bytes.fromhex("005375")

__all__ = ["MAX_ATTEMPTS", "QUEUE_LIMIT", "MessageEncoder", "Outbound"]
