"""Types of the optional C reader built from ``_deliveries.c`` (see :mod:`interchange.bridges.if2.amqp091`)."""
from typing import Any

def read(buffer: bytearray, offset: int, channels: dict[int, Any], properties: dict[bytes, Any],
         names: dict[bytes, tuple[str, str, str]], delivery_type: type, events: list[Any], /) -> int:
    """Append the whole deliveries in a row from ``offset`` to ``events``; the offset of the first frame not read."""
