"""What the broker tells operators: counters for metrics (IP_137) and events for the JSON log.

The hot path only increments integers here; the Prometheus exporter reads them when scraped,
and the message log (IP_009/010/119/120/121) is called only while it is switched on. Records an
audit needs to account for every message (:mod:`interchange.ground.logformat` version 2) are
written whatever the switches, and only cost when they happen: a rejected message (IP_016), one
dropped from a full source buffer (IP_032), one that expired undelivered (IP_033), one no source
took. Delivery records (``sent_message``) are written at settlement, with the consumer's outcome:
:meth:`BrokerObserver.sent` notes the departure on the link, :meth:`BrokerObserver.settled` writes.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Any, Protocol

from interchange.broker.memory import MemoryBudget
from interchange.broker.message import BrokerMessage
from interchange.ground.timing import now_ms

#: One message in LATENCY_SAMPLE is timed (timing every message would cost more than routing it).
LATENCY_SAMPLE = 64
#: Routing-latency histogram bucket bounds in seconds (IP_012: < 30 ms).
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.03, 0.1, 1.0)


class MessageLog(Protocol):
    """Sink for message and connection events (see :mod:`interchange.ground.logformat`)."""

    @property
    def messages_on(self) -> bool:
        """True while message events are logged (read before building a message record)."""

    def message(self, event: str, message: BrokerMessage, address: str | None, **fields: object) -> None:
        """A message record; ``fields`` are the event's own (consumer, outcome, reason, ...)."""

    def rejected(self, identity: str, address: str, raw: bytes | bytearray, reason: str, seq: int,
                 federated: bool = False, message: BrokerMessage | None = None) -> None: ...

    def event(self, level: str, event: str, fields: dict) -> None: ...


class DeliveryLink(Protocol):
    """What the observer reads of a consumer link (implemented by the engine's ConsumerLinkState)."""

    @property
    def identity(self) -> str: ...

    address: str | None
    #: delivery -> (departure ms, attempt), for deliveries sent while message logging was on
    departures: dict[Any, tuple[int, int]]
    unsettled: dict[Any, BrokerMessage]


class BrokerObserver:
    """Counters and log hooks of one broker process."""

    def __init__(self, log: MessageLog | None = None) -> None:
        self.log = log
        self.received_count = 0
        self.rejected_count = 0
        self.routed_count = 0
        self.unroutable = 0
        self.expired_count = 0
        self.dropped_count = 0
        #: imported messages dropped by loop prevention (multi-hop federation), per reason
        self.hop_dropped_count: dict[str, int] = {"loop": 0, "hop_limit": 0}
        #: second copies of imported messages kept from a source (multi-hop route changes)
        self.duplicate_dropped_count = 0
        self.latency_counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        #: accepted messages per (messageType, publisher: actor or neighbour, imported): the dashboards'
        #: traffic per type and peer; bounded by the profile's types and the node's peers
        self.received_by: dict[tuple[object, str, bool], int] = {}

    def received(self, message: BrokerMessage, address: str) -> None:
        self.received_run(message, 1)
        log = self.log
        if log is not None and log.messages_on:
            log.message("received_message", message, address)

    def received_run(self, message: BrokerMessage, count: int) -> None:
        """:meth:`received` for ``count`` messages of ``message``'s type, publisher and origin, counted
        at once: only while message records are off (:meth:`records_received` False), when
        :meth:`received` would write nothing else."""
        self.received_count += count
        key = (message.properties.get("messageType"), message.publisher, message.federated)
        by = self.received_by
        by[key] = by.get(key, 0) + count

    def records_received(self) -> bool:
        """Whether :meth:`received` writes a record per message now (message logging on)."""
        log = self.log
        return log is not None and log.messages_on

    # ------------------------------------------------------------ deliveries (IP_010)
    def sent(self, link: DeliveryLink, message: BrokerMessage, delivery: object | None) -> None:
        """A message handed to a consumer (called only while message logging is on).

        ``delivery`` is None on a pre-settled link: the record is written now. Otherwise the
        departure is noted on the link and written by :meth:`settled` or :meth:`link_lost`.
        """
        now = now_ms()
        address = link.address
        redeliveries = message.redeliveries
        attempt = (redeliveries.get(address or "", 0) if redeliveries else 0) + 1
        if delivery is None:
            self._delivery_record(link, message, now, attempt, now, "presettled")
        else:
            link.departures[delivery] = (now, attempt)

    def settled(self, link: DeliveryLink, message: BrokerMessage, delivery: object, outcome: str) -> None:
        """The consumer settled a delivery with ``outcome`` (a :data:`interchange.ground.logformat.OUTCOMES` value)."""
        departure = link.departures.pop(delivery, None)
        if departure is not None:
            self._delivery_record(link, message, departure[0], departure[1], now_ms(), outcome)

    def link_lost(self, link: DeliveryLink) -> None:
        """The link went away with unsettled deliveries (they go back to their source)."""
        now = now_ms()
        departures = link.departures
        for delivery, message in link.unsettled.items():
            departure = departures.pop(delivery, None)
            if departure is not None:
                self._delivery_record(link, message, departure[0], departure[1], now, "link_lost")
        departures.clear()

    def _delivery_record(self, link: DeliveryLink, message: BrokerMessage, departure_ms: int, attempt: int,
                         settled_ms: int, outcome: str) -> None:
        log = self.log
        if log is not None and log.messages_on:
            log.message("sent_message", message, link.address, identity=link.identity, consumer=link.identity,
                        source=link.address, attempt=attempt, departureMs=departure_ms, settledMs=settled_ms,
                        outcome=outcome)

    # ------------------------------------------------------------ links
    def link_attached(self, role: str, identity: str, address: str, selector: str | None) -> None:
        if self.log is not None:
            self.log.event("info", "link_attach", {"role": role, "identity": identity, "address": address,
                                                   "selector": selector})

    def link_detached(self, role: str, identity: str, address: str) -> None:
        if self.log is not None:
            self.log.event("info", "link_detach", {"role": role, "identity": identity, "address": address})

    # ------------------------------------------------------------ messages an audit must account for
    def rejected(self, identity: str, address: str, raw: bytes | bytearray, reason: str, seq: int,
                 federated: bool = False, message: BrokerMessage | None = None) -> None:
        """IP_016: a malformed message is dropped and the event logged (always)."""
        self.rejected_count += 1
        if self.log is not None:
            self.log.rejected(identity, address, raw, reason, seq, federated, message)

    def expired_on_arrival(self, message: BrokerMessage, address: str) -> None:
        """IP_033: the message had expired when it arrived; it goes nowhere."""
        self.expired_count += 1
        if self.log is not None:
            self.log.message("expired_message", message, address, source=None)

    def dropped(self, message: BrokerMessage, source: str, reason: str) -> None:
        """``message`` was lost undelivered from ``source``: a full buffer evicted it (its oldest,
        IP_032: ``buffer_full``), the node's memory budget evicted it (``node_memory``), or the source
        was deleted with it buffered (``source_deleted``)."""
        self.dropped_count += 1
        if self.log is not None:
            self.log.message("dropped_message", message, source, source=source, reason=reason)

    def budget_enforced(self, evicted: int, before: int, budget: MemoryBudget) -> None:
        """The node's memory budget evicted ``evicted`` messages (each already logged as dropped,
        ``node_memory``): one ``memory_budget`` record per episode, so operators see the node is full."""
        if self.log is not None:
            self.log.event("warning", "memory_budget", {"evicted": evicted, "before_bytes": before,
                                                        "after_bytes": budget.used, "limit_bytes": budget.limit,
                                                        "evicted_total": budget.evicted,
                                                        "episodes": budget.episodes})

    def hop_dropped(self, message: BrokerMessage, address: str, reason: str, trace: tuple[str, ...]) -> None:
        """An imported message was dropped by loop prevention (IP_109): its trace names this
        interchange (``loop``) or it went over its hop limit (``hop_limit``)."""
        self.hop_dropped_count[reason] = self.hop_dropped_count.get(reason, 0) + 1
        if self.log is not None:
            self.log.message("dropped_message", message, address, source=None, reason=reason, trace=list(trace))

    def duplicate_dropped(self, message: BrokerMessage, source: str) -> None:
        """Source ``source`` got the imported ``message``'s bare message over another route lately
        (multi-hop make-before-break, :mod:`interchange.broker.import_duplicates`): not offered again."""
        self.duplicate_dropped_count += 1
        if self.log is not None:
            self.log.message("dropped_message", message, source, source=source, reason="duplicate")

    def expired_in(self, message: BrokerMessage, source: str) -> None:
        """IP_033: ``message`` expired in ``source`` before a consumer took it."""
        if self.log is not None:
            self.log.message("expired_message", message, source, source=source)

    def expired(self, count: int) -> None:
        self.expired_count += count

    def routed(self, sources: int, message: BrokerMessage, address: str) -> None:
        if sources:
            self.routed_count += 1
        else:
            self.unroutable += 1
            if self.log is not None:
                self.log.message("unroutable_message", message, address)

    def routing_latency(self, seconds: float) -> None:
        """One sampled routing time: from the complete message in hand to its availability on
        every source it goes to (IP_012)."""
        self.latency_counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum += seconds
