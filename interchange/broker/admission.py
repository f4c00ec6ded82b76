"""Admission of one incoming message: scan, validate, compute its expiry (sans-I/O).

IP_008: only the application properties are read (the body is never decoded);
IP_016: a malformed message is rejected (the broker drops and logs it);
IP_022/026/029/100/103/122/123/131/135: the application properties of tables 1-7;
IP_033/034: TTL from the header or absolute-expiry-time, else the per-messageType default.
"""
from __future__ import annotations

from interchange.broker.amqp_scan import ScanError, scan_message
from interchange.broker.engine import Rejected
from interchange.broker.message import BrokerMessage
from interchange.broker.ttl_policy import TtlPolicy, effective_expiry_ms
from interchange.broker.validation import validate_application_properties


class Admission:
    """Turns received bytes into a :class:`BrokerMessage` or raises :class:`Rejected`."""

    def __init__(self, ttl_policy: TtlPolicy) -> None:
        self.ttl_policy = ttl_policy

    def admit(self, raw: bytes, publisher: str, federated: bool, shard_count: int | None,
              now_ms: int) -> BrokerMessage:
        try:
            scanned = scan_message(raw)
        except ScanError as exc:
            raise Rejected(f"malformed AMQP message: {exc}", "amqp:decode-error") from None
        problems = validate_application_properties(
            scanned.application_properties, scanned.application_property_types, capability_shard_count=shard_count)
        if problems:
            raise Rejected("invalid application properties: " + "; ".join(str(p) for p in problems))
        expiry = effective_expiry_ms(scanned, now_ms, self.ttl_policy)
        return BrokerMessage(raw, scanned.application_properties, expiry, federated, publisher, now_ms)
