"""Types of the optional C accelerator built from ``_admit.c`` (see :mod:`interchange.broker.admission`)."""
from collections.abc import Callable

def admit(
    raw: bytes | bytearray | memoryview, capability_shard_count: int | None,
    cache: dict[bytes, object] | None = None, /
) -> tuple[dict[str, object], bool, int | None, int | None] | None:
    """(properties, valid, ttl_ms, absolute_expiry_time_ms), or None: not handled here, use the Python path.
    ``cache``: the caller's, one per capability shard count: the same section gives the same properties
    object again (read-only)."""

def locate(raw: bytes | bytearray | memoryview, /) -> tuple[int | None, int | None, int | None, int | None] | None:
    """(application-properties start, end, header ttl_ms, body offset) as scan_message finds them, or None:
    not handled here, use scan_message."""

def durable(fallback: Callable[[bytes | bytearray], bool], raw: bytes | bytearray, /) -> bool:
    """The header's durable field read at a glance (amqp_scan.header_durable's usual encodings, bytes only);
    anything else is ``fallback(raw)``'s answer."""
