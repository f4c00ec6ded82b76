"""The byte plumbing of one proton connection, shared by the server and client engines.

Owns proton's Transport, Connection and Collector (bound together), feeds received bytes in as
fast as the transport takes them, hands out what it wants to send, and frees everything once.
The engines add what differs: the event handling (server: attaches and routing; client:
receiver links) on top.
"""
from __future__ import annotations

from collections.abc import Callable

from cproton_ffi import ffi, lib

_from_buffer = ffi.from_buffer


class ProtonConnection:
    """Transport + Connection + Collector of one AMQP connection (sans-I/O)."""

    __slots__ = ("transport", "connection", "collector", "_released")

    def __init__(self, server: bool) -> None:
        self.transport = lib.pn_transport()
        if server:
            lib.pn_transport_set_server(self.transport)
        self.connection = lib.pn_connection()
        self.collector = lib.pn_collector()
        lib.pn_connection_collect(self.connection, self.collector)
        lib.pn_transport_bind(self.transport, self.connection)
        self._released = False

    def push(self, data: bytes | bytearray | memoryview, process: Callable[[], None]) -> None:
        """Feed received bytes, calling ``process()`` after each chunk the transport accepted."""
        transport = self.transport
        view = memoryview(data)
        while view:
            capacity = lib.pn_transport_capacity(transport)
            if capacity <= 0:
                break  # closed for input: what is left cannot be processed
            n = min(capacity, len(view))
            lib.pn_transport_push(transport, _from_buffer(view[:n]), n)
            view = view[n:]
            process()
        process()

    def take_output(self, limit: int) -> bytearray:
        """Return (and consume) up to ``limit`` bytes proton wants to send."""
        transport = self.transport
        pending = lib.pn_transport_pending(transport)
        if pending <= 0:
            return bytearray()
        size = min(pending, limit)
        out = bytearray(size)
        if lib.pn_transport_peek(transport, _from_buffer(out), size) < 0:
            return bytearray()
        lib.pn_transport_pop(transport, size)
        return out

    @property
    def has_output(self) -> bool:
        return lib.pn_transport_pending(self.transport) > 0

    @property
    def closed(self) -> bool:
        """True when the transport is closed both ways."""
        return bool(lib.pn_transport_closed(self.transport))

    def close_input(self) -> None:
        lib.pn_transport_close_tail(self.transport)

    def release(self) -> None:
        """Free proton's objects (once). ``pn_connection_release`` frees the sessions and links but
        leaves the connection object itself to its reference count (proton's Python binding drops
        that reference when its wrapper goes): without the ``pn_decref`` every connection left about
        1.5 KB behind (the node's RSS grew with the connections it had served)."""
        if not self._released:
            self._released = True
            lib.pn_transport_unbind(self.transport)
            lib.pn_decref(self.transport)
            lib.pn_connection_release(self.connection)
            lib.pn_decref(self.connection)
            lib.pn_collector_free(self.collector)
