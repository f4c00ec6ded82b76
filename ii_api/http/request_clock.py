"""Deadlines of an HTTPS request's arrival on the II (sans-I/O; the BI's are :mod:`interchange.broker.deadlines`).

A client that sends its request headers one line every few seconds, or a body a byte at a time,
holds a connection and a handler for ever unless each part has a deadline from its start:

- the request's headers: from the arrival of the client's last TLS handshake flight (the first request) or from the first
  byte after the previous response (the next ones), ``header_s``;
- its body: from the arrival of the headers' last bytes until the handler has read it, ``body_s``.
  The end of the headers is found in the bytes as they come (the empty line after a request line,
  :meth:`RequestClock.received`), not when the handler starts: on a busy loop, or behind a queued
  TLS handshake step, a handler starts later than its request's head arrived, and that wait is the
  node's, not a reason to give a trickling body more time. Until the handler starts, the body's
  deadline covers the wait (a request whose handler cannot start within ``body_s`` is answered 408).

An idle keep-alive connection between requests has none here (aiohttp's keep-alive time-out
closes it). :class:`RequestClock` is told what happened (bytes in with the time they arrived, headers
parsed, body read, response done, each with the time) and exposes the current deadline; :meth:`RequestClock.on_timer`
answers a passed one with a :class:`RequestTimeout`, which the TLS layer
(:mod:`ii_api.http.tls_site`) turns into a 408 with a JSON body (when part of a request came) and
a close.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from interchange.broker.deadlines import Deadline, stage_deadline

_HEAD_END = b"\r\n\r\n"  #: the empty line that ends a request's head (RFC 9112 section 2.1)
_EMPTY_LINES = b"\r\n"  #: what may come before a request line and is ignored (RFC 9112 section 2.2)


@dataclass(frozen=True, slots=True)
class RequestTimeout:
    """A request part did not arrive in time: ``respond`` when some of the request came (answer 408)."""

    stage: str
    timeout_s: float
    reason: str
    respond: bool


class RequestClock:
    """Where one connection is in its request cycle (head, queued, body, handling, idle) and the deadline
    of it. ``queued``: the head arrived, its handler has not started yet."""

    __slots__ = ("_header_s", "_body_s", "_state", "_deadline", "_bytes_in_head", "_pipelined", "_head_tail",
                 "_head_at", "on_change")

    def __init__(self, now: float, header_s: float, body_s: float) -> None:
        self._header_s, self._body_s = header_s, body_s
        self._state = "head"
        self._deadline: Deadline | None = stage_deadline(now, header_s, "request headers")
        self._bytes_in_head = False  #: part of the request's head came (a timeout is answered 408)
        self._pipelined = False  #: bytes came while a request was handled: the next head has begun
        #: the head's last bytes so far (an end split across reads); None: only empty lines yet
        self._head_tail: bytes | None = None
        self._head_at = 0.0  #: when the head's last bytes arrived (state ``queued``)
        #: called after the handler moved the clock on (the connection re-arms its timer)
        self.on_change: Callable[[], None] | None = None

    @property
    def state(self) -> str:
        return self._state

    @property
    def deadline(self) -> Deadline | None:
        return self._deadline

    def received(self, now: float, data: bytes) -> None:
        """Plaintext ``data`` came from the client; ``now``: when its bytes arrived on the socket."""
        if self._state == "idle":
            self._start_head(now)
        if self._state == "head":
            self._bytes_in_head = True
            self._scan_head(now, data)
        elif self._state == "handling":
            self._pipelined = True

    def _scan_head(self, now: float, data: bytes) -> None:
        """The head ends in ``data``: the body's deadline starts now, whenever its handler starts."""
        tail = self._head_tail
        if tail is None:  # empty lines before the request line do not end a head
            data = data.lstrip(_EMPTY_LINES)
            if not data:
                return
            tail = b""
        seen = tail + data
        if _HEAD_END in seen:
            self._state, self._head_at, self._head_tail = "queued", now, None
            self._deadline = stage_deadline(now, self._body_s, "request body")
        else:
            self._head_tail = seen[-3:]

    def head_complete(self, now: float, has_body: bool) -> None:
        """The request's headers were parsed (its handler starts); ``has_body``: a body is still to come.
        The body's deadline runs from the head's arrival when that was seen, else from ``now``."""
        if has_body:
            start = self._head_at if self._state == "queued" else now
            self._state, self._deadline = "body", stage_deadline(start, self._body_s, "request body")
        else:
            self._state, self._deadline = "handling", None
        self._bytes_in_head = self._pipelined = False
        self._head_tail = None
        self._changed()

    def body_complete(self, now: float) -> None:
        """The handler has read the body."""
        if self._state == "body":
            self._state, self._deadline = "handling", None
            self._changed()

    def response_done(self, now: float) -> None:
        """The handler answered: the connection waits for the next request."""
        if self._pipelined:
            self._start_head(now)
            self._bytes_in_head = True
        else:
            self._state, self._deadline = "idle", None
        self._pipelined = False
        self._changed()

    def on_timer(self, now: float) -> RequestTimeout | None:
        deadline = self._deadline
        if deadline is None or not deadline.passed(now):
            return None
        respond = self._state in ("body", "queued") or self._bytes_in_head
        self._state, self._deadline = "timed_out", None
        return RequestTimeout(deadline.stage, deadline.timeout_s, deadline.reason, respond)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _start_head(self, now: float) -> None:
        self._state, self._deadline = "head", stage_deadline(now, self._header_s, "request headers")
        self._head_tail = None


def timeout_response(timeout: RequestTimeout) -> bytes:
    """The 408 answer (JSON body, ``Connection: close``) to a request that did not arrive in time."""
    body = json.dumps({"error": timeout.reason}).encode()
    head = (f"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode("ascii") + body
