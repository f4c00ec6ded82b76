"""The peer's open frame, read before proton sees it (sans-I/O; AMQP 1.0 2.7.1).

Proton raises a ``max-frame-size`` below the AMQP minimum of 512 to 512 without telling the
application, so a peer that cannot take 512-byte frames would be sent them. :class:`OpenFrameCheck`
is fed the bytes the connection engine receives (after TLS and SASL), finds the open frame
after the AMQP protocol header and reports such a value, so the engine can refuse the
connection with ``amqp:invalid-field`` and log why. Only the first :data:`SCAN_LIMIT` bytes are
looked at; anything it cannot read is left to proton.

:func:`open_and_close` encodes the two frames that refuse a connection whose peer never completed
its open (a deadline passed, a frame proton could not decode): proton writes no close of its own
before the peer's open.
"""
from __future__ import annotations

import struct

from proton import Data, Described, symbol, ulong

#: AMQP 1.0 2.7.1: the smallest max-frame-size a peer may announce.
MIN_MAX_FRAME_SIZE = 512
#: Bytes of the connection start examined at most (an open frame with large properties is skipped).
SCAN_LIMIT = 16 * 1024
_OPEN_CODE = 0x10
_CLOSE_CODE = 0x18
_ERROR_CODE = 0x1D
_FRAME_HEADER = struct.Struct(">IBBH")
_HEADER = b"AMQP"


class OpenFrameCheck:
    """Fed the start of a connection; ``feed`` returns the too-small max-frame-size once found."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.done = False

    def feed(self, data: bytes | bytearray) -> int | None:
        """A max-frame-size below :data:`MIN_MAX_FRAME_SIZE` from the open frame, else None."""
        if self.done:
            return None
        self._buffer += data[: SCAN_LIMIT - len(self._buffer)]
        body = self._open_body()
        if body is None:
            if len(self._buffer) >= SCAN_LIMIT:
                self.done = True
            return None
        self.done = True
        self._buffer = bytearray()
        size = _max_frame_size(body)
        return size if size is not None and size < MIN_MAX_FRAME_SIZE else None

    def _open_body(self) -> bytes | None:
        """The first frame's body once it is complete (the protocol header skipped)."""
        buffer = self._buffer
        start = 8 if buffer[:4] == _HEADER else 0
        if len(buffer) < start + 8:
            return None
        size, doff = struct.unpack_from(">IB", buffer, start)
        if size < 8 or doff < 2 or start + size > SCAN_LIMIT:
            self.done = True  # not a frame this check can read: proton decides
            return None
        if len(buffer) < start + size:
            return None
        return bytes(buffer[start + 4 * doff : start + size])


def _max_frame_size(body: bytes) -> int | None:
    """Field 2 (max-frame-size) of an open performative, None if absent or not an open."""
    data = Data()
    try:
        data.decode(body)
        data.rewind()
        data.next()
        performative = data.get_object()
    except Exception:  # noqa: BLE001 (undecodable, whatever proton raises: the engine reports it)
        return None
    if not isinstance(performative, Described) or performative.descriptor != _OPEN_CODE:
        return None
    fields = performative.value
    if not isinstance(fields, list) or len(fields) < 3 or not isinstance(fields[2], int):
        return None
    return int(fields[2])


def open_and_close(container: str, condition: str, description: str) -> bytes:
    """An open frame (``container``) then a close frame with the error ``condition`` (AMQP 1.0 2.4.2/2.7.9)."""
    performatives = (Described(ulong(_OPEN_CODE), [container]),
                     Described(ulong(_CLOSE_CODE), [Described(ulong(_ERROR_CODE), [symbol(condition), description])]))
    frames = []
    for performative in performatives:
        data = Data()
        data.put_object(performative)
        body = data.encode()
        frames.append(_FRAME_HEADER.pack(8 + len(body), 2, 0, 0) + body)
    return b"".join(frames)
