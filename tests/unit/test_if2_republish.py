"""IF2 6.4's republishing rules (interchange/bridges/if2/republish.py), fed messages and time."""
from __future__ import annotations

import pytest

from interchange.bridges.if2.republish import HOUR_S, RepublishPolicy


def test_only_a_bit_level_change_is_published_again_at_once() -> None:
    policy: RepublishPolicy[str] = RepublishPolicy()
    assert policy.offer("k", b"\x01", "env", 60_000, now=0.0)
    assert not policy.offer("k", b"\x01", "env", 60_000, now=1.0)  # the same bytes: FILTER04
    assert policy.offer("k", b"\x02", "env", 60_000, now=2.0)  # one bit differs
    assert not policy.offer("k", b"\x02", "env", 60_000, now=3.0)
    assert policy.offer("other", b"\x02", "env", 60_000, now=3.0)  # another message
    assert policy.suppressed == 2


def test_ttl_expired_while_still_valid_is_published_again() -> None:
    """Rule 2: the IF2 copy (ttl 10 s) expired, the message is still valid (C-Roads keeps sending it)."""
    policy: RepublishPolicy[str] = RepublishPolicy()
    assert policy.offer("k", b"m", "env", 10_000, now=0.0)
    assert not policy.offer("k", b"m", "env", 10_000, now=8.0)  # still valid on IF2
    assert policy.due(9.9) == []
    due = policy.due(10.0)  # the IF2 copy expired; the C-Roads copy of t=8 is valid until 18
    assert [(d.key, d.body, d.payload, d.ttl_ms) for d in due] == [("k", b"m", "env", 8000)]
    assert policy.due(17.9) == []  # published with the 8 s left: nothing to renew
    assert policy.due(18.0) == [] and len(policy) == 0  # no longer valid: forgotten


def test_renewed_copy_ends_with_the_validity_not_a_millisecond_before() -> None:
    """The renewed copy's ttl is the validity left, in whole ms for IF2; its end is the validity's own,
    so no copy with (almost) nothing left follows it (one did: the rounded ttl ended 0.3 ms early)."""
    policy: RepublishPolicy[str] = RepublishPolicy()
    assert policy.offer("k", b"m", "env", 1_500, now=0.0)
    assert not policy.offer("k", b"m", "env", 1_500, now=1.0003)  # valid until 2.5003
    assert [d.ttl_ms for d in policy.due(1.5)] == [1000]
    assert policy.due(2.5) == [] and policy.due(2.50029) == []
    assert policy.due(2.5003) == [] and len(policy) == 0


def test_same_copy_after_ttl_expiry_goes_out_on_arrival() -> None:
    policy: RepublishPolicy[str] = RepublishPolicy()
    assert policy.offer("k", b"m", "env", 5_000, now=0.0)
    assert policy.offer("k", b"m", "env", 5_000, now=6.0)


def test_at_least_hourly_while_valid() -> None:
    """Rule 3: a message valid for a day (MAPEM-like) is republished every hour, not more often."""
    policy: RepublishPolicy[str] = RepublishPolicy()
    day_ms = 24 * 3600 * 1000
    assert policy.offer("map", b"m", "env", day_ms, now=0.0)
    assert not policy.offer("map", b"m", "env", day_ms, now=HOUR_S - 1)
    assert policy.next_due() == HOUR_S
    hours = []
    t = 0.0
    while t < 5 * HOUR_S:
        t += 60.0
        hours += [t for _ in policy.due(t)]
    assert hours == [HOUR_S, 2 * HOUR_S, 3 * HOUR_S, 4 * HOUR_S, 5 * HOUR_S]


def test_without_ttl_valid_for_the_default_validity() -> None:
    policy: RepublishPolicy[str] = RepublishPolicy(interval_s=10.0, default_validity_s=25.0)
    assert policy.offer("k", b"m", "env", None, now=0.0)
    assert [d.ttl_ms for d in policy.due(10.0)] == [None]
    assert len(policy.due(20.0)) == 1
    assert policy.due(25.0) == [] and len(policy) == 0


def test_failed_publish_is_forgotten_so_the_next_copy_goes_out() -> None:
    policy: RepublishPolicy[str] = RepublishPolicy()
    assert policy.offer("k", b"m", "env", 60_000, now=0.0)
    policy.failed("k")
    assert policy.offer("k", b"m", "env", 60_000, now=0.1)


def test_bounded() -> None:
    policy: RepublishPolicy[str] = RepublishPolicy(max_entries=3)
    for i in range(10):
        assert policy.offer(i, b"m", "env", 60_000, now=float(i))
    assert len(policy) == 3
    with pytest.raises(ValueError, match="at least once per hour"):
        RepublishPolicy(interval_s=2 * HOUR_S)
