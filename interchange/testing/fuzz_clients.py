"""Connections that speak a little AMQP, some of it broken, then vanish: for the tests and the soak
(no node imports this).

Each connection (:func:`churn_one`) runs TLS, SASL EXTERNAL, the AMQP header and an open, begins
sessions, attaches links (a publisher on ``target``, a consumer on ``source``, one on an address
that does not exist), sends transfers (a
valid message, copies with a few bytes changed, sometimes a frame of random bytes), reads what comes
back for a moment and aborts the socket (RST): the broker must free everything each one held.
"""
from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import ssl
import struct
from dataclasses import dataclass, field

from interchange.broker.sasl import AMQP_HEADER, SASL_HEADER, init_frame

_NULL = b"\x40"


def _frame(body: bytes, channel: int = 0) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


def _str8(value: bytes) -> bytes:
    return b"\xa1" + bytes([len(value)]) + value


def _list8(*items: bytes) -> bytes:
    body = b"".join(items)
    return b"\xc0" + bytes([len(body) + 1, len(items)]) + body


def _described(code: int, body: bytes) -> bytes:
    return b"\x00\x53" + bytes([code]) + body


def _attach(name: bytes, channel: int, handle: int, consumer: bool, address: bytes) -> bytes:
    terminus = _described(0x28 if consumer else 0x29, _list8(_str8(address)))
    source, target = (terminus, _NULL) if consumer else (_NULL, terminus)
    role = b"\x41" if consumer else b"\x42"
    return _frame(_described(0x12, _list8(_str8(name), b"\x52" + bytes([handle]), role, _NULL, _NULL, source,
                                          target)), channel)


def _transfer(channel: int, handle: int, delivery: int, payload: bytes) -> bytes:
    tag = delivery.to_bytes(4, "big")
    fields = _list8(b"\x52" + bytes([handle]), b"\x70" + delivery.to_bytes(4, "big"), b"\xa0\x04" + tag, b"\x43",
                    b"\x42")
    return _frame(_described(0x14, fields) + payload, channel)


def _flow(channel: int, handle: int, credit: int) -> bytes:
    window = b"\x70\x00\x00\x10\x00"
    return _frame(_described(0x13, _list8(b"\x43", window, b"\x43", window, b"\x52" + bytes([handle]), b"\x43",
                                          b"\x70" + credit.to_bytes(4, "big"))), channel)


@dataclass
class Churn:
    """What the churn connects to and sends."""

    host: str
    port: int
    context: ssl.SSLContext
    server_name: str
    message: bytes  #: a valid message for ``target`` (its mutants are sent too)
    target: bytes = b"in"
    source: bytes = b"all"
    rng: random.Random = field(default_factory=lambda: random.Random(1))
    done: int = 0

    def _mutant(self) -> bytes:
        data = bytearray(self.message)
        for _ in range(self.rng.randrange(1, 5)):
            data[self.rng.randrange(len(data))] = self.rng.randrange(256)
        return bytes(data)

    def script(self, n: int) -> bytes:
        """Everything one connection sends after the handshake."""
        rng = self.rng
        out = [SASL_HEADER, init_frame("EXTERNAL"), AMQP_HEADER,
               _frame(_described(0x10, _list8(_str8(b"churn-%d" % n))))]
        for channel in range(rng.randrange(1, 4)):
            window = b"\x70\x00\x00\x10\x00"
            out.append(_frame(_described(0x11, _list8(_NULL, b"\x52\x00", window, window)), channel))
            out.append(_attach(b"p%d-%d" % (n, channel), channel, 0, False, self.target))
            out.append(_attach(b"c%d-%d" % (n, channel), channel, 1, True, self.source))
            out.append(_flow(channel, 1, 50))
            out.append(_attach(b"x%d-%d" % (n, channel), channel, 2, rng.random() < 0.5, b"nowhere-%d" % n))
            for delivery in range(rng.randrange(1, 6)):
                out.append(_transfer(channel, 0, delivery, self.message if delivery % 2 == 0 else self._mutant()))
        if rng.random() < 0.3:
            out.append(_frame(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))))
        return b"".join(out)


async def churn_one(churn: Churn, n: int) -> None:
    """One connection: the script, a short read, then an abort (RST)."""
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.open_connection(churn.host, churn.port, ssl=churn.context,
                                                       server_hostname=churn.server_name,
                                                       ssl_handshake_timeout=10)
        writer.write(churn.script(n))
        await writer.drain()
        with contextlib.suppress(asyncio.TimeoutError, OSError, ssl.SSLError):
            async with asyncio.timeout(0.05):
                await reader.read(65536)
    except (OSError, ssl.SSLError, asyncio.TimeoutError):
        pass
    finally:
        if writer is not None:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        churn.done += 1


async def churn(churn: Churn, count: int, concurrency: int = 20) -> None:
    """``count`` connections, ``concurrency`` at a time."""
    limit = asyncio.Semaphore(concurrency)

    async def limited(n: int) -> None:
        async with limit:
            await churn_one(churn, n)

    await asyncio.gather(*(limited(n) for n in range(count)))
