"""Durable messages in the broker core: what is stored, when it is released, what comes back.

A ``durable`` message is stored with the sources it was routed to; the publisher's ``accepted``
waits for the fsync. A source releases it when a consumer settles it or it is evicted (IP_032),
expires (IP_033) or its source is deleted; after a restart each source gets back, in order
(IP_128), the durable messages it still held within their TTL. Imported durable messages equal to
recovered ones are counted as ``duplicate_imports`` (at-least-once). While the store cannot
write, durable messages are refused before routing (``amqp:resource-limit-exceeded`` /
``amqp:internal-error``). The rules in full: docs/broker.md ("Durable messages").
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable

from interchange.broker.engine import Rejected, store_refusal
from interchange.broker.journal import StoredMessage
from interchange.broker.message import BrokerMessage
from interchange.broker.store import Commit, MessageStore

__all__ = ["Durability"]

#: Re-admits a recovered message's bytes: (raw, publisher, federated) -> BrokerMessage
Readmit = Callable[[bytes | bytearray, str, bool], BrokerMessage]


class Durability:
    """The durable messages of one broker process: what to store, release and give back."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._waiting: dict[str, list[BrokerMessage]] = defaultdict(list)  # recovered, for sources not there yet
        self.stored = 0  #: durable messages stored since start (on disk)
        self.recovered = 0  #: durable messages recovered at start
        self.unreadable: list[tuple[int, str]] = []  #: recovered records admission refuses now: (id, why)
        self._recovered_imports: dict[bytes, int | None] = {}  # digest -> expiry of imported messages recovered
        self.duplicate_imports = 0  #: imported again after a restart (the neighbour never saw them settled)
        self.refused = 0  #: durable messages refused because the store could not write

    def recover(self, stored: list[StoredMessage], readmit: Readmit) -> dict[str, int]:
        """Turn recovered records into messages waiting for their sources; count per address."""
        counts: dict[str, int] = {}
        for record in stored:
            try:
                message = readmit(record.raw, record.publisher, record.federated)
            except Rejected as exc:  # the rules changed since it was stored: it is not served
                self.unreadable.append((record.message_id, exc.description))
                for address in record.addresses:
                    self.store.remove(record.message_id, address)
                continue
            message.arrival_ms = record.arrival_ms
            message.expiry_ms = record.expiry_ms
            message.store_id = record.message_id
            message.holders = set(record.addresses)
            if record.federated:
                self._recovered_imports[_digest(record.raw)] = record.expiry_ms
            for address in record.addresses:
                self._waiting[address].append(message)
                counts[address] = counts.get(address, 0) + 1
        self.recovered = len(stored) - len(self.unreadable)
        return counts

    def store_live(self) -> int:
        """Durable messages the store still holds for some source (they come back after a restart)."""
        return self.store.live

    def is_duplicate_import(self, raw: bytes | bytearray) -> bool:
        """Whether an imported durable message was recovered from the store already (counted once)."""
        if not self._recovered_imports or self._recovered_imports.pop(_digest(raw), 0) == 0:
            return False
        self.duplicate_imports += 1
        return True

    def waiting_for(self, address: str) -> list[BrokerMessage]:
        """The recovered messages of source ``address`` (once: the source takes them now)."""
        return self._waiting.pop(address, [])

    def check_writable(self) -> None:
        """Raise :class:`Rejected` for a durable message while the store cannot write (before it is routed)."""
        fault = self.store.fault
        if fault is not None:
            self.refused += 1
            raise store_refusal(fault.reason, fault.full)

    def store_routed(self, message: BrokerMessage) -> Commit | None:
        """Store a routed durable message held by some source; None if none holds it (nothing to wait for)."""
        holders = message.holders
        if not holders:
            message.holders = None
            return None
        record = StoredMessage(message.raw, message.expiry_ms, message.arrival_ms, message.federated,
                               message.publisher, tuple(holders))
        commit = self.store.put(record)
        message.store_id = record.message_id
        commit.add(self._written, message)
        return commit

    def _written(self, message: BrokerMessage, ok: bool) -> None:
        """Counted once on disk; a routed message the store could not write is memory-only from now on."""
        if ok:
            self.stored += 1
        else:
            message.holders = None
            message.store_id = 0

    def release(self, message: BrokerMessage, address: str) -> None:
        """Source ``address`` is done with ``message`` (settled, evicted, expired, deleted)."""
        holders = message.holders
        if holders is None or address not in holders:
            return
        holders.discard(address)
        if message.store_id:
            self.store.remove(message.store_id, address)

    def purge(self, now_ms: int) -> int:
        """Drop recovered messages that expired before their source came back; reclaim store files."""
        dropped = 0
        for address in list(self._waiting):
            messages = self._waiting[address]
            keep = [m for m in messages if m.expiry_ms is None or m.expiry_ms > now_ms]
            for message in messages:
                if message.expiry_ms is not None and message.expiry_ms <= now_ms:
                    self.release(message, address)
                    dropped += 1
            if keep:
                self._waiting[address] = keep
            else:
                del self._waiting[address]
        if self._recovered_imports:
            self._recovered_imports = {d: e for d, e in self._recovered_imports.items() if e is None or e > now_ms}
        self.store.purge(now_ms)
        return dropped


def _digest(raw: bytes | bytearray) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()
