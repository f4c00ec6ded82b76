"""Make-before-break route changes, sans-I/O: :class:`ii_api.decisions.handover.RouteHandover`
keeps the old subscription until the new one is ready (CREATED, links connected) for the overlap,
and withdraws at once what nothing would come over or nobody wants. Time is a number here.

The routes are those :func:`ii_api.decisions.multihop.desired_routes` plans on the ring A-B-C seen from C:
A's data first over B (the link C-A cut), then straight from A when the link comes back.
"""
from __future__ import annotations

import pytest
from pydantic import ValidationError
from pytest import approx

from ii_api.decisions.handover import RouteHandover
from ii_api.decisions.multihop import desired_routes
from ii_api.decisions.subscriptions import LocalSubscriptionView, OutgoingKey
from ii_api.settings.config import MultihopConfig
from test_multihop_routes import A, B, DENM, capability

WANT = LocalSubscriptionView(1, "actor-c", DENM)
OVER_B = desired_routes([WANT], {B: [capability("NO00001", (A,)), capability("SE00001")]})
BOTH = desired_routes([WANT], {A: [capability("NO00001"), capability("SE00001", (B,))],
                               B: [capability("NO00001", (A,)), capability("SE00001")]})
REACHABLE = (A, B)


def _keys() -> tuple[OutgoingKey, OutgoingKey, OutgoingKey]:
    """(C's subscription at B before, at B after, at A after)."""
    (before,) = OVER_B
    at_a = next(k for k in BOTH if k.neighbour == A)
    at_b = next(k for k in BOTH if k.neighbour == B)
    return before, at_b, at_a


def test_the_routes_move_as_on_the_ring() -> None:
    before, at_b, at_a = _keys()
    assert before.selector == DENM  # everything over B
    assert at_b != before and "SE00001:denm-1" in at_b.selector and "NO00001" not in at_b.selector
    assert "NO00001:denm-1" in at_a.selector  # A's own data, straight from A


def test_old_route_stays_until_the_new_one_is_ready_for_the_overlap() -> None:
    before, at_b, at_a = _keys()
    handover = RouteHandover(overlap_s=0.5, timeout_s=30.0)
    plan = handover.plan(10.0, BOTH, {before: frozenset({1})}, [before], REACHABLE)
    assert plan.create == sorted([at_a, at_b]) and plan.withdraw == []
    assert plan.kept == {before: frozenset({at_a, at_b})}
    assert plan.serves == {at_a: frozenset({1}), at_b: frozenset({1}), before: frozenset({1})}  # all feed C's source
    assert plan.not_ready == {at_a, at_b} and plan.wake_at == approx(40.0)  # when one is ready, or the timeout

    requested = {before: frozenset({1}), at_a: frozenset({1}), at_b: frozenset({1})}
    plan = handover.plan(10.3, BOTH, requested, [before, at_b], REACHABLE)  # at A: CREATED, link not yet up
    assert plan.withdraw == [] and plan.create == [] and plan.kept == {before: frozenset({at_a, at_b})}
    assert plan.not_ready == {at_a} and plan.wake_at == approx(10.8)
    plan = handover.plan(10.4, BOTH, requested, [before, at_a, at_b], REACHABLE)  # both ready now
    assert plan.withdraw == [] and plan.wake_at == approx(10.8)  # the overlap of the one at B ends first
    plan = handover.plan(10.8, BOTH, requested, [before, at_a, at_b], REACHABLE)
    assert plan.withdraw == [] and before in plan.serves and plan.wake_at == approx(10.9)  # then A's
    plan = handover.plan(10.9, BOTH, requested, [before, at_a, at_b], REACHABLE)
    assert plan.withdraw == [before] and plan.kept == {} and plan.wake_at is None
    assert plan.serves == {at_a: frozenset({1}), at_b: frozenset({1})}


def test_a_new_route_that_drops_its_link_starts_the_overlap_again() -> None:
    before, at_b, at_a = _keys()
    handover = RouteHandover(overlap_s=0.5, timeout_s=30.0)
    requested = {before: frozenset({1}), at_a: frozenset({1}), at_b: frozenset({1})}
    handover.plan(0.0, BOTH, requested, [before, at_a, at_b], REACHABLE)
    handover.plan(0.4, BOTH, requested, [before, at_b], REACHABLE)  # A's link went down
    plan = handover.plan(0.6, BOTH, requested, [before, at_a, at_b], REACHABLE)
    assert plan.withdraw == [] and plan.wake_at == approx(1.1)
    assert handover.plan(1.1, BOTH, requested, [before, at_a, at_b], REACHABLE).withdraw == [before]


def test_withdrawn_at_once_when_nothing_would_come_or_nobody_wants_it() -> None:
    before, at_b, at_a = _keys()
    # The old route's neighbour is gone (a cut link, a node that left): nothing comes over it.
    handover = RouteHandover()
    plan = handover.plan(0.0, BOTH, {before: frozenset({1})}, [before], (A,))
    assert plan.withdraw == [before] and plan.kept == {} and plan.create == sorted([at_a, at_b])
    # The local subscription is gone: nothing to keep it for.
    plan = RouteHandover().plan(0.0, {}, {before: frozenset({1})}, [before], REACHABLE)
    assert plan.withdraw == [before] and plan.serves == {} and plan.wake_at is None
    # It served another want, which moved nowhere: withdrawn (this one's new route is no reason).
    plan = RouteHandover().plan(0.0, BOTH, {before: frozenset({2})}, [before], REACHABLE)
    assert plan.withdraw == [before]


def test_a_new_route_that_never_gets_ready_ends_the_wait_after_the_timeout() -> None:
    before, at_b, at_a = _keys()
    handover = RouteHandover(overlap_s=0.5, timeout_s=5.0)
    requested = {before: frozenset({1}), at_a: frozenset({1}), at_b: frozenset({1})}
    plan = handover.plan(0.0, BOTH, requested, [before, at_b], REACHABLE)  # A refuses, say
    assert plan.withdraw == [] and plan.not_ready == {at_a} and plan.wake_at == approx(0.5)  # at B settled
    assert handover.plan(4.9, BOTH, requested, [before, at_b], REACHABLE).withdraw == []
    assert handover.plan(5.0, BOTH, requested, [before, at_b], REACHABLE).withdraw == [before]


def test_a_route_change_undone_before_it_ended_is_make_before_break_too() -> None:
    before, at_b, at_a = _keys()
    handover = RouteHandover(overlap_s=0.5)
    handover.plan(0.0, BOTH, {before: frozenset({1})}, [before], REACHABLE)
    requested = {before: frozenset({1}), at_a: frozenset({1}), at_b: frozenset({1})}
    plan = handover.plan(0.2, OVER_B, requested, [before, at_b], (B,))  # the link C-A gone again
    assert plan.create == [] and before in plan.serves
    assert plan.withdraw == [at_a]  # unreachable: nothing comes over it
    assert plan.kept == {at_b: frozenset({before})}  # the old one is the new one now; ready since 0.0
    del requested[at_a]
    assert handover.plan(0.5, OVER_B, requested, [before, at_b], (B,)).withdraw == [at_b]


def test_without_a_route_change_it_plans_like_plan_outgoing() -> None:
    (key,) = OVER_B
    plan = RouteHandover().plan(0.0, OVER_B, {}, [], REACHABLE)
    assert plan.create == [key] and plan.withdraw == [] and plan.kept == {} and plan.wake_at is None
    plan = RouteHandover().plan(0.0, OVER_B, {key: frozenset({1})}, [key], REACHABLE)
    assert plan.create == [] and plan.withdraw == [] and plan.serves == OVER_B


def test_config_refuses_a_duplicate_window_shorter_than_the_overlap() -> None:
    assert MultihopConfig().handover_overlap_s < MultihopConfig().duplicate_window_s
    with pytest.raises(ValidationError, match="duplicate_window_s .* must be longer than handover_overlap_s"):
        MultihopConfig(enabled=True, handover_overlap_s=5.0, duplicate_window_s=2.0)
