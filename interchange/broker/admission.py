"""Admission of one incoming message: scan, validate, compute its expiry (sans-I/O).

IP_008: only the application properties are read (the body is never decoded);
IP_016: a malformed message is rejected (the broker drops and logs it);
IP_022/026/029/100/103/122/123/131/135: the application properties of tables 1-7;
IP_033/034: TTL from the header or absolute-expiry-time, else the per-messageType default.

Two paths give the same results: the C accelerator ``_admit`` (``INTERCHANGE_PURE_PYTHON=1`` or
``accelerated=False`` turns it off) and the Python path (the reference, with a cache keyed by the
application-properties bytes). Both number messages for the audit log (``seq``, per-shard number,
IP_128-130; ``expiry_source``). Both give the messages whose application-properties sections are
byte for byte the same one properties dict (read-only, never changed: the router keeps what it
derived from it by the object, :mod:`interchange.broker.router`). How and why: docs/broker.md ("Admission").
"""
from __future__ import annotations

import os
from collections.abc import Callable

from interchange.broker.amqp_scan import ScanError, decode_application_properties, scan_message
from interchange.broker.engine import Rejected
from interchange.broker.message import BrokerMessage
from interchange.broker.ttl_policy import TtlPolicy, expiry_ms
from interchange.broker.validation import MESSAGE_TYPES, validate_application_properties

#: interchange.broker._admit.admit (typed in _admit.pyi), or None when the module is not built
_c_admit: Callable[[bytes | bytearray, int | None, dict[bytes, object] | None],
                   tuple[dict[str, object], bool, int | None, int | None] | None] | None
try:
    from interchange.broker._admit import admit as _c_admit
except ImportError:  # not built (no compiler): the Python path alone
    _c_admit = None

_NO_PROPERTIES: dict[str, object] = {}

#: The C path's section caches are used while at least one in WORTH of a WINDOW of admissions repeats a section.
WINDOW, WORTH = 1024, 16

#: Environment variable that, set to 1, turns the C accelerator off.
PURE_PYTHON_ENV = "INTERCHANGE_PURE_PYTHON"


def accelerator_available() -> bool:
    """True if the C accelerator is built and not turned off by ``INTERCHANGE_PURE_PYTHON=1``."""
    return _c_admit is not None and os.environ.get(PURE_PYTHON_ENV) != "1"


class Admission:
    """Turns received bytes into a :class:`BrokerMessage` or raises :class:`Rejected`.

    ``accelerated``: None (default) uses the C accelerator when :func:`accelerator_available`;
    False forces the Python path; True requires the accelerator (ImportError without it).
    The path in use is the ``accelerated`` attribute.
    """

    def __init__(self, ttl_policy: TtlPolicy, cache_size: int = 4096, *, accelerated: bool | None = None) -> None:
        self.ttl_policy = ttl_policy
        # IP_033 defaults per messageType, computed once (the common case: no TTL on the message)
        self._default_ttl: dict[object, int] = {t: ttl_policy.default_ttl_ms(t) for t in MESSAGE_TYPES}
        self._fallback_ttl = ttl_policy.default_ttl_ms(None)
        self._maximum_ttl = ttl_policy.maximum_ttl_ms
        self._cache: dict[tuple[bytes, int | None], tuple[dict[str, object], str | None]] = {}
        self._cache_size = cache_size
        self.cache_hits = 0
        self.cache_misses = 0
        if accelerated is None:
            accelerated = accelerator_available()
        elif accelerated and _c_admit is None:
            raise ImportError("the C accelerator interchange.broker._admit is not built")
        self.accelerated = accelerated
        self._accelerator = _c_admit if accelerated else None
        self.last_seq = 0  #: the last message number given (admitted or rejected)
        #: per shard seen since the process started: its key object and its last number
        self._shard_seqs: dict[tuple, list] = {}
        #: the C path's sections read (properties object and verdict by the section's bytes), one per
        #: capability shard count (the verdict depends on it); bounded by the C code
        self._c_caches: dict[int | None, dict[bytes, object]] = {}
        #: whether the last message admitted shares its properties dict with an earlier one (its section
        #: read before): what the router keeps by that dict is worth keeping only then
        self.repeated = False
        self._caching, self._window_left, self._window_repeats = True, WINDOW, 0  #: (:meth:`_section_cache`)

    def admit(self, raw: bytes | bytearray, publisher: str, federated: bool, shard_count: int | None,
              now_ms: int) -> BrokerMessage:
        accelerator = self._accelerator
        if accelerator is not None:
            left = self._window_left - 1
            if left >= 0 and self._caching:  # (:meth:`_section_cache`'s usual case, without a call)
                self._window_left = left
                cache = self._c_caches.get(shard_count)
                if cache is None:
                    cache = self._c_caches[shard_count] = {}
            else:
                cache = self._section_cache(shard_count)
            known = len(cache) if cache is not None else -1
            result = accelerator(raw, shard_count, cache)
            if result is not None:
                properties, valid, ttl, absolute = result
                if valid:
                    if cache is not None:  # (a section not read before is added)
                        self.repeated = repeated = len(cache) == known
                        self._window_repeats += repeated
                    else:
                        self.repeated = False
                    message = BrokerMessage(raw, properties, now_ms, federated, publisher, now_ms)
                    if ttl and not absolute:  # a header ttl alone (a bridge's messages): expiry_ms's result
                        cap = self._maximum_ttl
                        message.expiry_ms = now_ms + (ttl if cap is None or ttl <= cap else cap)
                        message.expiry_source = "ttl"
                    elif ttl or absolute:
                        self._explicit_expiry(message, ttl, absolute)
                    else:  # the common case: the messageType's default (IP_033)
                        message.expiry_ms = now_ms + self._default_ttl.get(properties.get("messageType"),
                                                                           self._fallback_ttl)
                    self.last_seq = message.seq = self.last_seq + 1  # (:meth:`_number`, without a call)
                    shard = self._shard_seqs.get(message.shard_key)
                    if shard is None:
                        shard = self._shard_seqs[message.shard_key] = [message.shard_key, 0]
                    shard[1] += 1
                    message.shard_key, message.shard_seq = shard
                    return message
            # invalid, or not handled by C: the Python path decides and words the rejection
        message = self._admit_python(raw, publisher, federated, shard_count, now_ms)
        self._number(message)
        return message

    def _section_cache(self, shard_count: int | None) -> dict[bytes, object] | None:
        """The C path's cache for ``shard_count``, or None while the caches do not pay: a window of
        :data:`WINDOW` admissions in which fewer than one in :data:`WORTH` sections was read before
        (messages of distinct properties) turns them off for ``WORTH - 1`` windows, then one tries again."""
        self._window_left -= 1
        if self._window_left < 0:
            if self._caching:
                self._caching = self._window_repeats * WORTH >= WINDOW
                self._window_left = WINDOW - 1 if self._caching else WINDOW * (WORTH - 1) - 1
            else:
                self._caching, self._window_left = True, WINDOW - 1
            self._window_repeats = 0
        if not self._caching:
            return None
        cache = self._c_caches.get(shard_count)
        if cache is None:
            cache = self._c_caches[shard_count] = {}
        return cache

    def _number(self, message: BrokerMessage) -> None:
        """Give an admitted message its process-wide and its per-shard number, and its shard's key
        object (one per shard, not one per message: a buffered message stays small)."""
        self.last_seq = message.seq = self.last_seq + 1
        shard = self._shard_seqs.get(message.shard_key)
        if shard is None:
            shard = self._shard_seqs[message.shard_key] = [message.shard_key, 0]
        shard[1] += 1
        message.shard_key, message.shard_seq = shard

    def number_rejected(self) -> int:
        """A message number for a rejected message (from the same counter)."""
        self.last_seq += 1
        return self.last_seq

    def _admit_python(self, raw: bytes | bytearray, publisher: str, federated: bool, shard_count: int | None,
                      now_ms: int) -> BrokerMessage:
        try:
            scanned = scan_message(raw, decode_properties=False)
        except ScanError as exc:
            raise Rejected(f"malformed AMQP message: {exc}", "amqp:decode-error") from None
        start, end = scanned.application_properties_offset, scanned.application_properties_end
        key = (bytes(raw[start:end]) if start is not None else b"", shard_count)
        cache = self._cache
        entry = cache.get(key)
        self.repeated = entry is not None
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
        message = BrokerMessage(raw, properties, now_ms, federated, publisher, now_ms)
        ttl, absolute = scanned.ttl_ms, scanned.absolute_expiry_time_ms
        if ttl or absolute:
            self._explicit_expiry(message, ttl, absolute)
        else:
            message.expiry_ms = now_ms + self._default_ttl.get(properties.get("messageType"), self._fallback_ttl)
        return message

    def _explicit_expiry(self, message: BrokerMessage, ttl: int | None, absolute: int | None) -> None:
        """IP_033: the earlier of arrival + header ttl and absolute-expiry-time (capped by the policy)."""
        arrival = message.arrival_ms
        message.expiry_ms = expiry_ms(ttl, absolute, message.properties.get("messageType"), arrival, self.ttl_policy)
        by_ttl = ttl and (not absolute or arrival + ttl <= absolute)
        message.expiry_source = "ttl" if by_ttl else "absolute-expiry-time"

    @staticmethod
    def _check(raw: bytes | bytearray, start: int | None, end: int | None,
               shard_count: int | None) -> tuple[dict[str, object], str | None]:
        properties: dict[str, object]
        types: dict[str, str]
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
