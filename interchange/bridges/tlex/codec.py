"""TCPStreaming protocol version 0x01 (TLEX-BROKER-SYSTEM 6.2-6.3, UDAP TLC 3.2-3.3), sans-I/O.

Version preamble 0x01 (6.2); frames ``0xAA 0xBB`` + big-endian 2-byte size (1..0xFFFF) + data, the
prefix checked on every frame (:class:`FramingError`, 6.3.1/6.3.2); datagrams by their first byte
(6.3.4: 0x00-0x07, Monitor Payload 0xF0). :class:`StreamDecoder` is fed received bytes and
returns the datagrams they complete; :func:`encode` turns a datagram into one frame. Nothing here
reads a clock or a socket. The byte values: docs/tlex-bridge.md ("TCPStreaming").
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

PROTOCOL_VERSION: Final = 0x01
PREAMBLE: Final = bytes([PROTOCOL_VERSION])
FRAME_PREFIX: Final = b"\xaa\xbb"
HEADER_SIZE: Final = 4
MAX_FRAME_DATA: Final = 0xFFFF
TLC_ID_SIZE: Final = 8
#: Payload type bytes 0xF0..0xFF are reserved for protocol use (6.3.4.5).
RESERVED_PAYLOAD_TYPES: Final = range(0xF0, 0x100)
MONITOR_PAYLOAD: Final = 0xF0

KEEP_ALIVE, TOKEN, BYE, RECONNECT, PAYLOAD, PAYLOAD_TLC, TIMESTAMPS_REQUEST, TIMESTAMPS_RESPONSE = range(8)

_HEADER = struct.Struct(">2sH")
_U64 = struct.Struct(">Q")
_PAYLOAD_HEAD = struct.Struct(">BBQ")  # type, payload type, origin timestamp
_PAYLOAD_TLC_HEAD = struct.Struct(">B8sBQ")  # type, TLC identifier, payload type, origin timestamp
_TS_REQUEST = struct.Struct(">BQ")
_TS_RESPONSE = struct.Struct(">BQQQ")
_MONITOR_TAIL = struct.Struct(">QQB")  # publishing ts, sent ts, original payload type
_U32 = struct.Struct(">I")
#: The largest payload one frame carries in a 0x05 datagram (one with a TLC identifier): 65,517 bytes.
MAX_TLC_PAYLOAD: Final = MAX_FRAME_DATA - _PAYLOAD_TLC_HEAD.size


class StreamError(ValueError):
    """The peer broke TCPStreaming; the connection must be closed. ``kind`` names the breach."""

    kind = "protocol"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.decoded: list[Datagram] = []  #: the datagrams completed before the breach (to be processed)


class VersionError(StreamError):
    """The first byte of the stream is not a protocol version we speak (6.2)."""

    kind = "version"


class FramingError(StreamError):
    """Prefix mismatch or empty frame (6.3.2): drop the connection as soon as possible."""

    kind = "framing"


class DatagramError(StreamError):
    """A well-framed datagram that is malformed (unknown type, wrong length, non-ASCII)."""

    kind = "datagram"


@dataclass(frozen=True, slots=True)
class KeepAlive:
    pass


@dataclass(frozen=True, slots=True)
class Token:
    token: str


@dataclass(frozen=True, slots=True)
class Bye:
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Reconnect:
    pass


@dataclass(frozen=True, slots=True)
class Payload:
    """A payload datagram: 0x05 when ``tlc`` is set (multiplex, broker), 0x04 otherwise (singleplex)."""

    payload_type: int
    origin_ms: int
    payload: bytes
    tlc: str | None = None


@dataclass(frozen=True, slots=True)
class TimestampsRequest:
    t0: int


@dataclass(frozen=True, slots=True)
class TimestampsResponse:
    t0: int
    t1: int
    t2: int


@dataclass(frozen=True, slots=True)
class MonitorPayload:
    """The diagnostic wrapper of payload type 0xF0 (6.3.4.5.4); an empty token marks a resent payload."""

    publisher_token: str
    published_ms: int
    sent_ms: int
    payload_type: int
    payload: bytes


Datagram = KeepAlive | Token | Bye | Reconnect | Payload | TimestampsRequest | TimestampsResponse


def _ascii(data: bytes, what: str) -> str:
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise DatagramError(f"{what} is not ASCII") from None


def _ascii_bytes(text: str, what: str) -> bytes:
    try:
        return text.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be ASCII: {text!r}") from None


def tlc_id_bytes(tlc: str) -> bytes:
    """The 8-byte ASCII TLC identifier field; other lengths cannot be sent (6.3.4.5.3)."""
    raw = _ascii_bytes(tlc, "TLC identifier")
    if len(raw) != TLC_ID_SIZE:
        raise ValueError(f"a TLC identifier is {TLC_ID_SIZE} ASCII characters, got {tlc!r}")
    return raw


def _check_u64(value: int, what: str) -> int:
    if not 0 <= value < 1 << 64:
        raise ValueError(f"{what} out of range: {value}")
    return value


def _datagram_bytes(datagram: Datagram) -> bytes:
    match datagram:
        case KeepAlive():
            return bytes([KEEP_ALIVE])
        case Token(token=token):
            return bytes([TOKEN]) + _ascii_bytes(token, "token")
        case Bye(reason=reason):
            return bytes([BYE]) + _ascii_bytes(reason, "Bye reason")
        case Reconnect():
            return bytes([RECONNECT])
        case Payload(tlc=None) as p:
            return _PAYLOAD_HEAD.pack(PAYLOAD, _payload_type(p.payload_type), _check_u64(p.origin_ms, "origin")) + p.payload
        case Payload(tlc=str(tlc)) as p:
            head = _PAYLOAD_TLC_HEAD.pack(PAYLOAD_TLC, tlc_id_bytes(tlc), _payload_type(p.payload_type),
                                          _check_u64(p.origin_ms, "origin"))
            return head + p.payload
        case TimestampsRequest(t0=t0):
            return _TS_REQUEST.pack(TIMESTAMPS_REQUEST, _check_u64(t0, "t0"))
        case TimestampsResponse(t0=t0, t1=t1, t2=t2):
            return _TS_RESPONSE.pack(TIMESTAMPS_RESPONSE, _check_u64(t0, "t0"), _check_u64(t1, "t1"), _check_u64(t2, "t2"))
    raise TypeError(f"not a datagram: {datagram!r}")


def _payload_type(value: int) -> int:
    if not 0 <= value <= 0xFF:
        raise ValueError(f"payload type is one byte: {value}")
    return value


def encode(datagram: Datagram) -> bytes:
    """One frame (header + datagram). Raises ValueError for what cannot be framed (> 0xFFFF bytes)."""
    data = _datagram_bytes(datagram)
    if len(data) > MAX_FRAME_DATA:
        raise ValueError(f"datagram of {len(data)} bytes does not fit one frame (max {MAX_FRAME_DATA})")
    return _HEADER.pack(FRAME_PREFIX, len(data)) + data


def encode_monitor_payload(monitor: MonitorPayload) -> bytes:
    """The payload bytes of a 0xF0 Monitor Payload."""
    token = _ascii_bytes(monitor.publisher_token, "publisher token")
    tail = _MONITOR_TAIL.pack(_check_u64(monitor.published_ms, "published"), _check_u64(monitor.sent_ms, "sent"),
                              _payload_type(monitor.payload_type))
    return _U32.pack(len(token)) + token + tail + monitor.payload


def decode_monitor_payload(data: bytes) -> MonitorPayload:
    """Parse the payload of a 0xF0 datagram; DatagramError if it is truncated."""
    if len(data) < _U32.size:
        raise DatagramError("monitor payload shorter than its token length")
    (length,) = _U32.unpack_from(data, 0)
    start = _U32.size + length
    if len(data) < start + _MONITOR_TAIL.size:
        raise DatagramError("monitor payload truncated")
    token = _ascii(data[_U32.size:start], "publisher token")
    published, sent, payload_type = _MONITOR_TAIL.unpack_from(data, start)
    return MonitorPayload(token, published, sent, payload_type, bytes(data[start + _MONITOR_TAIL.size:]))


def _decode_payload(data: bytes) -> Payload:
    if len(data) < _PAYLOAD_HEAD.size:
        raise DatagramError("payload datagram (0x04) shorter than its header")
    _, payload_type, origin = _PAYLOAD_HEAD.unpack_from(data)
    return Payload(payload_type, origin, bytes(data[_PAYLOAD_HEAD.size:]))


def _decode_payload_tlc(data: bytes) -> Payload:
    if len(data) < _PAYLOAD_TLC_HEAD.size:
        raise DatagramError("payload datagram (0x05) shorter than its header")
    _, tlc, payload_type, origin = _PAYLOAD_TLC_HEAD.unpack_from(data)
    return Payload(payload_type, origin, bytes(data[_PAYLOAD_TLC_HEAD.size:]), _ascii(tlc, "TLC identifier"))


def _fixed(size: int, what: str, data: bytes) -> None:
    if len(data) != size:
        raise DatagramError(f"{what} datagram has {len(data)} bytes, expected {size}")


def _decode_ts_request(data: bytes) -> TimestampsRequest:
    _fixed(_TS_REQUEST.size, "Timestamps request", data)
    return TimestampsRequest(_TS_REQUEST.unpack(data)[1])


def _decode_ts_response(data: bytes) -> TimestampsResponse:
    _fixed(_TS_RESPONSE.size, "Timestamps response", data)
    _, t0, t1, t2 = _TS_RESPONSE.unpack(data)
    return TimestampsResponse(t0, t1, t2)


def _decode_keep_alive(data: bytes) -> KeepAlive:
    _fixed(1, "KeepAlive", data)
    return KeepAlive()


def _decode_reconnect(data: bytes) -> Reconnect:
    _fixed(1, "Reconnect", data)
    return Reconnect()


def _decode_token(data: bytes) -> Token:
    return Token(_ascii(data[1:], "token"))


def _decode_bye(data: bytes) -> Bye:
    return Bye(_ascii(data[1:], "Bye reason"))


_DECODERS: dict[int, Callable[[bytes], Datagram]] = {
    KEEP_ALIVE: _decode_keep_alive,
    TOKEN: _decode_token,
    BYE: _decode_bye,
    RECONNECT: _decode_reconnect,
    PAYLOAD: _decode_payload,
    PAYLOAD_TLC: _decode_payload_tlc,
    TIMESTAMPS_REQUEST: _decode_ts_request,
    TIMESTAMPS_RESPONSE: _decode_ts_response,
}


def decode_datagram(data: bytes) -> Datagram:
    """The datagram held by one frame's data (non-empty)."""
    decoder = _DECODERS.get(data[0])
    if decoder is None:
        raise DatagramError(f"unknown datagram type 0x{data[0]:02x}")
    return decoder(data)


class StreamDecoder:
    """Received bytes -> datagrams, for one direction of one connection.

    The first byte must be the protocol version (``expect_preamble``). After a StreamError
    the decoder is poisoned: the connection is to be closed, not resynchronised.
    """

    def __init__(self, expect_preamble: bool = True) -> None:
        self._buffer = bytearray()
        self._need_preamble = expect_preamble
        self._failed: StreamError | None = None
        self.frames = 0

    def feed(self, data: bytes) -> list[Datagram]:
        """Datagrams completed by ``data``; raises StreamError on the first breach (and after)."""
        if self._failed is not None:
            raise type(self._failed)(str(self._failed))
        self._buffer += data
        out: list[Datagram] = []
        try:
            self._drain(out)
        except StreamError as exc:
            exc.decoded = out
            self._failed = exc
            self._buffer.clear()
            raise
        return out

    def _drain(self, out: list[Datagram]) -> None:
        buffer, pos = self._buffer, 0
        if self._need_preamble and buffer:
            if buffer[0] != PROTOCOL_VERSION:
                raise VersionError(f"protocol version 0x{buffer[0]:02x} not supported (0x01 only)")
            self._need_preamble, pos = False, 1
        while len(buffer) - pos >= 2:
            if buffer[pos:pos + 2] != FRAME_PREFIX:  # checked as soon as the two bytes are in
                raise FramingError(f"frame prefix {bytes(buffer[pos:pos + 2]).hex()} is not aabb")
            if len(buffer) - pos < HEADER_SIZE:
                break
            _, size = _HEADER.unpack_from(buffer, pos)
            if size == 0:
                raise FramingError("empty frame (data size 0)")
            end = pos + HEADER_SIZE + size
            if end > len(buffer):
                break
            out.append(decode_datagram(bytes(buffer[pos + HEADER_SIZE:end])))
            pos = end
            self.frames += 1
        del buffer[:pos]

    @property
    def buffered(self) -> int:
        return len(self._buffer)
