"""What the audit report shows: small, already aggregated data (no Spark, no pandas).

:mod:`spark.report` fills a :class:`ReportData` from Spark aggregations (only these small results
reach the driver); :mod:`spark.report_render` turns it into one HTML page. Times are epoch ms (UTC).
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: IP_012: a broker routes a message (< 500 KB) from target to source in under 30 ms.
LATENCY_LIMIT_MS = 30

#: How many of the latest validate runs the history shows.
HISTORY_RUNS = 20
#: How many findings of each rule the page lists (all of them are in the CSV beside it).
FINDINGS_INLINE = 20
#: The order findings are shown in: what breaks a "shall" first.
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


def severity_rank(severity: str) -> int:
    return SEVERITY_RANK.get(severity, len(SEVERITY_RANK))

#: Time buckets the charts may use, smallest first; the report picks the first giving <= 60 buckets.
BUCKETS_MS = (1_000, 10_000, 60_000, 300_000, 900_000, 3_600_000, 21_600_000, 86_400_000)


def bucket_for(span_ms: int, most: int = 60) -> int:
    """The smallest bucket of :data:`BUCKETS_MS` that cuts ``span_ms`` into at most ``most`` parts."""
    for bucket in BUCKETS_MS:
        if span_ms // bucket < most:
            return bucket
    return BUCKETS_MS[-1]


@dataclass(frozen=True)
class Series:
    """Values per time bucket and key (e.g. messages per minute and messageType)."""

    bucket_ms: int
    points: dict[str, dict[int, float]] = field(default_factory=dict)  #: key -> bucket start -> value

    @property
    def empty(self) -> bool:
        return not any(self.points.values())


@dataclass(frozen=True)
class Count:
    """One row of a ranked table: what (one or more labels) and how many."""

    labels: tuple[str, ...]
    count: int


@dataclass(frozen=True)
class Latency:
    """Arrival-to-departure time of the deliveries of one messageType (or "all")."""

    message_type: str
    deliveries: int
    p50: float
    p90: float
    p99: float
    max: float
    over_limit: int  #: deliveries of LATENCY_LIMIT_MS or more (IP_012: "in <30ms")

    @property
    def over_share(self) -> float:
        return self.over_limit / self.deliveries if self.deliveries else 0.0


@dataclass(frozen=True)
class RuleCount:
    rule: str
    check: str
    severity: str
    requirement: str
    count: int


@dataclass(frozen=True)
class FindingRow:
    """One finding as the drill-down lists it."""

    rule: str
    check: str
    severity: str
    message_id: str | None
    node: str | None
    publisher: str | None
    at_ms: int | None
    observed: str | None
    expected: str | None


@dataclass(frozen=True)
class Party:
    """A neighbour (what it sent us) or a consumer (what we delivered to it)."""

    kind: str  #: "neighbour" or "consumer"
    name: str
    received: int  #: messages received from the neighbour (0 for a consumer)
    delivered: int  #: deliveries of those messages (to anyone) / to the consumer
    p50: float | None
    p99: float | None
    over_limit: int  #: deliveries of LATENCY_LIMIT_MS or more
    findings: int  #: findings of the latest run naming it (publisher / consumer)


@dataclass(frozen=True)
class Change:
    """A (rule, check) whose findings differ between the previous validate run and the latest."""

    rule: str
    check: str
    before: int
    after: int

    @property
    def delta(self) -> int:
        return self.after - self.before


@dataclass(frozen=True)
class RunMetrics:
    """One validate run of the history (``rule_metrics``): violations and checked per (rule, check)."""

    run_id: str
    run_ms: int
    input: str
    violations: dict[tuple[str, str], int]
    checked: dict[tuple[str, str], int]

    @property
    def total(self) -> int:
        return sum(self.violations.values())


@dataclass(frozen=True)
class Offender:
    publisher: str
    violations: int
    rules: tuple[str, ...]


@dataclass(frozen=True)
class StatusChange:
    """One status of an outgoing subscription (ii_subscription_status), from ``at_ms`` on."""

    neighbour: str
    selector: str
    at_ms: int
    status: str
    error: str | None = None


@dataclass(frozen=True)
class Subscription:
    """A subscription as last logged: ours at a neighbour (outgoing) or a neighbour's at us (incoming)."""

    direction: str
    neighbour: str
    selector: str
    status: str
    last_ms: int
    changes: int
    error: str | None = None


@dataclass
class ReportData:
    """Everything the report shows; empty parts are said to be empty, never left out silently."""

    inputs: list[str]
    generated_ms: int
    first_ms: int | None = None
    last_ms: int | None = None
    nodes: list[str] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)  #: event -> records
    corrupt_lines: int | None = None  #: None when unknown (raw logs read directly)
    volumes: Series = field(default_factory=lambda: Series(60_000))  #: received per messageType
    publishers: list[Count] = field(default_factory=list)  #: (publisher CN, publisherId)
    neighbours: list[Count] = field(default_factory=list)  #: federated messages per neighbour
    per_node: list[Count] = field(default_factory=list)
    latency: list[Latency] = field(default_factory=list)
    latency_series: Series = field(default_factory=lambda: Series(60_000))  #: p50/p99 per bucket
    violations_run: str | None = None  #: None: no validate run found
    violations: list[RuleCount] = field(default_factory=list)
    offenders: list[Offender] = field(default_factory=list)
    history: list[RunMetrics] = field(default_factory=list)  #: validate runs, oldest first (the last HISTORY_RUNS)
    losses: list[Count] = field(default_factory=list)  #: (event, source/target, reason, messageType)
    loss_series: Series = field(default_factory=lambda: Series(60_000))  #: per event
    rejections: list[Count] = field(default_factory=list)  #: (reason,)
    neighbour_counts: list[tuple[int, int]] = field(default_factory=list)  #: (at_ms, neighbours known)
    status_changes: list[StatusChange] = field(default_factory=list)
    subscriptions: list[Subscription] = field(default_factory=list)
    federation_events: list[Count] = field(default_factory=list)  #: (event, level)
    period: tuple[int | None, int | None] = (None, None)  #: --from / --until (epoch ms), None: open
    findings: dict[tuple[str, str], list[FindingRow]] = field(default_factory=dict)  #: the first of each (rule, check)
    findings_csv: str | None = None  #: the CSV of every finding of the run, beside the page (its name)
    findings_total: int = 0
    parties: list[Party] = field(default_factory=list)
    party_findings: dict[tuple[str, str], int] = field(default_factory=dict)  #: ("publisher"|"consumer", CN) -> findings
    previous_run: str | None = None  #: the validate run the changes are against
    changes: list[Change] = field(default_factory=list)
