"""The federation soak's bookkeeping, sans I/O: what was published, accepted and received,
and the per-subscription report (published, accepted, delivered, lost within TTL, duplicates,
latency p50/p99 across one federation hop).

A message is *lost* when its publisher's interchange accepted it, a subscription's selector
matches it, it was still valid (within its TTL) when the run's drain period ended, and the
subscription's consumer never received it. An accepted message that expired undelivered is
counted apart (``expired``): with durable messages and TTLs longer than any outage in the run
there should be none. A message received more than once is a duplicate (at-least-once
delivery after a crash may produce them; they are counted, never hidden).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Ledger", "Published", "StreamSpec", "SubscriptionReport", "SubscriptionSpec", "percentile"]


@dataclass(frozen=True)
class StreamSpec:
    """One publication of the soak's publisher: its messages' type, properties and capability."""

    name: str
    message_type: str
    properties: dict[str, Any]
    capability: dict[str, Any]
    share: float  #: this stream's share of the published messages
    body_bytes: int


@dataclass(frozen=True)
class SubscriptionSpec:
    """A consumer's subscription at one interchange: its selector and which streams it matches."""

    name: str
    node: int  #: index into the federation's nodes (0 = the publisher's interchange)
    consumer: str  #: the consumer's certificate CN
    selector: str
    streams: frozenset[str]


@dataclass
class Published:
    seq: int
    stream: str
    sent_ns: int
    expiry_ns: int
    accepted: bool = False


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by nearest rank, None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class SubscriptionReport:
    name: str
    node: int
    selector: str
    published: int
    accepted: int
    delivered: int
    lost: int
    expired: int
    duplicates: int
    unexpected: int  #: received messages the selector should not have matched
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    steady_p50_ms: float | None  #: latency of the messages sent before the first fault
    steady_p99_ms: float | None
    lost_seqs: list[int] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "lost_seqs"} | {"lost_examples": self.lost_seqs[:10]}


class Ledger:
    """Published and received messages; thread-safe use is the caller's (one lock around calls)."""

    def __init__(self, subscriptions: Iterable[SubscriptionSpec]) -> None:
        self.subscriptions = list(subscriptions)
        self.published: dict[int, Published] = {}
        self.received: dict[str, dict[int, list[int]]] = {s.name: {} for s in self.subscriptions}

    def publish(self, seq: int, stream: str, sent_ns: int, ttl_ns: int) -> Published:
        record = Published(seq, stream, sent_ns, sent_ns + ttl_ns)
        self.published[seq] = record
        return record

    def settle(self, seq: int, accepted: bool) -> None:
        self.published[seq].accepted = accepted

    def receive(self, subscription: str, seq: int, received_ns: int) -> None:
        self.received[subscription].setdefault(seq, []).append(received_ns)

    def report(self, drained_ns: int, steady_until_ns: int | None = None) -> list[SubscriptionReport]:
        """One report per subscription; messages still valid at ``drained_ns`` must have arrived.
        The steady latencies are of messages sent before ``steady_until_ns`` (the first fault)."""
        return [self._one(spec, drained_ns, steady_until_ns) for spec in self.subscriptions]

    def _one(self, spec: SubscriptionSpec, drained_ns: int, steady_until_ns: int | None) -> SubscriptionReport:
        matching = [p for p in self.published.values() if p.stream in spec.streams]
        got = self.received[spec.name]
        accepted = [p for p in matching if p.accepted]
        missing = [p for p in accepted if p.seq not in got]
        lost = sorted(p.seq for p in missing if p.expiry_ns > drained_ns)
        latencies = [(got[p.seq][0] - p.sent_ns) / 1e6 for p in accepted if p.seq in got]
        steady = [(got[p.seq][0] - p.sent_ns) / 1e6 for p in accepted if p.seq in got
                  and (steady_until_ns is None or p.sent_ns < steady_until_ns)]
        expected = {p.seq for p in matching}
        return SubscriptionReport(
            name=spec.name, node=spec.node, selector=spec.selector, published=len(matching), accepted=len(accepted),
            delivered=sum(1 for p in accepted if p.seq in got), lost=len(lost), expired=len(missing) - len(lost),
            duplicates=sum(len(times) - 1 for times in got.values()),
            unexpected=sum(1 for seq in got if seq not in expected),
            latency_p50_ms=percentile(latencies, 0.5), latency_p99_ms=percentile(latencies, 0.99),
            steady_p50_ms=percentile(steady, 0.5), steady_p99_ms=percentile(steady, 0.99), lost_seqs=lost)


def format_table(rows: list[dict[str, Any]], columns: list[str], fmt: Callable[[Any], str] = str) -> list[str]:
    """A plain-text table (the soak script's report)."""
    cells = [columns] + [[fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
