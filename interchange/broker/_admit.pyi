"""Types of the optional C accelerator built from ``_admit.c`` (see :mod:`interchange.broker.admission`)."""

def admit(
    raw: bytes | bytearray | memoryview, capability_shard_count: int | None, /
) -> tuple[dict[str, object], bool, int | None, int | None] | None:
    """(properties, valid, ttl_ms, absolute_expiry_time_ms), or None: not handled here, use the Python path."""
