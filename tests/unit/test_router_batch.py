"""The broker core's batch call (:meth:`BrokerCore.publish_all`, the in-process door's way in): each
message of a batch gets exactly what :meth:`BrokerCore.publish` gives it alone (admission, the target's
check, expiry on arrival, routing, counts and log records), its refusal in its place instead of raised,
and the batch is stamped with one arrival time: one clock reading, as its messages arrived together."""
from __future__ import annotations

import io
import json
from collections.abc import Sequence

import pytest
from interchange.broker.addresses import AddressBook, SourceSpec, TargetSpec
from interchange.broker.admission import Admission, accelerator_available
from interchange.broker.engine import Rejected
from interchange.broker.observer import BrokerObserver
from interchange.broker.router import BrokerCore
from interchange.broker.ttl_policy import TtlPolicy
from interchange.broker.message_log import JsonLog
from interchange.ground.logfile import LogSettings
from interchange.testing.harness import denm

BRIDGE, TARGET, SOURCE, NOW = "bridge", "in", "all", 1_700_000_000_000
PATHS = [False, True] if accelerator_available() else [False]


class Core:
    """A core with one target (DENM only), one source taking all, its JSON log in memory and a counted clock."""

    def __init__(self, accelerated: bool, records: bool = True, sources: Sequence[SourceSpec] = ()) -> None:
        self.stream = io.StringIO()
        log = JsonLog("node.test", stream=self.stream, settings=LogSettings(level="debug", properties=records))
        log.boot_ms = 0
        self.log = log
        book = AddressBook()
        book.load([TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector="messageType = 'DENM'")],
                  [SourceSpec(address=SOURCE, consumers=frozenset({"consumer"})), *sources])
        self.clock_reads = 0
        self.core = BrokerCore(book, Admission(TtlPolicy(), accelerated=accelerated), BrokerObserver(log),
                               clock_ms=self._clock)
        self.publisher = self.core.attach_publisher(BRIDGE, TARGET)

    def _clock(self) -> int:
        self.clock_reads += 1
        return NOW

    def held(self) -> list[tuple[bytes, int, int | None]]:
        return [(bytes(m.raw), m.seq, m.expiry_ms) for m in self.core.sources[SOURCE].buffered()]

    def records(self) -> list[dict]:
        """The log's records without the write times (what two runs cannot share)."""
        self.log.hand_over()
        self.log._writer.close()  # flushes the writer thread
        return [{k: v for k, v in json.loads(line).items() if k not in ("timestamp", "timestampMs")}
                for line in self.stream.getvalue().splitlines()]

    def counts(self) -> tuple[int, int, int, int]:
        observer = self.core.observer
        return observer.received_count, observer.rejected_count, observer.expired_count, observer.routed_count


def batch() -> list[bytes]:
    """Routed; another type (the target refuses it); malformed; expired on arrival; routed twice (one section)."""
    expired = denm(body=b"\x01\x02old")
    expired.expiry_time = (NOW - 1000) / 1000  # absolute-expiry-time before the arrival
    return [denm(body=b"\x01\x02first").encode(), denm(messageType="IVIM").encode(), b"\x00\x53\x77\xff",
            expired.encode(), denm(body=b"\x01\x02second").encode(), denm(body=b"\x01\x02third").encode()]


def one_by_one(core: Core, raws: list[bytes]) -> list[object]:
    answers: list[object] = []
    for raw in raws:
        try:
            answers.append(core.core.publish(core.publisher, raw))
        except Rejected as exc:
            answers.append(exc)
    return answers


def described(answers: Sequence[object]) -> list[object]:
    return [(type(a).__name__, a.condition, a.description) if isinstance(a, Rejected) else a for a in answers]


@pytest.mark.parametrize("accelerated", PATHS)
def test_each_message_of_a_batch_gets_what_it_gets_alone(accelerated: bool) -> None:
    alone, batched = Core(accelerated), Core(accelerated)
    expected = one_by_one(alone, batch())
    answers = batched.core.publish_all(batched.publisher, batch())
    assert described(answers) == described(expected)
    assert [a is None for a in answers] == [True, False, False, True, True, True]
    assert "does not fit" in str(answers[1]) and "malformed" in str(answers[2])
    assert batched.held() == alone.held() and len(batched.held()) == 3
    assert batched.counts() == alone.counts() == (4, 2, 1, 3)
    assert batched.records() == alone.records()


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_batch_reads_the_clock_once(accelerated: bool) -> None:
    alone, batched = Core(accelerated), Core(accelerated)
    one_by_one(alone, batch())
    batched.core.publish_all(batched.publisher, batch())
    assert alone.clock_reads == len(batch()) and batched.clock_reads == 1


def test_an_empty_batch_routes_nothing() -> None:
    core = Core(False)
    assert core.core.publish_all(core.publisher, []) == [] and core.counts() == (0, 0, 0, 0)



def runs() -> list[bytes]:
    """Runs of one properties section (A A, B, A, C C), another type inside (refused), one expired on
    arrival in a run, one malformed, and a section no source takes (``unroutable``) twice."""
    expired = denm(body=b"old")
    expired.expiry_time = (NOW - 1000) / 1000
    a, c = (lambda body: denm(body=body).encode()), (lambda body: denm(body=body, causeCode=2).encode())
    nobody = denm(body=b"n", messageType="IVIM")  # (refused: the target takes DENM only)
    lonely = denm(body=b"l", causeCode=9)  # (the extra source below takes causeCode 1 or 2 only)
    return [a(b"1"), a(b"2"), nobody.encode(), a(b"3"), c(b"4"), c(b"5"), expired.encode(), a(b"6"),
            b"\x00\x53\x77\xff", lonely.encode(), lonely.encode(), c(b"7")]


@pytest.mark.parametrize("accelerated", PATHS)
@pytest.mark.parametrize("records", [False, True])
def test_runs_of_one_section_count_route_and_log_as_one_by_one(accelerated: bool, records: bool) -> None:
    """With message records off a run's ``received`` counts are added at once: the same counts (per
    type and publisher too), the same sources, numbers and records as each message alone."""
    sources = [SourceSpec(address="some", consumers=frozenset({"consumer"}), selector="causeCode < 3")]
    alone, batched = Core(accelerated, records, sources), Core(accelerated, records, sources)
    expected = one_by_one(alone, runs())
    answers = batched.core.publish_all(batched.publisher, runs())
    assert described(answers) == described(expected)
    assert batched.held() == alone.held() and len(batched.held()) == 9
    held = [(bytes(m.raw), m.seq) for m in batched.core.sources["some"].buffered()]
    assert held == [(bytes(m.raw), m.seq) for m in alone.core.sources["some"].buffered()] and len(held) == 7
    observer, reference = batched.core.observer, alone.core.observer
    assert batched.counts() == alone.counts() == (10, 2, 1, 9)
    assert observer.received_by == reference.received_by and sum(observer.received_by.values()) == 10
    assert observer.unroutable == reference.unroutable == 0
    assert batched.records() == alone.records()


@pytest.mark.parametrize("accelerated", PATHS)
def test_a_run_is_counted_once_while_records_are_off(accelerated: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of one properties object (the admission gives a repeated section the same dict) is counted
    once with message records off, not message by message."""
    core = Core(accelerated, records=False)
    core.core.publish_all(core.publisher, [denm(body=b"0").encode()])  # (its section read before: repeated)
    counted: list[int] = []
    observer = core.core.observer
    received_run = observer.received_run
    monkeypatch.setattr(observer, "received_run", lambda m, n: counted.append(n) or received_run(m, n))
    monkeypatch.setattr(observer, "received", lambda *_: counted.append(-1))
    answers = core.core.publish_all(core.publisher, [denm(body=b"%d" % i).encode() for i in range(5)])
    assert answers == [None] * 5 and len(core.held()) == 6
    assert counted == [5] and core.counts()[0] == 6


class RunLink:
    """A consumer's link with ``credit``, taking a run in one call as far as its credit goes (the engine's)."""

    selector = None
    source = None
    identity = "consumer"

    def __init__(self, credit: int) -> None:
        self.credit, self.got, self.runs = credit, [], []

    def can_send(self) -> bool:
        return self.credit > 0

    def send(self, message: object) -> None:
        assert self.credit > 0
        self.credit -= 1
        self.got.append(message)

    def send_run(self, messages: list) -> int:
        taken = messages[:self.credit]
        for message in taken:
            self.send(message)
        self.runs.append(len(taken))
        return len(taken)


@pytest.mark.parametrize("accelerated", PATHS)
@pytest.mark.parametrize("credit", [0, 1, 2, 10])
def test_a_batch_to_a_consumer_is_delivered_and_held_as_one_by_one(accelerated: bool, credit: int) -> None:
    """A consumer on the source: a batch's messages of one run reach it together, as far as its credit
    goes, the rest buffered in order; what it got, what waits, the counts and the log as one by one."""
    ends = []
    for together in (True, False):
        core = Core(accelerated)
        link = RunLink(credit)
        core.core.sources[SOURCE].add_link(link)  # type: ignore[arg-type]
        raws = batch() + [denm(body=b"\x01\x02fourth").encode(), denm(body=b"\x01\x02fifth").encode()]
        answers = core.core.publish_all(core.publisher, raws) if together else one_by_one(core, raws)
        ends.append((described(answers), [(bytes(m.raw), m.seq) for m in link.got], core.held(), core.counts(),
                     core.records()))
        if together:
            assert sum(link.runs) == max(min(credit, 5) - 1, 0)  # (the first message is timed: sent alone)
    assert ends[0] == ends[1]
    assert len(ends[0][1]) + len(ends[0][2]) == 5
