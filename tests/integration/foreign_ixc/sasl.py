"""The server side of AMQP 1.0's SASL layer (OASIS AMQP 1.0, part 5.3), sans-I/O, EXTERNAL only.

IP_050: the peer is authenticated by its TLS client certificate, so the only mechanism offered is
EXTERNAL (RFC 4422 appendix A): its identity is the one TLS established. The exchange:

    client: "AMQP" 3 1 0 0                    server: "AMQP" 3 1 0 0, sasl-mechanisms [EXTERNAL]
    client: sasl-init (mechanism EXTERNAL)    server: sasl-outcome (code ok)
    client: "AMQP" 0 1 0 0 ...                (the AMQP layer, handed on as it comes)

SASL frames (part 2.3.1/5.3.1): size, DOFF 2, type 1, two ignored bytes, one described list
(sasl-mechanisms 0x40, sasl-init 0x41, sasl-outcome 0x44). Encoded and decoded with proton's
``Data`` codec (the AMQP type system of part 1). A client that does not start with the SASL
header, or asks for another mechanism, gets the SASL header or a failed outcome and is closed.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from proton import UNDESCRIBED, Array, Data, Described, symbol, ubyte, ulong

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_MECHANISMS, SASL_INIT, SASL_OUTCOME = 0x40, 0x41, 0x44
SASL_FRAME = 1
OK, AUTH = 0, 1
MAX_FRAME = 512  #: the SASL frames before authentication are small (part 5.3.1: at least 512 allowed)


def _frame(performative: int, fields: list[Any]) -> bytes:
    data = Data()
    data.put_object(Described(ulong(performative), fields))
    body = bytes(data.encode())
    return struct.pack(">IBBH", 8 + len(body), 2, SASL_FRAME, 0) + body


@dataclass(frozen=True)
class Step:
    """What to send, whether to close afterwards, and the AMQP bytes that follow a done exchange."""

    send: bytes = b""
    close: bool = False
    amqp: bytes | None = None

    def then(self, later: Step) -> Step:
        return Step(self.send + later.send, self.close or later.close, later.amqp if later.amqp is not None else self.amqp)


class SaslServer:
    """Fed the client's bytes; answers them. ``done`` once the outcome was ok."""

    def __init__(self) -> None:
        self._buffer = b""
        self._state = "header"
        self.done = False

    def receive(self, data: bytes) -> Step:
        self._buffer += data
        if self._state == "header":
            if len(self._buffer) < 8:
                return Step()
            if self._buffer[:8] != SASL_HEADER:
                return Step(SASL_HEADER, close=True)  # part 2.2: answer with the header we speak, then close
            self._buffer, self._state = self._buffer[8:], "init"
            offer = _frame(SASL_MECHANISMS, [Array(UNDESCRIBED, Data.SYMBOL, symbol("EXTERNAL"))])  # type: ignore[arg-type]
            return Step(SASL_HEADER + offer).then(self._init())
        if self._state == "init":
            return self._init()
        return Step()

    def _init(self) -> Step:
        if len(self._buffer) < 4:
            return Step()
        size = struct.unpack(">I", self._buffer[:4])[0]
        if not 8 <= size <= MAX_FRAME:
            return Step(_frame(SASL_OUTCOME, [ubyte(AUTH)]), close=True)
        if len(self._buffer) < size:
            return Step()
        frame, self._buffer = self._buffer[:size], self._buffer[size:]
        data = Data()
        data.decode(frame[frame[4] * 4:size])
        data.rewind()
        data.next()
        performative = data.get_object()
        fields = performative.value if isinstance(performative, Described) else None
        if not isinstance(performative, Described) or performative.descriptor != SASL_INIT \
                or not isinstance(fields, list) or not fields or fields[0] != "EXTERNAL":
            return Step(_frame(SASL_OUTCOME, [ubyte(AUTH)]), close=True)
        self._state, self.done = "done", True
        return Step(_frame(SASL_OUTCOME, [ubyte(OK)]), amqp=self._buffer)

