"""The IF2 bridge's batched acknowledgements: an ack never covers a delivery the BI has not accepted."""
from __future__ import annotations

from interchange.bridges.if2.acks import Ack, AckWindow, Reject


def window_of(n: int) -> tuple[AckWindow[str], list[str]]:
    window: AckWindow[str] = AckWindow()
    messages = [f"m{i}" for i in range(n)]
    for message in messages:
        window.received(message)
    return window, messages


def test_a_contiguous_accepted_run_is_one_multiple_ack() -> None:
    window, m = window_of(3)
    for message in m:
        window.settled(message, True)
    assert window.flush() == [Ack("m2", True)]
    assert len(window) == 0


def test_a_single_ack_is_not_multiple() -> None:
    window, m = window_of(2)
    window.settled(m[0], True)
    assert window.flush() == [Ack("m0", False)]


def test_a_delivery_in_flight_holds_back_the_later_acks() -> None:
    window, m = window_of(3)
    window.settled(m[1], True)
    window.settled(m[2], True)
    assert window.flush() == []  # m0 still in flight: an ack of m2 (multiple) would cover it
    window.settled(m[0], True)
    assert window.flush() == [Ack("m2", True)]


def test_a_refused_delivery_is_rejected_alone_between_acks() -> None:
    window, m = window_of(4)
    for message, accepted in zip(m, (True, False, True, True)):
        window.settled(message, accepted)
    assert window.flush() == [Ack("m0", False), Reject("m1"), Ack("m3", True)]


def test_settlements_after_a_flush_continue_from_there() -> None:
    window, m = window_of(3)
    window.settled(m[0], True)
    assert window.flush() == [Ack("m0", False)]
    window.settled(m[2], False)
    assert window.flush() == []
    window.settled(m[1], True)
    assert window.flush() == [Ack("m1", False), Reject("m2")]
    assert window.flush() == []


def test_a_read_received_and_settled_at_once_is_as_one_by_one() -> None:
    window: AckWindow[str] = AckWindow()
    m = [f"m{i}" for i in range(4)]
    window.received_all(m[:2])
    window.received_all(m[2:])
    window.settled_all([m[0], m[1], m[3]], True)
    assert window.settled_count == 3
    assert window.flush() == [Ack("m1", True)]  # m3 waits behind m2, still in flight
    window.settled_all([m[2]], False)
    assert window.flush() == [Reject("m2"), Ack("m3", False)] and len(window) == 0 and window.settled_count == 0


def test_a_window_all_accepted_is_one_ack_and_leaves_other_settlements() -> None:
    """The whole window accepted (flushed at once) gives the same ack as one by one; a settlement of a
    delivery not in the window (settled twice) stays apart and changes nothing."""
    window, m = window_of(5)
    window.settled_all(m, True)
    window.settled("stray", True)
    assert window.flush() == [Ack("m4", True)] and len(window) == 0 and window.settled_count == 1
    window.received("m5")
    window.settled("m5", True)
    assert window.flush() == [Ack("m5", False)]


def test_a_window_with_one_refused_or_one_in_flight_is_not_one_ack() -> None:
    window, m = window_of(3)
    window.settled_all(m, True)
    window.settled(m[1], False)
    assert window.flush() == [Ack("m0", False), Reject("m1"), Ack("m2", False)]
    window, m = window_of(3)
    window.settled_all([m[0], m[2]], True)
    assert window.flush() == [Ack("m0", False)] and len(window) == 2
