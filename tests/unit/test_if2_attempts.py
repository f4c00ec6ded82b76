"""What the IF2 bridge does after each answer of the BI (interchange/bridges/if2/attempts.py, sans-I/O)."""
from __future__ import annotations

from interchange.bridges.if2.attempts import Attempts, Fate, RetryPolicy, SizeLimit
from interchange.broker.client import Outcome

POLICY = RetryPolicy(attempts=4, min_s=0.1, max_s=1.0)
LOST = Outcome(False, "not settled: connection closed")


def test_accepted_is_done() -> None:
    assert Attempts(POLICY, 0.0, None).after(Outcome(True), 0.1).fate is Fate.ACCEPTED


def test_a_rejection_or_an_oversize_message_is_refused_at_once() -> None:
    for outcome in (Outcome(False, "rejected: amqp:invalid-field: messageType (IP_022)", final=True),
                    Outcome(False, "not sent: amqp:link:message-size-exceeded: 2097383 bytes, over the peer's "
                                   "max-message-size of 1048576", final=True)):
        decision = Attempts(POLICY, 0.0, None).after(outcome, 0.1)
        assert decision.fate is Fate.REFUSE and decision.reason == outcome.error and not decision.unanswered


def test_unanswered_attempts_are_retried_with_back_off_then_given_up() -> None:
    attempts = Attempts(POLICY, 0.0, None)
    delays = []
    for n in range(1, POLICY.attempts):
        decision = attempts.after(LOST, float(n))
        assert decision.fate is Fate.RETRY and decision.unanswered
        delays.append(decision.delay_s)
    assert delays == [0.1, 0.2, 0.4]
    last = attempts.after(LOST, 9.0)
    assert last.fate is Fate.GIVE_UP and last.reason == "not accepted after 4 attempts: not settled: connection closed"
    assert attempts.unanswered == 4


def test_released_is_retried_but_not_a_possible_duplicate() -> None:
    """The BI released it (shutting down): it did not take it, so sending it again makes no copy."""
    decision = Attempts(POLICY, 0.0, None).after(Outcome(False, "released"), 0.1)
    assert decision.fate is Fate.RETRY and not decision.unanswered


def test_the_ttl_bounds_the_retries_and_shrinks_with_the_time_held() -> None:
    attempts = Attempts(RetryPolicy(attempts=100), 10.0, 2_000)
    assert attempts.before_send(10.0) is None and attempts.ttl_ms(10.5) == 1_500
    assert attempts.after(LOST, 11.0).fate is Fate.RETRY
    decision = attempts.after(LOST, 12.5)
    assert decision.fate is Fate.EXPIRED and decision.reason is not None and "ttl of 2000 ms ran out" in decision.reason


def test_a_first_attempt_is_made_whatever_the_ttl() -> None:
    """A ttl already used up when the bridge took it is the BI's to handle (it refuses expired messages)."""
    assert Attempts(POLICY, 0.0, 0).before_send(1.0) is None


def test_size_limit_learned_from_a_detach_refuses_the_largest_and_larger_only() -> None:
    limit = SizeLimit()
    assert limit.refuse(10_000_000) is None
    limit.learn(2_000_000)  # the largest in flight when the BI detached with message-size-exceeded
    assert limit.refuse(2_000_000) is not None and limit.refuse(3_000_000) is not None
    assert limit.refuse(1_999_999) is None
    limit.learn(1_500_000)  # the next detach: a smaller one was over it too
    assert limit.refuse(1_500_000) is not None and limit.refuse(1_499_999) is None
    limit.learn(1_800_000)  # never widens
    assert limit.limit == 1_499_999
