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

    def __init__(self, accelerated: bool) -> None:
        self.stream = io.StringIO()
        log = JsonLog("node.test", stream=self.stream, settings=LogSettings(level="debug", properties=True))
        log.boot_ms = 0
        self.log = log
        book = AddressBook()
        book.load([TargetSpec(address=TARGET, publishers=frozenset({BRIDGE}), selector="messageType = 'DENM'")],
                  [SourceSpec(address=SOURCE, consumers=frozenset({"consumer"}))])
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

