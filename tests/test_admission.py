"""Admission: scan + validate + expiry, with the cache of already-seen property sections."""
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


def test_repeated_properties_hit_the_cache_and_bodies_stay_exact() -> None:
    admission = Admission(TtlPolicy())
    first = admission.admit(encoded(b"one"), "a", False, None, 1_000)
    second = admission.admit(encoded(b"two"), "a", False, None, 2_000)
    assert (admission.cache_misses, admission.cache_hits) == (1, 1)
    assert first.properties == second.properties == PROPS
    assert second.raw == encoded(b"two")
    assert second.expiry_ms == 2_000 + 648_000  # DENM default TTL (IP_033)


def test_header_ttl_wins_over_default() -> None:
    admitted = Admission(TtlPolicy()).admit(encoded(ttl=2.5), "a", False, None, 10_000)
    assert admitted.expiry_ms == 12_500


def test_rejection_is_cached_too_and_names_the_property() -> None:
    admission = Admission(TtlPolicy())
    for _ in range(2):
        with pytest.raises(Rejected) as excinfo:
            admission.admit(encoded(causeCode="x"), "a", False, None, 0)
        assert "causeCode" in excinfo.value.description
    assert (admission.cache_misses, admission.cache_hits) == (1, 1)


def test_shard_count_is_part_of_the_key() -> None:
    admission = Admission(TtlPolicy())
    admission.admit(encoded(shardId=3, shardCount=4), "a", False, None, 0)
    with pytest.raises(Rejected) as excinfo:
        admission.admit(encoded(shardId=3, shardCount=4), "a", False, 2, 0)
    assert "shard" in excinfo.value.description


def test_cache_is_bounded() -> None:
    admission = Admission(TtlPolicy(), cache_size=3)
    for i in range(10):
        admission.admit(encoded(causeCode=i), "a", False, None, 0)
    assert len(admission._cache) == 3  # noqa: SLF001 - the bound is the point of the test


def test_undecodable_message_rejected_with_decode_error() -> None:
    with pytest.raises(Rejected) as excinfo:
        Admission(TtlPolicy()).admit(b"\x00\x53\x74\xc1\xff", "a", False, None, 0)
    assert excinfo.value.condition == "amqp:decode-error"
