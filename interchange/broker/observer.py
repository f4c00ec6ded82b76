"""What the broker tells operators: counters for metrics (IP_137) and events for the JSON log.

The hot path only increments integers here; the Prometheus exporter reads them when scraped,
and the message log (IP_009/010/119/120/121) is called only while it is switched on.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Protocol

from interchange.broker.message import BrokerMessage
from interchange.timing import now_ms

#: One message in LATENCY_SAMPLE is timed (timing every message would cost more than routing it).
LATENCY_SAMPLE = 64
#: Routing-latency histogram bucket bounds in seconds (IP_012: < 30 ms).
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.03, 0.1, 1.0)


class MessageLog(Protocol):
    """Sink for message and connection events (see :mod:`interchange.logformat`)."""

    @property
    def messages_on(self) -> bool:
        """True while message events are logged (read before building a message record)."""

    def message(self, event: str, message: BrokerMessage, address: str, departure_ms: int | None = None,
                identity: str | None = None) -> None: ...

    def rejected(self, identity: str, address: str, raw: bytes | bytearray, reason: str) -> None: ...

    def event(self, level: str, event: str, fields: dict) -> None: ...


class BrokerObserver:
    """Counters and log hooks of one broker process."""

    def __init__(self, log: MessageLog | None = None) -> None:
        self.log = log
        self.received_count = 0
        self.rejected_count = 0
        self.routed_count = 0
        self.unroutable = 0
        self.expired_count = 0
        self.latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0

    def received(self, message: BrokerMessage, address: str) -> None:
        self.received_count += 1
        log = self.log
        if log is not None and log.messages_on:
            log.message("received_message", message, address)

    def sent(self, message: BrokerMessage, address: str | None, identity: str) -> None:
        """IP_010: departure timestamp of a message handed to a consumer."""
        log = self.log
        if log is not None and log.messages_on:
            log.message("sent_message", message, address or "", departure_ms=now_ms(),
                        identity=identity)

    def link_attached(self, role: str, identity: str, address: str, selector: str | None) -> None:
        if self.log is not None:
            self.log.event("info", "link_attach", {"role": role, "identity": identity, "address": address,
                                                   "selector": selector})

    def link_detached(self, role: str, identity: str, address: str) -> None:
        if self.log is not None:
            self.log.event("info", "link_detach", {"role": role, "identity": identity, "address": address})

    def rejected(self, identity: str, address: str, raw: bytes | bytearray, reason: str) -> None:
        """IP_016: a malformed message is dropped and the event logged."""
        self.rejected_count += 1
        if self.log is not None:
            self.log.rejected(identity, address, raw, reason)

    def expired(self, count: int) -> None:
        self.expired_count += count

    def routed(self, sources: int) -> None:
        if sources:
            self.routed_count += 1
        else:
            self.unroutable += 1

    def routing_latency(self, seconds: float) -> None:
        """One sampled routing time: from the complete message in hand to its availability on
        every source it goes to (IP_012)."""
        self.latency_counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
