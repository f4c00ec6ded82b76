"""Tests of the TTL policy (IP_033, IP_034, IP_048, IP_124, IP_136)."""
from __future__ import annotations

import pytest
from proton import Message
from pydantic import ValidationError

from interchange.broker.amqp_scan import ScannedMessage, scan_message
from interchange.broker.ttl_policy import (
    DEFAULT_REPETITION_INTERVALS_MS,
    DEFAULT_TTL_POLICY,
    TtlPolicy,
    default_ttl_ms,
    effective_expiry_ms,
)

ARRIVAL = 1_700_000_000_000


def scanned(message_type: str | None = "DENM", **fields: float) -> ScannedMessage:
    """Scan a proton-encoded message (ttl/expiry_time in seconds, as proton takes them)."""
    props = {} if message_type is None else {"messageType": message_type}
    return scan_message(Message(body=b"x", inferred=True, properties=props, **fields).encode())


@pytest.mark.parametrize(
    "message_type, ttl_ms",
    [
        ("DENM", 648_000),  # IP_048: repeated at least every 9 min -> 540 s x 1.2
        ("IVIM", 648_000),
        ("MAPEM", 648_000),
        ("POIM-PA", 648_000),
        ("CAM", 144_000),  # IP_124: at most 120 s between CAMs
        ("CPM", 1_200),  # IP_136: 1 per second
        ("SPATEM", 1_200),
        ("SREM", 1_200),
        ("SSEM", 1_200),
        ("UNKNOWN", 648_000),
        (None, 648_000),
        (5, 648_000),  # a messageType of the wrong AMQP type
    ],
)
def test_default_ttl_per_message_type(message_type: object, ttl_ms: int) -> None:
    assert default_ttl_ms(message_type) == ttl_ms
    assert DEFAULT_TTL_POLICY.default_ttl_ms(message_type) == ttl_ms


def test_minimum_ttl_is_one_second() -> None:
    policy = TtlPolicy(repetition_interval_ms={"SPATEM": 100})
    assert policy.default_ttl_ms("SPATEM") == 1_000  # 120 ms raised to the IP_033 minimum
    assert policy.default_ttl_ms("DENM") == 648_000  # other types keep their defaults


def test_policy_is_configurable_and_immutable() -> None:
    policy = TtlPolicy.model_validate(
        {"repetition_interval_ms": {"CAM": 1_000}, "fallback_interval_ms": 60_000, "factor": 2, "maximum_ttl_ms": 300_000}
    )
    assert policy.default_ttl_ms("CAM") == 2_000
    assert policy.default_ttl_ms("custom") == 120_000
    assert policy.default_ttl_ms("DENM") == 300_000  # 1080 s capped by the maximum
    with pytest.raises(ValidationError):
        policy.factor = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        policy.repetition_interval_ms["CAM"] = 5  # type: ignore[index]
    assert TtlPolicy.model_validate_json(policy.model_dump_json()) == policy
    assert DEFAULT_TTL_POLICY.repetition_interval_ms == DEFAULT_REPETITION_INTERVALS_MS


@pytest.mark.parametrize(
    "config",
    [
        {"repetition_interval_ms": {"CAM": 0}},
        {"fallback_interval_ms": -1},
        {"factor": 0},
        {"minimum_ttl_ms": -5},
        {"maximum_ttl_ms": 0},
        {"unknown_option": 1},
    ],
)
def test_invalid_policy_configuration(config: dict) -> None:
    with pytest.raises(ValidationError):
        TtlPolicy.model_validate(config)


def test_header_ttl_counts_from_arrival() -> None:
    assert effective_expiry_ms(scanned(ttl=5), ARRIVAL) == ARRIVAL + 5_000


def test_absolute_expiry_time_is_used() -> None:
    expiry = (ARRIVAL + 42_000) / 1000
    assert effective_expiry_ms(scanned(expiry_time=expiry), ARRIVAL) == ARRIVAL + 42_000


@pytest.mark.parametrize("ttl_s, expiry_offset_ms, expected_offset_ms", [(5, 42_000, 5_000), (60, 42_000, 42_000)])
def test_earlier_of_ttl_and_absolute_expiry_wins(ttl_s: float, expiry_offset_ms: int, expected_offset_ms: int) -> None:
    message = scanned(ttl=ttl_s, expiry_time=(ARRIVAL + expiry_offset_ms) / 1000)
    assert effective_expiry_ms(message, ARRIVAL) == ARRIVAL + expected_offset_ms


def test_expired_on_arrival_is_kept_as_a_past_expiry() -> None:
    message = scanned(expiry_time=(ARRIVAL - 1_000) / 1000)
    assert effective_expiry_ms(message, ARRIVAL) == ARRIVAL - 1_000


@pytest.mark.parametrize("message_type, ttl_ms", [("DENM", 648_000), ("CPM", 1_200), (None, 648_000)])
def test_default_when_the_producer_sets_no_expiry(message_type: str | None, ttl_ms: int) -> None:
    assert effective_expiry_ms(scanned(message_type), ARRIVAL) == ARRIVAL + ttl_ms


def test_zero_ttl_and_zero_absolute_expiry_count_as_unset() -> None:
    message = scanned("CPM")._replace(ttl_ms=0, absolute_expiry_time_ms=0)
    assert effective_expiry_ms(message, ARRIVAL) == ARRIVAL + 1_200


def test_maximum_caps_producer_expiry_and_policy_is_passed_through() -> None:
    policy = TtlPolicy(maximum_ttl_ms=10_000, repetition_interval_ms={"CPM": 2_000})
    assert effective_expiry_ms(scanned(ttl=60), ARRIVAL, policy) == ARRIVAL + 10_000
    assert effective_expiry_ms(scanned(ttl=5), ARRIVAL, policy) == ARRIVAL + 5_000
    assert effective_expiry_ms(scanned("CPM"), ARRIVAL, policy) == ARRIVAL + 2_400
