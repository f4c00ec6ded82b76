"""Text a peer sent, read from proton's C strings and checked (sans-I/O; AMQP 1.0 1.6.20: a string is UTF-8).

Proton keeps the peer's bytes as they came; its Python binding decodes them with ``.decode('utf8')``
and raises ``UnicodeDecodeError`` on invalid bytes, which would escape the engine as an exception
(the connection dropped without an AMQP close, a traceback on stderr). Every field the engines turn
into text goes through here instead:

- :func:`peer_text` decodes a field strictly and raises :class:`UndecodableField` with the field's
  name, the offending byte and its offset; the caller closes the connection or refuses the link
  with :data:`DECODE_ERROR` (``amqp:decode-error``) and that reason.
- :func:`condition_text` reads an error condition for the log only (the peer's or proton's):
  invalid bytes become ``\\xNN`` escapes, nothing is refused for a text that is only reported.
"""
from __future__ import annotations

from typing import Any

from cproton_ffi import ffi, lib

#: AMQP 1.0 2.8.15: "data could not be decoded".
DECODE_ERROR = "amqp:decode-error"


class UndecodableField(ValueError):
    """A peer's text field is not valid UTF-8: ``description`` names the field and the bad byte."""

    condition = DECODE_ERROR

    def __init__(self, field: str, raw: bytes, error: UnicodeDecodeError) -> None:
        bad = raw[error.start:error.start + 1].hex()
        self.description = f"{field} is not valid UTF-8 (byte 0x{bad} at offset {error.start})"
        super().__init__(self.description)
        self.field = field


def decode_text(raw: bytes, field: str) -> str:
    """``raw`` as UTF-8, or :class:`UndecodableField` naming ``field``."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UndecodableField(field, raw, exc) from None


def peer_text(pointer: Any, field: str) -> str | None:
    """A NUL-terminated C string from proton (None for NULL) decoded strictly; raises :class:`UndecodableField`."""
    if pointer == ffi.NULL:
        return None
    return decode_text(ffi.string(pointer), field)


def condition_text(condition: Any) -> tuple[str | None, str | None]:
    """(name, description) of a proton condition for the log: invalid UTF-8 escaped, never raised."""
    return _lenient(lib.pn_condition_get_name(condition)), _lenient(lib.pn_condition_get_description(condition))


def condition_line(condition: Any) -> str:
    """``name: description`` of a set condition (for a link's or connection's error text)."""
    name, description = condition_text(condition)
    return f"{name}: {description}"


def _lenient(pointer: Any) -> str | None:
    if pointer == ffi.NULL:
        return None
    return ffi.string(pointer).decode("utf-8", "backslashreplace")
