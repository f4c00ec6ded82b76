"""NackBackoff (interchange/bridges/if2/backoff.py), sans-I/O with the time passed in: a nacked
export's release is held from ~10 ms growing to 1 s per round of nacks, the copies nacked in the same
round share one hold, and a confirm ends it. Broken variants (mutants) show each check can fail."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from interchange.bridges.if2.backoff import NackBackoff


@dataclass
class ReleasedAtOnce(NackBackoff):
    """Mutant: no back-off (the tight publish-nack loop)."""

    def nacked(self, published_at: float, now: float) -> float:
        return now


@dataclass
class GrowsPerNack(NackBackoff):
    """Mutant: every nack grows the delay, also those of one round."""

    def nacked(self, published_at: float, now: float) -> float:
        self.delay_s = min(self.maximum_s, self.delay_s * self.factor) if self.delay_s else self.initial_s
        self.until = now + self.delay_s
        return self.until


@dataclass
class NeverResets(NackBackoff):
    """Mutant: a confirm does not end the back-off."""

    def confirmed(self) -> None:
        pass


@dataclass
class Unbounded(NackBackoff):
    """Mutant: the delay has no ceiling."""

    def nacked(self, published_at: float, now: float) -> float:
        if self.delay_s and published_at < self.until:
            return max(self.until, now)
        self.delay_s = self.delay_s * self.factor if self.delay_s else self.initial_s
        self.until = now + self.delay_s
        return self.until


def rounds(backoff: NackBackoff, n: int, in_flight: int = 1, start: float = 100.0) -> list[float]:
    """``n`` rounds: ``in_flight`` copies published at the round's start, nacked from 1 ms later (10 µs apart), and
    published again when released (the BI gives them out again at once). The holds, in seconds."""
    holds, now = [], start
    for _ in range(n):
        published = now
        releases = [backoff.nacked(published, published + 0.001 + 0.00001 * k) for k in range(in_flight)]
        assert len(set(releases)) == 1, releases  # one round: one release time
        holds.append(round(releases[0] - published - 0.001, 6))
        now = releases[0]
    return holds


def check_grows_to_a_ceiling(backoff: NackBackoff) -> None:
    holds = rounds(backoff, 10)
    assert holds == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0, 1.0]


def check_one_round_one_hold(backoff: NackBackoff) -> None:
    # 200 copies in flight nacked one after the other: one round, the first delay (not 200 doublings)
    assert rounds(backoff, 1, in_flight=200) == [0.01]
    assert rounds(backoff, 1, in_flight=200, start=200.0) == [0.02]


def check_confirm_resets(backoff: NackBackoff) -> None:
    rounds(backoff, 6)
    assert backoff.active
    backoff.confirmed()
    assert not backoff.active
    assert rounds(backoff, 1, start=500.0) == [0.01]


def check_blocked_period_costs_few_rounds(backoff: NackBackoff) -> None:
    # RabbitMQ refuses for 10 s: ~7 rounds to reach 1 s, then one a second (not thousands)
    holds, total = rounds(backoff, 40), 0.0
    count = 0
    for hold in holds:
        if total >= 10.0:
            break
        total += hold + 0.001
        count += 1
    assert count <= 18, (count, holds[:20])


CHECKS: list[Callable[[NackBackoff], None]] = [check_grows_to_a_ceiling, check_one_round_one_hold,
                                               check_confirm_resets, check_blocked_period_costs_few_rounds]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_backoff(check: Callable[[NackBackoff], None]) -> None:
    check(NackBackoff())


def test_a_late_nack_of_the_round_is_released_at_once_not_before_now() -> None:
    backoff = NackBackoff()
    until = backoff.nacked(10.0, 10.001)
    assert backoff.nacked(10.0, until + 0.5) == until + 0.5  # its round's hold passed meanwhile: now
    assert backoff.delay_s == 0.01


@pytest.mark.parametrize(("mutant", "caught_by"), [
    (ReleasedAtOnce, check_grows_to_a_ceiling),
    (ReleasedAtOnce, check_blocked_period_costs_few_rounds),
    (GrowsPerNack, check_one_round_one_hold),
    (NeverResets, check_confirm_resets),
    (Unbounded, check_grows_to_a_ceiling),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_mutants_fail_the_checks(mutant: type[NackBackoff], caught_by: Callable[[NackBackoff], None]) -> None:
    with pytest.raises(AssertionError):
        caught_by(mutant())
