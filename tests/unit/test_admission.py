"""Admission: scan + validate + expiry, on both paths (C accelerator and pure Python).

The Python path keeps a cache of already-seen property sections; the C path needs none for
valid messages and hands everything it does not admit to the Python path (and its cache).
"""
from __future__ import annotations

import pytest
from proton import Message

from interchange.broker.admission import Admission
from interchange.broker.engine import Rejected
from interchange.broker.ttl_policy import TtlPolicy

PROPS = {"publisherId": "NO00001", "publicationId": "NO00001:p", "originatingCountry": "NO",
         "protocolVersion": "DENM:1.3.1", "messageType": "DENM", "quadTree": ",120202130121133020,",
         "causeCode": 1, "subCauseCode": 0}


def encoded(body: bytes = b"x", ttl: float | None = None, **extra: object) -> bytes:
    message = Message(body=body, properties={**PROPS, **extra}, inferred=True)
    if ttl is not None:
        message.ttl = ttl
    return message.encode()


@pytest.fixture(params=[False, True], ids=["python", "accelerated"])
def accelerated(request: pytest.FixtureRequest) -> bool:
    return request.param


def test_repeated_properties_hit_the_cache_and_bodies_stay_exact() -> None:
    admission = Admission(TtlPolicy(), accelerated=False)
    first = admission.admit(encoded(b"one"), "a", False, None, 1_000)
    second = admission.admit(encoded(b"two"), "a", False, None, 2_000)
    assert (admission.cache_misses, admission.cache_hits) == (1, 1)
    assert first.properties == second.properties == PROPS
    assert second.raw == encoded(b"two")
    assert second.expiry_ms == 2_000 + 648_000  # DENM default TTL (IP_033)


def test_accelerated_admission_of_repeated_properties_bypasses_the_cache() -> None:
    admission = Admission(TtlPolicy(), accelerated=True)
    first = admission.admit(encoded(b"one"), "a", False, None, 1_000)
    second = admission.admit(encoded(b"two"), "a", False, None, 2_000)
    assert (admission.cache_misses, admission.cache_hits) == (0, 0)
    assert admission._cache == {}
    assert first.properties == second.properties == PROPS
    assert second.raw == encoded(b"two")
    assert second.expiry_ms == 2_000 + 648_000  # DENM default TTL (IP_033)


def test_header_ttl_wins_over_default(accelerated: bool) -> None:
    admitted = Admission(TtlPolicy(), accelerated=accelerated).admit(encoded(ttl=2.5), "a", False, None, 10_000)
    assert admitted.expiry_ms == 12_500


@pytest.mark.parametrize(("ttl_s", "cap_ms", "expiry_ms"), [(2.5, None, 12_500), (2.5, 3_000, 12_500),
                                                        (2.5, 2_000, 12_000), (2.5, 2_500, 12_500)])
def test_a_header_ttl_alone_is_capped_by_the_policy(ttl_s: float, cap_ms: int | None, expiry_ms: int,
                                                     accelerated: bool) -> None:
    admitted = Admission(TtlPolicy(maximum_ttl_ms=cap_ms), accelerated=accelerated).admit(
        encoded(ttl=ttl_s), "a", False, None, 10_000)
    assert (admitted.expiry_ms, admitted.expiry_source) == (expiry_ms, "ttl")


def test_absolute_expiry_and_policy_cap(accelerated: bool) -> None:
    message = Message(body=b"x", properties=PROPS, inferred=True)
    message.expiry_time = 20.0  # absolute-expiry-time, in seconds
    message.ttl = 15
    policy = TtlPolicy(maximum_ttl_ms=8_000)
    admitted = Admission(policy, accelerated=accelerated).admit(message.encode(), "a", False, None, 10_000)
    assert admitted.expiry_ms == 18_000  # min(20 s, 10 s + 15 s) capped at 10 s + 8 s


def test_rejection_is_cached_too_and_names_the_property(accelerated: bool) -> None:
    admission = Admission(TtlPolicy(), accelerated=accelerated)
    for _ in range(2):
        with pytest.raises(Rejected) as excinfo:
            admission.admit(encoded(causeCode="x"), "a", False, None, 0)
        assert excinfo.value.description == (
            "invalid application properties: causeCode: must be an integer, got AMQP string (IP_026)"
        )
    # the C path leaves invalid messages to the Python path, cache included
    assert (admission.cache_misses, admission.cache_hits) == (1, 1)


def test_shard_count_is_part_of_the_key(accelerated: bool) -> None:
    admission = Admission(TtlPolicy(), accelerated=accelerated)
    admitted = admission.admit(encoded(shardId=3, shardCount=4), "a", False, None, 0)
    assert admitted.shard_key == ("NO00001:p", 3)
    with pytest.raises(Rejected) as excinfo:
        admission.admit(encoded(shardId=3, shardCount=4), "a", False, 2, 0)
    assert "shard" in excinfo.value.description


def test_cache_is_bounded() -> None:
    admission = Admission(TtlPolicy(), cache_size=3, accelerated=False)
    for i in range(10):
        admission.admit(encoded(causeCode=i), "a", False, None, 0)
    assert len(admission._cache) == 3


def test_cache_is_bounded_for_rejections_on_the_accelerated_path() -> None:
    admission = Admission(TtlPolicy(), cache_size=3, accelerated=True)
    for i in range(10):
        with pytest.raises(Rejected):
            admission.admit(encoded(causeCode=300 + i), "a", False, None, 0)
    assert len(admission._cache) == 3


def test_undecodable_message_rejected_with_decode_error(accelerated: bool) -> None:
    with pytest.raises(Rejected) as excinfo:
        Admission(TtlPolicy(), accelerated=accelerated).admit(b"\x00\x53\x74\xc1\xff", "a", False, None, 0)
    assert excinfo.value.condition == "amqp:decode-error"
