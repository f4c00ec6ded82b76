"""Message lifetime: default TTL per messageType and a message's effective expiry (IP_033, IP_034).

IP_033: TTL = repetition interval x 1.2, at least 1 s; IP_034: the broker's policies, configurable
through :class:`TtlPolicy`. The intervals, the factor and the minimum are the profile's
(:mod:`interchange.ground.profile`). A producer's own expiry (header ttl, absolute-expiry-time)
always wins over the default; ``maximum_ttl_ms`` caps every expiry (IP_034). The defaults per
messageType: docs/broker.md ("Message lifetime").
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_serializer, field_validator

from interchange.broker.amqp_scan import ScannedMessage
from interchange.ground.profile import FALLBACK_INTERVAL_MS, MESSAGE_TYPES, TTL, TtlRule

__all__ = ["DEFAULT_REPETITION_INTERVALS_MS", "DEFAULT_TTL_POLICY", "TtlPolicy", "default_ttl_ms", "effective_expiry_ms"]

#: BI repetition interval per messageType, in ms (the profile's; see the module docstring).
DEFAULT_REPETITION_INTERVALS_MS: Mapping[str, int] = MappingProxyType(
    {t.value: spec.repetition.interval_ms for t, spec in MESSAGE_TYPES.items()})


class TtlPolicy(BaseModel):
    """The broker's TTL policy (IP_033/034); immutable, built from configuration.

    ``repetition_interval_ms`` entries override the defaults per messageType, the others keep
    theirs; ``fallback_interval_ms`` serves a missing or unknown messageType.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    repetition_interval_ms: Mapping[str, PositiveInt] = Field(default_factory=dict, validate_default=True)
    fallback_interval_ms: PositiveInt = FALLBACK_INTERVAL_MS
    factor: float = Field(default=TTL.factor, gt=0, allow_inf_nan=False)
    minimum_ttl_ms: int = Field(default=TTL.minimum_ms, ge=0)
    maximum_ttl_ms: PositiveInt | None = None

    @field_validator("repetition_interval_ms", mode="after")
    @classmethod
    def _merge_defaults(cls, value: Mapping[str, int]) -> Mapping[str, int]:
        return MappingProxyType({**DEFAULT_REPETITION_INTERVALS_MS, **value})

    @field_serializer("repetition_interval_ms")
    def _plain_dict(self, value: Mapping[str, int]) -> dict[str, int]:
        return dict(value)

    def default_ttl_ms(self, message_type: object) -> int:
        """IP_033: repetition interval x factor, at least ``minimum_ttl_ms``, capped by ``maximum_ttl_ms``."""
        if isinstance(message_type, str):
            interval = self.repetition_interval_ms.get(message_type, self.fallback_interval_ms)
        else:
            interval = self.fallback_interval_ms
        ttl = TtlRule(self.factor, self.minimum_ttl_ms).ttl_ms(interval)
        if self.maximum_ttl_ms is not None and ttl > self.maximum_ttl_ms:
            return self.maximum_ttl_ms
        return ttl


#: The documented defaults (immutable).
DEFAULT_TTL_POLICY = TtlPolicy()


def default_ttl_ms(message_type: object, policy: TtlPolicy = DEFAULT_TTL_POLICY) -> int:
    """IP_033: the TTL in ms given to a message of ``message_type`` that carries no expiry."""
    return policy.default_ttl_ms(message_type)


def effective_expiry_ms(scanned: ScannedMessage, arrival_ms: int, policy: TtlPolicy = DEFAULT_TTL_POLICY) -> int:
    """The absolute time (ms since the epoch) after which the message is not delivered (IP_033).

    The earlier of arrival + header ttl and the properties' absolute-expiry-time; when the
    producer set neither, arrival + the policy's default for the message's messageType. A ttl or
    absolute-expiry-time of 0 counts as unset (JMS writes 0 for "never expires"). The policy's
    ``maximum_ttl_ms`` caps the result.
    """
    return expiry_ms(scanned.ttl_ms, scanned.absolute_expiry_time_ms,
                     scanned.application_properties.get("messageType"), arrival_ms, policy)


def expiry_ms(ttl: int | None, absolute: int | None, message_type: object, arrival_ms: int,
              policy: TtlPolicy = DEFAULT_TTL_POLICY) -> int:
    """:func:`effective_expiry_ms` from the individual fields (the broker's hot path)."""
    expiry = arrival_ms + ttl if ttl else None
    if absolute and (expiry is None or absolute < expiry):
        expiry = absolute
    if expiry is None:
        return arrival_ms + policy.default_ttl_ms(message_type)
    if policy.maximum_ttl_ms is not None:
        return min(expiry, arrival_ms + policy.maximum_ttl_ms)
    return expiry
