"""Memory stand-ins for protocol tests without sockets: an asyncio transport (what the protocol
wrote, and whether it closed the connection; ``strict`` makes a write after the close an assertion
error: a protocol must not answer on a socket it closed) and a TLS client over memory BIOs."""
from __future__ import annotations

import asyncio
import ssl
from typing import Any

PEER = ("127.0.0.1", 40000)


class MemoryTransport(asyncio.Transport):
    """The socket's side of a protocol under test."""

    def __init__(self, *, strict: bool = False) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False
        self.strict = strict

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not (self.strict and self.closed), "written after the close"
        self.out += data

    def take(self) -> bytes:
        """What was written since the last take."""
        data = bytes(self.out)
        self.out.clear()
        return data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return PEER if name == "peername" else default


class MemoryTlsClient:
    """A TLS client over memory BIOs: ``step`` feeds the server's bytes and returns the client's;
    ``error``: why the client's handshake failed (e.g. the server's alert), once it has."""

    def __init__(self, context: ssl.SSLContext, server_hostname: str) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_hostname=server_hostname)
        self.error: ssl.SSLError | None = None

    def step(self, data: bytes = b"") -> bytes:
        if data:
            self.incoming.write(data)
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as exc:
            self.error = exc
        return self.outgoing.read()

    def read(self) -> bytes:
        """The server's application data so far, decrypted."""
        out = b""
        try:
            while True:
                out += self.obj.read(65536)
        except ssl.SSLWantReadError:
            return out

    def send(self, plaintext: bytes) -> bytes:
        """Application data, encrypted for the server."""
        self.obj.write(plaintext)
        return self.outgoing.read()
