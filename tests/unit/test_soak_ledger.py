"""The federation soak's bookkeeping: lost within TTL, expired, duplicates, unexpected, latency."""
from __future__ import annotations

from interop_kit.soak_ledger import Ledger, SubscriptionSpec, percentile

S = 1_000_000_000  # ns per second
HAZARDS = SubscriptionSpec("hazards", 2, "c1", "messageType = 'DENM'", frozenset({"denm"}))
CAMS = SubscriptionSpec("cams", 1, "c2", "messageType = 'CAM'", frozenset({"cam"}))


def ledger_with(*published: tuple[int, str, int, int, bool]) -> Ledger:
    ledger = Ledger([HAZARDS, CAMS])
    for seq, stream, sent_s, ttl_s, accepted in published:
        ledger.publish(seq, stream, sent_s * S, ttl_s * S)
        ledger.settle(seq, accepted)
    return ledger


def test_lost_only_when_accepted_matching_and_still_valid() -> None:
    ledger = ledger_with((1, "denm", 10, 60, True), (2, "denm", 11, 60, True), (3, "denm", 12, 1, True),
                         (4, "denm", 13, 60, False), (5, "cam", 14, 60, True))
    ledger.receive("hazards", 1, 10 * S + 3_000_000)
    hazards, cams = ledger.report(drained_ns=40 * S)
    assert (hazards.published, hazards.accepted, hazards.delivered) == (4, 3, 1)
    assert hazards.lost == 1 and hazards.lost_seqs == [2]  # valid until 71 s, never received
    assert hazards.expired == 1  # seq 3 expired at 13 s: not a loss
    assert hazards.latency_p50_ms == 3.0
    assert cams.lost == 1 and cams.lost_seqs == [5]  # refused seq 4 is not the CAM subscription's either


def test_duplicates_and_unexpected_are_counted() -> None:
    ledger = ledger_with((1, "denm", 10, 60, True), (2, "cam", 10, 60, True))
    ledger.receive("hazards", 1, 10 * S + 1_000_000)
    ledger.receive("hazards", 1, 10 * S + 9_000_000)  # redelivered after a crash
    ledger.receive("hazards", 2, 10 * S + 1_000_000)  # a CAM: the selector should not have matched it
    hazards = ledger.report(drained_ns=20 * S)[0]
    assert (hazards.delivered, hazards.duplicates, hazards.unexpected, hazards.lost) == (1, 1, 1, 0)
    assert hazards.latency_p99_ms == 1.0  # the first arrival counts


def test_steady_latency_stops_at_the_first_fault() -> None:
    ledger = ledger_with(*((seq, "denm", seq, 600, True) for seq in range(1, 11)))
    for seq in range(1, 11):
        ledger.receive("hazards", seq, seq * S + (2_000_000 if seq <= 5 else 900_000_000))
    hazards = ledger.report(drained_ns=20 * S, steady_until_ns=6 * S)[0]
    assert hazards.steady_p99_ms == 2.0 and hazards.latency_p99_ms == 900.0


def test_percentile_by_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([5.0], 0.99) == 5.0
    assert percentile([float(v) for v in range(1, 101)], 0.5) in (50.0, 51.0)
    assert percentile([float(v) for v in range(1, 101)], 0.99) == 99.0
