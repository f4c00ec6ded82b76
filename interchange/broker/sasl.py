"""Sans-I/O server side of the AMQP 1.0 SASL layer (AMQP 1.0 part 5.3).

The node terminates TLS itself, so the connection's identity is already known
(the TLS peer certificate's Common Name, IP_050) before SASL starts. This object
runs the small SASL exchange in front of proton's engine: it offers EXTERNAL and
ANONYMOUS, accepts either, and hands the bytes that follow the SASL outcome to
the AMQP engine. A client that skips SASL and sends the plain AMQP header is
accepted as well when ``allow_no_sasl`` is set: its identity is the certificate.

Usage: feed received bytes to :meth:`SaslServer.receive`; it returns a
:class:`SaslStep` with the bytes to send, and once finished the leftover bytes
that belong to the AMQP layer (``amqp_bytes``) or a failure reason.
:attr:`SaslServer.deadline` is when the current stage must end (the protocol header from
the server's start, the sasl-init from the header: :mod:`interchange.broker.deadlines`);
:meth:`SaslServer.on_timer` fails the exchange once it has passed.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from interchange.broker.deadlines import Deadline, StageTimeouts, stage_deadline

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
_FRAME_SASL = 0x01
_SASL_MECHANISMS = 0x40
_SASL_INIT = 0x41
_SASL_OUTCOME = 0x44
OUTCOME_OK = 0
OUTCOME_AUTH = 1
#: Largest SASL frame accepted; the AMQP minimum max-frame-size is 512 (part 5.3.1).
MAX_SASL_FRAME = 8192

_U32 = struct.Struct(">I")


class SaslProtocolError(ValueError):
    """The peer sent something that is not a valid SASL exchange."""


@dataclass(frozen=True, slots=True)
class SaslStep:
    """What the I/O layer must do after one :meth:`SaslServer.receive` call.

    ``send``: bytes to write to the peer. ``done``: SASL is over and AMQP follows;
    ``amqp_bytes`` then holds the received bytes that belong to the AMQP layer.
    ``error``: the exchange failed; write ``send`` then close the connection.
    """

    send: bytes = b""
    done: bool = False
    amqp_bytes: bytes = b""
    error: str | None = None
    mechanism: str | None = None


def _symbol_array(symbols: tuple[str, ...]) -> bytes:
    items = b"".join(bytes([len(s)]) + s.encode("ascii") for s in symbols)
    body = bytes([len(symbols), 0xA3]) + items  # count, element constructor sym8
    if len(body) > 255:
        raise ValueError("too many mechanisms for an array8")
    return bytes([0xE0, len(body)]) + body


def _frame(descriptor: int, fields: bytes, count: int) -> bytes:
    body = b"\x00\x53" + bytes([descriptor, 0xC0, len(fields) + 1, count]) + fields
    return _U32.pack(8 + len(body)) + bytes([2, _FRAME_SASL, 0, 0]) + body


def mechanisms_frame(mechanisms: tuple[str, ...]) -> bytes:
    """Encode a sasl-mechanisms frame offering ``mechanisms``."""
    return _frame(_SASL_MECHANISMS, _symbol_array(mechanisms), 1)


def outcome_frame(code: int) -> bytes:
    """Encode a sasl-outcome frame with the given code (0 = ok, 1 = auth)."""
    return _frame(_SASL_OUTCOME, bytes([0x50, code]), 1)


def _parse_init_mechanism(body: bytes) -> str:
    """Return the mechanism named by a sasl-init frame body (descriptor + list)."""
    if len(body) < 3 or body[0] != 0x00:
        raise SaslProtocolError("SASL frame body is not a described type")
    ctor = body[1]
    if ctor == 0x53:
        code, pos = body[2], 3
    elif ctor == 0x80 and len(body) >= 10:
        code, pos = int.from_bytes(body[2:10], "big"), 10
    elif ctor == 0xA3 and len(body) >= 3:
        end = 3 + body[2]
        name = body[3:end]
        code = {b"amqp:sasl-init:list": _SASL_INIT}.get(bytes(name), -1)
        pos = end
    else:
        raise SaslProtocolError("unsupported SASL frame descriptor")
    if code != _SASL_INIT:
        raise SaslProtocolError(f"expected sasl-init, got performative 0x{code:x}")
    if pos >= len(body):
        raise SaslProtocolError("truncated sasl-init")
    lctor = body[pos]
    if lctor == 0xC0:
        pos += 3
    elif lctor == 0xD0:
        pos += 9
    else:
        raise SaslProtocolError("sasl-init fields are not a list")
    if pos >= len(body):
        raise SaslProtocolError("sasl-init without mechanism")
    sctor = body[pos]
    if sctor == 0xA3:
        start, length = pos + 2, body[pos + 1] if pos + 1 < len(body) else 0
    elif sctor == 0xB3:
        if pos + 5 > len(body):
            raise SaslProtocolError("truncated mechanism")
        start, length = pos + 5, _U32.unpack_from(body, pos + 1)[0]
    else:
        raise SaslProtocolError("sasl-init mechanism is not a symbol")
    if start + length > len(body):
        raise SaslProtocolError("truncated mechanism")
    try:
        return body[start : start + length].decode("ascii")
    except UnicodeDecodeError:
        raise SaslProtocolError("mechanism is not ASCII") from None


class SaslServer:
    """Server-side SASL state machine (sans-I/O).

    IP_050: authentication is the mutual TLS certificate; SASL EXTERNAL is offered
    (clients configured for certificate authentication use it) and ANONYMOUS may be.
    """

    def __init__(
        self,
        mechanisms: tuple[str, ...] = ("EXTERNAL", "ANONYMOUS"),
        allow_no_sasl: bool = True,
        now: float = 0.0,
        timeouts: StageTimeouts = StageTimeouts(),
    ) -> None:
        self._mechanisms = mechanisms
        self._allow_no_sasl = allow_no_sasl
        self._buffer = bytearray()
        self._state = "header"
        self._timeouts = timeouts
        self._deadline = stage_deadline(now, timeouts.header_s, "protocol header")

    @property
    def finished(self) -> bool:
        return self._state in ("done", "failed")

    @property
    def deadline(self) -> Deadline | None:
        """When the current stage (protocol header, then SASL exchange) must end; None once finished."""
        return None if self.finished else self._deadline

    def on_timer(self, now: float) -> SaslStep | None:
        """The stage's deadline passed: the exchange fails with the reason (close the connection)."""
        deadline = self.deadline
        if deadline is None or not deadline.passed(now):
            return None
        return self._fail(b"", deadline.reason)

    def receive(self, data: bytes, now: float | None = None) -> SaslStep:
        """Consume received bytes (at ``now``, which starts the SASL exchange's deadline once the
        header is complete); return what to send and whether SASL is over."""
        if self.finished:
            raise RuntimeError("SASL exchange already finished")
        self._buffer += data
        out = bytearray()
        if self._state == "header":
            if len(self._buffer) < 8:
                if not SASL_HEADER.startswith(bytes(self._buffer)) and not AMQP_HEADER.startswith(bytes(self._buffer)):
                    return self._fail(out + SASL_HEADER, "not an AMQP 1.0 protocol header")
                return SaslStep(send=bytes(out))
            header = bytes(self._buffer[:8])
            if header == AMQP_HEADER and self._allow_no_sasl:
                self._state = "done"
                rest = bytes(self._buffer)
                self._buffer.clear()
                return SaslStep(done=True, amqp_bytes=rest, mechanism=None)
            if header != SASL_HEADER:
                return self._fail(out + SASL_HEADER, f"unsupported protocol header {header!r}")
            del self._buffer[:8]
            out += SASL_HEADER + mechanisms_frame(self._mechanisms)
            self._state = "init"
            started = self._deadline.at - self._deadline.timeout_s if now is None else now
            self._deadline = stage_deadline(started, self._timeouts.sasl_s, "SASL exchange (sasl-init)")
        if self._state == "init":
            if len(self._buffer) < 8:
                return SaslStep(send=bytes(out))
            size = _U32.unpack_from(self._buffer, 0)[0]
            doff, ftype = self._buffer[4], self._buffer[5]
            if size < 8 or size > MAX_SASL_FRAME or doff < 2 or doff * 4 > size or ftype != _FRAME_SASL:
                return self._fail(out, "malformed SASL frame header")
            if len(self._buffer) < size:
                return SaslStep(send=bytes(out))
            body = bytes(self._buffer[doff * 4 : size])
            del self._buffer[:size]
            try:
                mechanism = _parse_init_mechanism(body)
            except SaslProtocolError as exc:
                return self._fail(out, str(exc))
            if mechanism not in self._mechanisms:
                return self._fail(out + outcome_frame(OUTCOME_AUTH), f"mechanism {mechanism!r} not offered")
            out += outcome_frame(OUTCOME_OK)
            self._state = "done"
            rest = bytes(self._buffer)
            self._buffer.clear()
            return SaslStep(send=bytes(out), done=True, amqp_bytes=rest, mechanism=mechanism)
        raise AssertionError(self._state)

    def _fail(self, send: bytes | bytearray, reason: str) -> SaslStep:
        self._state = "failed"
        self._buffer.clear()
        return SaslStep(send=bytes(send), error=reason)


def init_frame(mechanism: str) -> bytes:
    """Encode a sasl-init frame choosing ``mechanism`` (no initial response)."""
    name = mechanism.encode("ascii")
    return _frame(_SASL_INIT, bytes([0xA3, len(name)]) + name, 1)


class SaslClient:
    """Client side of the SASL exchange (sans-I/O), for the node's own outgoing connections.

    Sends the SASL header and a sasl-init for ``mechanism`` (EXTERNAL: the identity is our TLS
    client certificate), then waits for the server's sasl-mechanisms and sasl-outcome.
    """

    def __init__(self, mechanism: str = "EXTERNAL") -> None:
        self._mechanism = mechanism
        self._buffer = bytearray()
        self._state = "header"
        self._offered: tuple[str, ...] = ()

    @property
    def finished(self) -> bool:
        return self._state in ("done", "failed")

    def start(self) -> bytes:
        """The bytes to send first: SASL header and sasl-init (pipelined)."""
        return SASL_HEADER + init_frame(self._mechanism)

    def receive(self, data: bytes) -> SaslStep:
        if self.finished:
            raise RuntimeError("SASL exchange already finished")
        self._buffer += data
        while True:
            if self._state == "header":
                if len(self._buffer) < 8:
                    return SaslStep()
                if bytes(self._buffer[:8]) != SASL_HEADER:
                    return self._fail(f"server answered with protocol header {bytes(self._buffer[:8])!r}")
                del self._buffer[:8]
                self._state = "frames"
            if len(self._buffer) < 8:
                return SaslStep()
            size = _U32.unpack_from(self._buffer, 0)[0]
            doff, ftype = self._buffer[4], self._buffer[5]
            if size < 8 or size > MAX_SASL_FRAME or doff < 2 or doff * 4 > size or ftype != _FRAME_SASL:
                return self._fail("malformed SASL frame header")
            if len(self._buffer) < size:
                return SaslStep()
            body = bytes(self._buffer[doff * 4 : size])
            del self._buffer[:size]
            if len(body) < 3 or body[0] != 0 or body[1] != 0x53:
                return self._fail("unsupported SASL frame")
            code = body[2]
            if code == _SASL_MECHANISMS:
                continue  # we already chose; an unsupported choice comes back as the outcome
            if code != _SASL_OUTCOME:
                return self._fail(f"unexpected SASL performative 0x{code:x}")
            # outcome list: first field is the ubyte code
            first = 6 if body[3:4] == b"\xc0" else 12 if body[3:4] == b"\xd0" else len(body)
            outcome = body[first + 1] if len(body) > first + 1 and body[first] == 0x50 else None
            if outcome != OUTCOME_OK:
                return self._fail(f"SASL {self._mechanism} refused by the server (outcome {outcome})")
            self._state = "done"
            rest = bytes(self._buffer)
            self._buffer.clear()
            return SaslStep(done=True, amqp_bytes=rest, mechanism=self._mechanism)

    def _fail(self, reason: str) -> SaslStep:
        self._state = "failed"
        self._buffer.clear()
        return SaslStep(error=reason)
