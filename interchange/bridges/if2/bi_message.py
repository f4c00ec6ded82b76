"""IF2 -> C-Roads: the AMQP 1.0 message the bridge sends to the BI, built from its sections.

IP_014/015: the IF2 body travels as one data section, byte for byte; the C-Roads properties
(:func:`~.keys.croads_properties`) as the application-properties section; the TTL left
(:meth:`~.attempts.Attempts.ttl_ms`) in the header. Every section is encoded by proton (AMQP
1.0 3.2: a message is its sections one after the other), so the application properties of one
mapping, the same for every message of one routing key and position, are encoded once and reused
(:func:`application_properties`), and each message only adds its header and its body
(:func:`message`): proton's ``Message.encode`` spent ~30 µs per message putting the same dozen
properties again. Decoded, the bytes are the message ``Message(body, properties, inferred=True,
ttl)`` would encode.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proton import Data, ulong

__all__ = ["application_properties", "message"]

HEADER, APPLICATION_PROPERTIES, DATA = ulong(0x70), ulong(0x74), ulong(0x75)  #: AMQP 1.0 3.2 descriptors


def _section(descriptor: ulong, put: Callable[[Data], None]) -> bytes:
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(descriptor)
    put(data)
    data.exit()
    return data.encode()


def application_properties(properties: dict[str, Any]) -> bytes:
    """The application-properties section of ``properties`` (string keys, simple values: IP Table 1/2)."""
    return _section(APPLICATION_PROPERTIES, lambda data: data.put_dict(properties))


def _header(ttl_ms: int) -> bytes:
    def put(data: Data) -> None:
        data.put_list()
        data.enter()
        data.put_null()  # durable: false (the default)
        data.put_null()  # priority: 4 (the default)
        data.put_uint(ttl_ms)
        data.exit()
    return _section(HEADER, put)


def message(application: bytes, body: bytes, ttl_ms: int | None) -> bytes:
    """A whole message: its header (when it has a TTL), ``application`` (:func:`application_properties`)
    and ``body`` as one data section."""
    head = _header(max(0, ttl_ms)) if ttl_ms is not None else b""
    return head + application + _section(DATA, lambda data: data.put_binary(bytes(body)))

