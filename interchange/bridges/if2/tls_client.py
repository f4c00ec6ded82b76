"""Client-side TLS as a plain object fed bytes (sans-I/O), for the bridge's AMQP 0-9-1 connection
(:mod:`.amqp091_io`): ciphertext in, plaintext and bytes to write out.

asyncio's own TLS transport puts a protocol of its own (and its buffers, a copy and an exception per
read) between the socket and the bridge, and keeps reading the socket while the bridge does not read
(:meth:`~.amqp091_io.Client.rest`): each such read is a wake-up of the node. With the session here, the
client's transport is the plain socket's, one ``data_received`` is one socket read, decrypted in one
loop, and pausing the transport stops the socket's reads.

- :meth:`TlsClient.start` gives the ClientHello;
- :meth:`TlsClient.receive` takes what came from the socket and returns a :class:`Received`: the
  plaintext, the bytes to write back (handshake flights, post-handshake replies), whether the
  handshake just completed and whether the peer closed (close_notify); a failure raises
  :class:`ssl.SSLError` (the certificate checks of the context and ``server_hostname`` as asyncio's);
- :meth:`TlsClient.send` encrypts plaintext; :meth:`TlsClient.close` gives close_notify.
"""
from __future__ import annotations

import ssl
from typing import NamedTuple

__all__ = ["Received", "TlsClient"]

#: plaintext asked for per ``SSLObject.read``: OpenSSL returns at most one record (16 KiB) per call
READ_SIZE = 16 * 1024 + 256


class Received(NamedTuple):
    plaintext: bytes
    reply: bytes  #: to write to the socket (before anything sent after this)
    opened: bool = False  #: the handshake completed with this input
    closed: bool = False  #: the peer sent close_notify (or ended the stream)


class TlsClient:
    def __init__(self, context: ssl.SSLContext, server_hostname: str | None) -> None:
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=False,
                                     server_hostname=server_hostname)
        self.open = False  #: the handshake is complete

    def start(self) -> bytes:
        """The first handshake flight (ClientHello)."""
        return self._handshake()

    def receive(self, data: bytes | memoryview) -> Received:
        self._incoming.write(data)
        opened, flight = False, b""
        if not self.open:
            flight = self._handshake()
            if not self.open:
                return Received(b"", flight)
            opened = True  # (its last flight goes first, then whatever the reads below answer)
        read, chunks, closed = self._tls.read, [], False
        try:
            while chunk := read(READ_SIZE):
                chunks.append(chunk)
            closed = True  # (b"": the stream ended cleanly)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            closed = True
        plaintext = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return Received(plaintext, flight + self._outgoing.read(), opened, closed)

    def send(self, plaintext: bytes) -> bytes:
        self._tls.write(plaintext)
        return self._outgoing.read()

    def close(self) -> bytes:
        """close_notify (nothing when it cannot be given now)."""
        try:
            self._tls.unwrap()
        except ssl.SSLError:
            pass
        return self._outgoing.read()

    def _handshake(self) -> bytes:
        try:
            self._tls.do_handshake()
            self.open = True
        except ssl.SSLWantReadError:
            pass
        return self._outgoing.read()
