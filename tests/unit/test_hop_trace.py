"""Loop prevention for multi-hop federation (IP_109): the hop trace in message annotations.

Checked against proton's own codec: the annotations we write decode as proton reads them, the
annotations proton writes are read, other annotations survive, and the bare message (properties,
application properties, body: IP_014/015) stays byte for byte what the publisher sent.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message, symbol, uint, ulong
from pydantic import ValidationError

from ii_api.settings.config import IIConfig
from interchange.broker.amqp_scan import ScanError, find_message_annotations, scan_message
from interchange.broker.hop_trace import (
    LIMIT_KEY,
    TRACE_KEY,
    Drop,
    Forward,
    HopGuard,
    HopTrace,
    read_trace,
    stamp_trace,
)
from interchange.testing.broker_harness import denm

A, B, C, D = "a.interchange.test", "b.interchange.test", "c.interchange.test", "d.interchange.test"


def _message(**annotations: object) -> Message:
    message = denm(body=b"\x00\x01payload\xff")
    message.durable = True
    message.ttl = 60.0
    message.id = "m-1"
    if annotations:
        message.annotations = {symbol(k): v for k, v in annotations.items()}
    return message


def _bare(raw: bytes) -> bytes:
    """Everything after the message annotations: the bare message (and footer)."""
    return raw[find_message_annotations(raw).end:]


def _decode(raw: bytes) -> Message:
    message = Message()
    message.decode(raw)
    return message


# ---------------------------------------------------------------- encoding, against proton
def test_stamp_adds_annotations_and_keeps_the_bare_message_byte_exact() -> None:
    raw = _message().encode()
    stamped = stamp_trace(raw, HopTrace((A, B), 4))
    assert _bare(stamped) == _bare(raw)  # IP_014/015: properties, application properties, body untouched
    assert stamped[:find_message_annotations(raw).start] == raw[:find_message_annotations(raw).start]  # header
    decoded = _decode(stamped)
    assert decoded.annotations == {symbol(TRACE_KEY): [A, B], symbol(LIMIT_KEY): 4}
    assert decoded.durable and decoded.id == "m-1" and bytes(decoded.body) == b"\x00\x01payload\xff"
    assert scan_message(stamped).application_properties == scan_message(raw).application_properties
    assert read_trace(stamped) == HopTrace((A, B), 4)


def test_other_annotations_are_kept_and_our_keys_replaced() -> None:
    raw = _message(**{"x-opt-other": "kept", TRACE_KEY: [A], LIMIT_KEY: uint(9), "x-opt-n": ulong(7)}).encode()
    assert read_trace(raw) == HopTrace((A,), 9)
    stamped = stamp_trace(raw, HopTrace((A, B), 3))
    annotations = _decode(stamped).annotations
    assert annotations == {symbol("x-opt-other"): "kept", symbol("x-opt-n"): 7, symbol(TRACE_KEY): [A, B],
                           symbol(LIMIT_KEY): 3}
    assert _bare(stamped) == _bare(raw)
    # Stamping again replaces, never repeats, our keys.
    again = stamp_trace(stamped, HopTrace((A, B, C), 3))
    assert read_trace(again) == HopTrace((A, B, C), 3) and len(_decode(again).annotations) == 4


def test_delivery_annotations_stay_before_the_message_annotations() -> None:
    message = _message()
    message.instructions = {symbol("x-opt-delivery"): "d"}
    raw = message.encode()
    stamped = stamp_trace(raw, HopTrace((A,), None))
    decoded = _decode(stamped)
    assert decoded.instructions == {symbol("x-opt-delivery"): "d"}
    assert decoded.annotations == {symbol(TRACE_KEY): [A]}
    assert _bare(stamped) == _bare(raw)


def test_long_names_use_str32() -> None:
    long_name = "x" * 300 + ".interchange.test"
    stamped = stamp_trace(_message().encode(), HopTrace((long_name, A), 2))
    assert _decode(stamped).annotations[symbol(TRACE_KEY)] == [long_name, A]
    assert read_trace(stamped).trace == (long_name, A)


@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=600), extra=st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=40),
                                                           max_size=5),
       trace=st.lists(st.text(min_size=1, max_size=80), max_size=6))
def test_bare_message_is_byte_exact_for_any_message(body: bytes, extra: dict[str, str], trace: list[str]) -> None:
    message = Message(body=body, properties={"messageType": "DENM", **{f"p-{k}": v for k, v in extra.items()}})
    message.annotations = {symbol("x-opt-k"): "v"}
    raw = message.encode()
    stamped = stamp_trace(raw, HopTrace(tuple(trace), 5))
    assert _bare(stamped) == _bare(raw)
    assert read_trace(stamped) == HopTrace(tuple(trace), 5)
    assert _decode(stamped).annotations[symbol("x-opt-k")] == "v"


@pytest.mark.parametrize("annotations, reason", [
    ({TRACE_KEY: 5}, "must be a list"),
    ({TRACE_KEY: [A, 5]}, "must be a string"),
    ({LIMIT_KEY: "four"}, "unsigned integer"),
    ({TRACE_KEY: [A] * 40}, "more than"),
])
def test_malformed_annotations_are_scan_errors(annotations: dict[str, object], reason: str) -> None:
    with pytest.raises(ScanError, match=reason):
        read_trace(_message(**annotations).encode())


def test_truncated_annotations_are_scan_errors() -> None:
    raw = _message(**{TRACE_KEY: [A, B]}).encode()
    span = find_message_annotations(raw)
    with pytest.raises(ScanError):
        read_trace(raw[:span.end - 3])


# ---------------------------------------------------------------- decisions
def test_guard_forwards_with_the_path_and_stamps_only_when_switched_on() -> None:
    raw = _message().encode()
    off = HopGuard(B, hop_limit=4, stamp=False).inspect(raw, A)
    assert off == Forward(raw, (A, B), 4)  # same bytes: nothing added while multi-hop is off
    on = HopGuard(B, hop_limit=4, stamp=True).inspect(raw, A)
    assert isinstance(on, Forward) and on.trace == (A, B) and read_trace(on.raw) == HopTrace((A, B), 4)
    # The next interchange extends the trace; a smaller own limit wins, a larger one never raises it.
    nxt = HopGuard(C, hop_limit=3, stamp=True).inspect(on.raw, B)
    assert isinstance(nxt, Forward) and read_trace(nxt.raw) == HopTrace((A, B, C), 3)
    assert HopGuard(D, hop_limit=9, stamp=True).inspect(nxt.raw, C) == Forward(
        stamp_trace(nxt.raw, HopTrace((A, B, C, D), 3)), (A, B, C, D), 3)


def test_guard_drops_a_message_that_comes_back() -> None:
    at_c = stamp_trace(_message().encode(), HopTrace((A, B, C), 4))
    assert HopGuard(A, stamp=True).inspect(at_c, C) == Drop("loop", (A, B, C))
    assert HopGuard(B, stamp=True).inspect(at_c, C) == Drop("loop", (A, B, C))
    assert HopGuard(B, stamp=False).inspect(at_c, C) == Drop("loop", (A, B, C))  # checked even when off


def test_guard_drops_a_message_over_its_hop_limit() -> None:
    raw = _message().encode()
    assert HopGuard(B, hop_limit=1).inspect(raw, A) == Forward(raw, (A, B), 1)  # one hop: plain federation
    at_b = stamp_trace(raw, HopTrace((A, B), 1))
    assert HopGuard(C, hop_limit=4).inspect(at_b, B) == Drop("hop_limit", (A, B))  # the carried limit holds
    at_c = stamp_trace(raw, HopTrace((A, B, C), 4))
    assert HopGuard(D, hop_limit=3).inspect(at_c, C) == Forward(at_c, (A, B, C, D), 3)
    assert HopGuard(D, hop_limit=2).inspect(at_c, C) == Drop("hop_limit", (A, B, C))


def test_a_neighbour_that_did_not_record_itself_is_added() -> None:
    spoofed = stamp_trace(_message().encode(), HopTrace((A,), None))  # e.g. a local actor at B wrote it
    decision = HopGuard(C, stamp=True).inspect(spoofed, B)
    assert isinstance(decision, Forward) and decision.trace == (A, B, C)


def test_hop_limit_is_bounded() -> None:
    with pytest.raises(ValueError):
        HopGuard(A, hop_limit=0)


def test_multihop_is_off_by_default_and_its_limit_bounded() -> None:
    assert IIConfig().multihop.enabled is False and IIConfig().multihop.hop_limit == 4
    assert IIConfig.model_validate({"multihop": {"enabled": True, "hop_limit": 2}}).multihop.hop_limit == 2
    for bad in ({"hop_limit": 0}, {"hop_limit": 33}, {"re_export": True}):
        with pytest.raises(ValidationError):
            IIConfig.model_validate({"multihop": bad})
