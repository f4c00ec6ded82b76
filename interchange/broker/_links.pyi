"""Types of the optional C path built from ``_links.c`` (see :mod:`interchange.broker.engine`)."""
from typing import Any

def bind(functions: tuple[int, ...], delivery_event: int, released: int, modified: int, /) -> None:
    """proton's functions by address (the engine's own library, through cffi), the PN_DELIVERY event
    type and the RELEASED and MODIFIED outcomes."""

def deliver(link: int, tag: int, raw: bytes | bytearray, /) -> int:
    """A delivery on ``link`` tagged ``tag`` (8 bytes, big-endian) carrying ``raw``, the link advanced: its address."""

def deliver_run(link: int, tag: int, messages: list[Any], unsettled: dict[int, Any], /) -> int:
    """:func:`deliver` of each message's ``raw``, tagged ``tag + 1``, ``tag + 2``, ..., each message put in
    ``unsettled`` under its delivery's address: how many were sent."""

def settled(collector: int, consumers: dict[int, object], durable: list[tuple[object, object]], /) -> int:
    """The consumers' settlements at the head of ``collector``'s events handled (see ``_links.c``): how many."""
