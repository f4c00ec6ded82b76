"""The AMQP 1.0 messages of the BI: the one the bridge sends (IF2 -> C-Roads), built from its sections,
and what it reads of one it gets (C-Roads -> IF2, :func:`read`).

IP_014/015: the IF2 body travels as one data section, byte for byte; the C-Roads properties
(:func:`~.keys.croads_properties`) as the application-properties section; the TTL left
(:meth:`~.attempts.Attempts.ttl_ms`) in the header. Every section is encoded by proton (AMQP
1.0 3.2: a message is its sections one after the other), so the application properties of one
mapping, the same for every message of one routing key and position, are encoded once and reused
(:func:`application_properties`), and each message only adds its header and its body
(:func:`message`, written as bytes: the header's three fields and the data section's length): proton's
``Message.encode`` spent ~30 µs per message putting the same dozen properties again. Decoded, the
bytes are the message ``Message(body, properties, inferred=True, ttl)`` would encode.

:func:`read` takes a message apart with the broker's scanner (:func:`~interchange.broker.amqp_scan.scan_message`:
the sections checked up to the body, the application properties as plain values, the header's
ttl) when its body is one data section at its end, the shape every C-Roads message has; any
other shape goes to proton's ``Message.decode``, which decides as before (a ``Message`` built the
proton way spent ~25 µs per message converting each property). The bridge reads with a
:class:`Reader`, which decodes an application-properties section once and gives its dict again
for the same bytes (decoding them was half of :func:`read`'s cost), and finds the sections with the
broker's C scanner (``_admit.locate``, where it is built: the same offsets as ``scan_message``, which
decides whatever it does not handle).
"""
from __future__ import annotations

from collections.abc import Callable
from struct import Struct
from typing import Any

from proton import Data, Message, ProtonException, ulong

from interchange.broker.admission import accelerator_available
from interchange.broker.amqp_scan import ScanError, decode_application_properties, scan_message

#: interchange.broker._admit.locate (typed in _admit.pyi), or None when the module is not built
_c_locate: Callable[[bytes | bytearray], tuple[int | None, int | None, int | None, int | None] | None] | None
try:
    from interchange.broker._admit import locate as _c_locate
except ImportError:  # not built (no compiler): scan_message alone
    _c_locate = None

__all__ = ["Reader", "application_properties", "message", "messages", "prefix", "read"]

APPLICATION_PROPERTIES = ulong(0x74)  #: its AMQP 1.0 3.2 descriptor


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


#: the header section of a message with a ttl: durable and priority null (their defaults), the ttl a uint
_HEADER = Struct(">3sBBBBBBI")
_DATA8, _DATA32, _SIZE32 = Struct(">3sBB"), Struct(">3sBI"), Struct(">I")
_HEADER_DESCRIPTOR, _DATA_DESCRIPTOR = b"\x00\x53\x70", b"\x00\x53\x75"


def _header(ttl_ms: int) -> bytes:
    # list8 (0xc0) of 8 bytes, 3 fields: null (0x40), null, uint (0x70) of 4 bytes
    return _HEADER.pack(_HEADER_DESCRIPTOR, 0xC0, 8, 3, 0x40, 0x40, 0x70, ttl_ms)


def _data(body: bytes) -> bytes:
    """The data section: vbin8 (0xa0) up to 255 bytes, else vbin32 (0xb0)."""
    if len(body) < 256:
        return _DATA8.pack(_DATA_DESCRIPTOR, 0xA0, len(body)) + body
    return _DATA32.pack(_DATA_DESCRIPTOR, 0xB0, len(body)) + body


def message(application: bytes, body: bytes, ttl_ms: int | None) -> bytes:
    """A whole message: its header (when it has a TTL), ``application`` (:func:`application_properties`)
    and ``body`` as one data section."""
    return prefix(application, ttl_ms) + _data(bytes(body))


#: (the data section's head: descriptor, then vbin8 or vbin32 and the size; for a caller putting messages together)
DATA8, DATA32, DATA = _DATA8, _DATA32, _DATA_DESCRIPTOR


def prefix(application: bytes, ttl_ms: int | None) -> bytes:
    """What :func:`message` puts before the data section: the header (with a TTL) and ``application``."""
    head = _header(min(max(0, ttl_ms), 2**32 - 1)) if ttl_ms is not None else b""
    return bytes(head + application)


def messages(parts: list[tuple[bytes, bytes, int | None]]) -> list[bytes]:
    """:func:`message` of each (application, body, ttl_ms), the same bytes: the messages of one read
    mostly share their mapping and ttl, so each distinct header and application properties are put
    together once for the batch and each message adds its data section."""
    prefixes: dict[tuple[int, int | None], bytes] = {}  # (by the section's id: ``parts`` keeps each alive)
    out = []
    pack8, pack32 = _DATA8.pack, _DATA32.pack
    for application, body, ttl_ms in parts:
        prefix = prefixes.get((id(application), ttl_ms))
        if prefix is None:
            head = _header(min(max(0, ttl_ms), 2**32 - 1)) if ttl_ms is not None else b""
            prefix = prefixes[(id(application), ttl_ms)] = bytes(head + application)
        if type(body) is not bytes:
            body = bytes(body)
        size = len(body)
        data = pack8(_DATA_DESCRIPTOR, 0xA0, size) if size < 256 else pack32(_DATA_DESCRIPTOR, 0xB0, size)
        out.append(b"".join((prefix, data, body)))
    return out


def read(raw: bytes | bytearray) -> tuple[dict[str, Any], int | None, bytes]:
    """A BI message's application properties, ttl (ms) and body; ValueError when its body is not
    one data section (IF2 carries the encoded message as bytes) or the bytes are not a message."""
    try:
        scanned = scan_message(raw)
    except ScanError as exc:
        raise ValueError(f"not an AMQP 1.0 message: {exc}") from None
    body = _data_body(raw, scanned.body_offset)
    if body is None:
        return _read_by_proton(raw)
    return scanned.application_properties, scanned.ttl_ms or None, body


class Reader:
    """:func:`read`, the application properties decoded once per distinct section (the last ``limit``
    kept): the messages of one publication repeat them. The dict returned for a section is the same
    for every message that carries it, so it is read, never changed."""

    def __init__(self, limit: int = 4096, accelerated: bool | None = None) -> None:
        self.limit = limit
        self._known: dict[bytes, dict[str, Any]] = {}
        if accelerated is None:
            accelerated = _c_locate is not None and accelerator_available()
        self._locate = _c_locate if accelerated else None

    def read(self, raw: bytes | bytearray) -> tuple[dict[str, Any], int | None, bytes]:
        located = self._locate(raw) if self._locate is not None else None
        if located is not None:  # (C: the sections where scan_message finds them; else scan_message decides)
            start, end, ttl_ms, body_at = located
            try:
                properties = {} if start is None or end is None else self._properties(raw, start, end)
            except ScanError as exc:
                raise ValueError(f"not an AMQP 1.0 message: {exc}") from None
            body = _data_body(raw, body_at)
            if body is None:
                return _read_by_proton(raw)
            return properties, ttl_ms or None, body
        try:
            scanned = scan_message(raw, decode_properties=False)
            start, end = scanned.application_properties_offset, scanned.application_properties_end
            properties = {} if start is None or end is None else self._properties(raw, start, end)
        except ScanError as exc:
            raise ValueError(f"not an AMQP 1.0 message: {exc}") from None
        body = _data_body(raw, scanned.body_offset)
        if body is None:
            return _read_by_proton(raw)
        return properties, scanned.ttl_ms or None, body

    def split(self, raw: bytes | bytearray) -> tuple[tuple[bytes, int | None], bytes] | None:
        """What :meth:`read` decodes, as bytes (the application-properties section and the ttl), and the body,
        for a message of the usual shape (its sections found by the C scanner, the body one data section at
        its end): equal keys read the same, whatever the sections between them (a message-id, a creation
        time). None: not known here (the scanner not built, or another shape: :meth:`read` decides)."""
        located = self._locate(raw) if self._locate is not None else None
        if located is None or (at := located[3]) is None:
            return None
        body = _data_body(raw, at)
        if body is None:
            return None
        start, end, ttl_ms = located[0], located[1], located[2]
        section = b"" if start is None or end is None else bytes(raw[start:end])
        return (section, ttl_ms), body

    def _properties(self, raw: bytes | bytearray, start: int, end: int) -> dict[str, Any]:
        section = bytes(raw[start:end])
        properties = self._known.get(section)
        if properties is None:
            properties = decode_application_properties(raw, start, end)[0]
            if len(self._known) >= self.limit:
                del self._known[next(iter(self._known))]  # the oldest
            self._known[section] = properties
        return properties


def _data_body(raw: bytes | bytearray, at: int | None) -> bytes | None:
    """The body when it is one data section at the end of ``raw`` (from ``at``), else None."""
    if at is None or not raw.startswith(_DATA_DESCRIPTOR, at):
        return None
    end = len(raw)
    if at + 5 <= end:
        code = raw[at + 3]
        if code == 0xA0 and at + 5 + raw[at + 4] == end:
            return raw[at + 5:] if type(raw) is bytes else bytes(raw[at + 5:])
        if code == 0xB0 and at + 8 <= end and at + 8 + _SIZE32.unpack_from(raw, at + 4)[0] == end:
            return raw[at + 8:] if type(raw) is bytes else bytes(raw[at + 8:])
    return None


def _read_by_proton(raw: bytes | bytearray) -> tuple[dict[str, Any], int | None, bytes]:
    """:func:`read` for a message of another shape (a footer, a body not one data section, other encodings)."""
    message = Message()
    try:
        message.decode(bytes(raw))
    except ProtonException as exc:
        raise ValueError(f"not an AMQP 1.0 message: {exc}") from None
    if not isinstance(message.body, (bytes, memoryview)) or not message.inferred:
        raise ValueError("the body is not one data section (IF2 carries the encoded message as bytes)")
    ttl_ms = int(message.ttl * 1000) if message.ttl else None
    return dict(message.properties or {}), ttl_ms, bytes(message.body)
