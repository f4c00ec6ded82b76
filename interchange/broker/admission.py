"""Admission of one incoming message: scan, validate, compute its expiry (sans-I/O).

IP_008: only the application properties are read (the body is never decoded);
IP_016: a malformed message is rejected (the broker drops and logs it);
IP_022/026/029/100/103/122/123/131/135: the application properties of tables 1-7;
IP_033/034: TTL from the header or absolute-expiry-time, else the per-messageType default.

C-ITS publishers repeat messages with the same application properties (DENM/IVIM repetitions,
SPATEM/CAM of one station), so the decoded and validated properties are kept in a bounded
cache keyed by the exact bytes of the application-properties section: a repeated section costs
one hash instead of a decode and a validation.
"""
from __future__ import annotations

from interchange.broker.amqp_scan import ScanError, decode_application_properties, scan_message
from interchange.broker.engine import Rejected
from interchange.broker.message import BrokerMessage
from interchange.broker.ttl_policy import TtlPolicy, expiry_ms
from interchange.broker.validation import MESSAGE_TYPES, validate_application_properties

_NO_PROPERTIES: dict[str, object] = {}


class Admission:
    """Turns received bytes into a :class:`BrokerMessage` or raises :class:`Rejected`."""

    def __init__(self, ttl_policy: TtlPolicy, cache_size: int = 4096) -> None:
        self.ttl_policy = ttl_policy
        # IP_033 defaults per messageType, computed once (the common case: no TTL on the message)
        self._default_ttl = {t: ttl_policy.default_ttl_ms(t) for t in MESSAGE_TYPES}
        self._fallback_ttl = ttl_policy.default_ttl_ms(None)
        self._cache: dict[tuple[bytes, int | None], tuple[dict[str, object], str | None]] = {}
        self._cache_size = cache_size
        self.cache_hits = 0
        self.cache_misses = 0

    def admit(self, raw: bytes | bytearray, publisher: str, federated: bool, shard_count: int | None,
              now_ms: int) -> BrokerMessage:
        try:
            scanned = scan_message(raw, decode_properties=False)
        except ScanError as exc:
            raise Rejected(f"malformed AMQP message: {exc}", "amqp:decode-error") from None
        start, end = scanned.application_properties_offset, scanned.application_properties_end
        key = (bytes(raw[start:end]) if start is not None else b"", shard_count)
        cache = self._cache
        entry = cache.get(key)
        if entry is None:
            self.cache_misses += 1
            entry = self._check(raw, start, end, shard_count)
            if len(cache) >= self._cache_size:
                del cache[next(iter(cache))]  # oldest first
            cache[key] = entry
        else:
            self.cache_hits += 1
        properties, problem = entry
        if problem is not None:
            raise Rejected(problem)
        ttl, absolute = scanned.ttl_ms, scanned.absolute_expiry_time_ms
        if ttl or absolute:
            expiry = expiry_ms(ttl, absolute, properties.get("messageType"), now_ms, self.ttl_policy)
        else:
            expiry = now_ms + self._default_ttl.get(properties.get("messageType"), self._fallback_ttl)
        return BrokerMessage(raw, properties, expiry, federated, publisher, now_ms)

    @staticmethod
    def _check(raw: bytes, start: int | None, end: int | None,
               shard_count: int | None) -> tuple[dict[str, object], str | None]:
        if start is None or end is None:
            properties, types = _NO_PROPERTIES, {}
        else:
            try:
                properties, types = decode_application_properties(raw, start, end)
            except ScanError as exc:
                return _NO_PROPERTIES, f"malformed AMQP message: {exc}"
        problems = validate_application_properties(properties, types, capability_shard_count=shard_count)
        if problems:
            return properties, "invalid application properties: " + "; ".join(str(p) for p in problems)
        return properties, None
