"""One TCPStreaming connection as a state machine (sans-I/O): fed bytes and time, returns actions.

:class:`ClientStream` (Broker or TLC system, TLEX 6.3 / UDAP 3.3): preamble and Token, Timestamps
answered before anything else (6.3.4.6.2), keep-alive (5.2.1.1.3.2), closes on Bye, Reconnect or a
framing error. :class:`ServiceStream` (the simulator): waits for the Token (the I/O layer calls
:meth:`ServiceStream.accept` or :meth:`ServiceStream.refuse`), then enforces the session's rules
and limits and requests Timestamps every ``timestamps_interval`` s. Time is given as :class:`Now`:
a monotonic clock for timers and UTC milliseconds for timestamps. The rules in full:
docs/tlex-bridge.md ("TCPStreaming").
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

from interchange.bridges.tlex.codec import (
    PREAMBLE,
    Bye,
    Datagram,
    KeepAlive,
    Payload,
    Reconnect,
    StreamDecoder,
    StreamError,
    TimestampsRequest,
    TimestampsResponse,
    Token,
    encode,
)

Mode = Literal["singleplex", "multiplex", "broker", "monitor"]


@dataclass(frozen=True, slots=True)
class Now:
    mono: float  #: monotonic seconds (timers)
    utc_ms: int  #: wall clock, UTC milliseconds (timestamps in datagrams)


class CloseCause(str, Enum):
    BYE = "bye"  #: the peer said Bye
    RECONNECT = "reconnect"  #: the service asked for a new session
    FRAMING = "framing"  #: prefix mismatch or empty frame
    VERSION = "version"  #: unsupported protocol version
    PROTOCOL = "protocol"  #: a malformed or forbidden datagram
    KEEPALIVE = "keepalive"  #: nothing received within the keep-alive timeout
    DROPPED = "dropped"  #: the transport closed under us
    LOCAL = "local"  #: we closed it
    REFUSED = "refused"  #: token refused (service side)
    LIMIT = "limit"  #: rate, throughput or clock-difference limit exceeded (service side)


@dataclass(frozen=True, slots=True)
class Send:
    """Write these bytes."""

    data: bytes


@dataclass(frozen=True, slots=True)
class AnswerTimestamps:
    """Write a Timestamps response now, ahead of anything else; stamp t2 as late as possible."""

    t0: int
    t1: int

    def frame(self, t2: int) -> bytes:
        return encode(TimestampsResponse(self.t0, self.t1, t2))


@dataclass(frozen=True, slots=True)
class Deliver:
    """A payload received from the peer (client side: from a controller; service side: to route)."""

    payload: Payload


@dataclass(frozen=True, slots=True)
class Authenticate:
    """Service side: check this token, then call accept() or refuse()."""

    token: str


@dataclass(frozen=True, slots=True)
class Close:
    """Close the transport (after writing any Send before it). No action follows."""

    cause: CloseCause
    reason: str


Action = Send | AnswerTimestamps | Deliver | Authenticate | Close


class SessionClosed(RuntimeError):
    """Nothing can be sent on a closed stream: the caller keeps the payload for the next session."""


@dataclass
class StreamCounters:
    payloads_in: int = 0
    payloads_out: int = 0
    dropped_in: int = 0  #: payloads received for identifiers outside the session
    keepalives_out: int = 0


class _Stream:
    """What both sides share: the decoder, keep-alive timers and closing."""

    def __init__(self, keepalive_timeout: float, now: Now) -> None:
        if keepalive_timeout <= 0:
            raise ValueError("keep-alive timeout must be positive")
        self.keepalive_timeout = keepalive_timeout
        self._decoder = StreamDecoder()
        self._last_rx = now.mono
        self._last_tx = now.mono
        self.closed: Close | None = None
        self.counters = StreamCounters()

    @property
    def keepalive_interval(self) -> float:
        return self.keepalive_timeout / 3  # three chances before the peer's timeout

    def _send(self, datagram: Datagram, now: Now) -> Send:
        self._last_tx = now.mono
        return Send(encode(datagram))

    def _close(self, cause: CloseCause, reason: str, bye: bool, now: Now) -> list[Action]:
        close = Close(cause, reason)
        actions: list[Action] = [self._send(Bye(reason), now)] if bye else []
        actions.append(close)
        self.closed = close
        return actions

    def _decode(self, data: bytes, now: Now) -> tuple[list[Datagram], StreamError | None]:
        """The datagrams in ``data``, and the breach that ended them if any (processed after them)."""
        self._last_rx = now.mono
        try:
            return self._decoder.feed(data), None
        except StreamError as exc:
            return exc.decoded, exc

    def _breach(self, error: StreamError | None, now: Now) -> list[Action]:
        if error is None or self.closed is not None:
            return []
        cause = {"framing": CloseCause.FRAMING, "version": CloseCause.VERSION}.get(error.kind, CloseCause.PROTOCOL)
        return self._close(cause, str(error), cause is CloseCause.PROTOCOL, now)  # framing: drop at once, no Bye

    def _keepalive_tick(self, now: Now) -> list[Action]:
        if now.mono - self._last_rx >= self.keepalive_timeout:
            return self._close(CloseCause.KEEPALIVE, "keep-alive timeout", True, now)
        if now.mono - self._last_tx >= self.keepalive_interval:
            self.counters.keepalives_out += 1
            return [self._send(KeepAlive(), now)]
        return []

    def next_deadline(self) -> float:
        """Monotonic time at which tick() has something to do."""
        return min(self._last_rx + self.keepalive_timeout, self._last_tx + self.keepalive_interval)

    def close(self, reason: str, now: Now) -> list[Action]:
        """Say Bye and close (idempotent)."""
        if self.closed is not None:
            return []
        return self._close(CloseCause.LOCAL, reason, True, now)

    def connection_lost(self, reason: str = "connection closed by peer") -> list[Action]:
        """The transport closed (EOF, reset): the stream ends without a Bye."""
        if self.closed is not None:
            return []
        self.closed = Close(CloseCause.DROPPED, reason)
        return [self.closed]

    def _check_open(self) -> None:
        if self.closed is not None:
            raise SessionClosed(f"stream closed: {self.closed.reason}")


class ClientStream(_Stream):
    """The client side of one connection, for the session ``token`` of a Broker or TLC system."""

    def __init__(self, token: str, mode: Mode, tlc_ids: frozenset[str], keepalive_timeout: float, now: Now) -> None:
        super().__init__(keepalive_timeout, now)
        self.token, self.mode, self.tlc_ids = token, mode, frozenset(tlc_ids)
        self.started = False
        self.clock_diff_ms: int | None = None  #: last t1 - t0 (our clock minus the service's, plus latency)

    @property
    def multiplex(self) -> bool:
        return self.mode != "singleplex"

    def start(self, now: Now) -> list[Action]:
        """The opening bytes: version preamble + Token (6.2, 6.3.4.2)."""
        if self.started:
            raise RuntimeError("stream already started")
        self.started = True
        self._last_tx = now.mono
        return [Send(PREAMBLE + encode(Token(self.token)))]

    def receive(self, data: bytes, now: Now) -> list[Action]:
        if self.closed is not None:
            return []
        decoded, error = self._decode(data, now)
        answers: list[Action] = []  # timestamp answers go first (6.3.4.6.2)
        actions: list[Action] = []
        for datagram in decoded:
            for action in self._on_datagram(datagram, now):
                (answers if isinstance(action, AnswerTimestamps) else actions).append(action)
            if self.closed is not None:
                break
        return answers + actions + self._breach(error, now)

    def _on_datagram(self, datagram: Datagram, now: Now) -> list[Action]:
        match datagram:
            case KeepAlive() | TimestampsResponse():
                return []
            case TimestampsRequest(t0=t0):
                self.clock_diff_ms = now.utc_ms - t0
                return [AnswerTimestamps(t0, now.utc_ms)]
            case Payload() as payload:
                return self._on_payload(payload, now)
            case Bye(reason=reason):
                return self._close(CloseCause.BYE, reason or "Bye", False, now)
            case Reconnect():
                return self._close(CloseCause.RECONNECT, "reconnect requested", True, now)
        return self._close(CloseCause.PROTOCOL, f"unexpected {type(datagram).__name__}", True, now)

    def _on_payload(self, payload: Payload, now: Now) -> list[Action]:
        if (payload.tlc is not None) != self.multiplex:
            kind = "0x05" if payload.tlc is not None else "0x04"
            return self._close(CloseCause.PROTOCOL, f"payload datagram {kind} on a {self.mode} session", True, now)
        if payload.tlc is not None and payload.tlc not in self.tlc_ids:
            self.counters.dropped_in += 1
            return []
        self.counters.payloads_in += 1
        return [Deliver(payload)]

    def send_payload(self, payload: Payload, now: Now) -> list[Action]:
        """Frame a payload for the service; SessionClosed if the stream is over."""
        self._check_open()
        if self.mode == "monitor":
            raise ValueError("monitor sessions can only receive data")
        if (payload.tlc is not None) != self.multiplex:
            raise ValueError(f"a {self.mode} session sends {'0x05' if self.multiplex else '0x04'} payloads")
        if payload.tlc is not None and payload.tlc not in self.tlc_ids:
            raise ValueError(f"TLC identifier {payload.tlc!r} is not part of this session")
        self.counters.payloads_out += 1
        return [self._send(payload, now)]

    def tick(self, now: Now) -> list[Action]:
        if self.closed is not None or not self.started:
            return []
        return self._keepalive_tick(now)

    def update_scope(self, tlc_ids: frozenset[str]) -> None:
        """After a PUT /sessions/<token> changed the identifiers (5.2.1.4)."""
        self.tlc_ids = frozenset(tlc_ids)


@dataclass(frozen=True)
class Grant:
    """What the service allows one session (the details of its REST answer)."""

    mode: Mode
    tlc_ids: frozenset[str]
    keepalive_timeout: float = 5.0
    clock_diff_limit_ms: int = 3000
    clock_diff_duration: float = 60.0
    rate_limit: float = 1200.0  #: payloads per second
    rate_duration: float = 5.0
    throughput_limit_kb: float = 120.0  #: KB per second
    throughput_duration: float = 5.0
    timestamps_interval: float = 15.0


@dataclass
class _Window:
    """Sum of samples over the last ``duration`` seconds."""

    duration: float
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    total: float = 0.0

    def add(self, now: float, value: float) -> None:
        self.samples.append((now, value))
        self.total += value
        while self.samples and self.samples[0][0] <= now - self.duration:
            self.total -= self.samples.popleft()[1]

    def average_per_second(self) -> float:
        return self.total / self.duration

    def mean(self) -> float:
        return self.total / len(self.samples) if self.samples else 0.0


class ServiceStream(_Stream):
    """The Streaming Service side of one connection (simulator)."""

    def __init__(self, keepalive_timeout: float, now: Now) -> None:
        super().__init__(keepalive_timeout, now)
        self.grant: Grant | None = None
        self._pending: list[Datagram] = []
        self._authenticating = False
        self._rate = _Window(1.0)
        self._bytes = _Window(1.0)
        self._clock = _Window(1.0)
        self._next_timestamps = now.mono
        self.clock_offset_ms: float | None = None
        self.rtt_ms: int | None = None

    def receive(self, data: bytes, now: Now) -> list[Action]:
        if self.closed is not None:
            return []
        decoded, error = self._decode(data, now)
        self._pending.extend(decoded)
        actions = self._process(now)
        if error is not None and self._authenticating:
            self._pending.clear()  # a broken stream gets no session, whatever its token
            self._authenticating = False
        return actions + self._breach(error, now)

    def _process(self, now: Now) -> list[Action]:
        actions: list[Action] = []
        while self._pending and self.closed is None and not self._authenticating:
            datagram = self._pending.pop(0)
            if self.grant is None:
                actions.extend(self._expect_token(datagram, now))
            else:
                actions.extend(self._on_datagram(self.grant, datagram, now))
        return actions

    def _expect_token(self, datagram: Datagram, now: Now) -> list[Action]:
        if not isinstance(datagram, Token):
            return self._close(CloseCause.PROTOCOL, "the first datagram must be Token", True, now)
        self._authenticating = True
        return [Authenticate(datagram.token)]

    def accept(self, grant: Grant, now: Now) -> list[Action]:
        """The token was valid: the session runs under ``grant``; datagrams held meanwhile are processed."""
        if self.closed is not None:
            return []
        self.grant, self._authenticating = grant, False
        self.keepalive_timeout = grant.keepalive_timeout
        self._rate, self._bytes = _Window(grant.rate_duration), _Window(grant.throughput_duration)
        self._clock = _Window(grant.clock_diff_duration)
        self._next_timestamps = now.mono
        return [Send(PREAMBLE)] + self._process(now)

    def refuse(self, reason: str, now: Now) -> list[Action]:
        if self.closed is not None:
            return []
        self._authenticating = False
        return [Send(PREAMBLE)] + self._close(CloseCause.REFUSED, reason, True, now)

    def _on_datagram(self, grant: Grant, datagram: Datagram, now: Now) -> list[Action]:
        match datagram:
            case KeepAlive():
                return []
            case Payload() as payload:
                return self._on_payload(grant, payload, now)
            case TimestampsResponse() as response:
                return self._on_timestamps(grant, response, now)
            case Bye(reason=reason):
                return self._close(CloseCause.BYE, reason or "Bye", False, now)
        return self._close(CloseCause.PROTOCOL, f"unexpected {type(datagram).__name__}", True, now)

    def _on_payload(self, grant: Grant, payload: Payload, now: Now) -> list[Action]:
        if grant.mode == "monitor":
            return self._close(CloseCause.PROTOCOL, "monitor sessions can only receive data", True, now)
        if (payload.tlc is None) != (grant.mode == "singleplex"):
            return self._close(CloseCause.PROTOCOL, f"wrong payload datagram for a {grant.mode} session", True, now)
        self._rate.add(now.mono, 1)
        self._bytes.add(now.mono, len(payload.payload) / 1000)
        if self._rate.average_per_second() > grant.rate_limit:
            return self._close(CloseCause.LIMIT, "payload rate limit exceeded", True, now)
        if self._bytes.average_per_second() > grant.throughput_limit_kb:
            return self._close(CloseCause.LIMIT, "payload throughput limit exceeded", True, now)
        if payload.tlc is not None and payload.tlc not in grant.tlc_ids:
            self.counters.dropped_in += 1  # TLEX 6.3.4.5.3: a non-requested identifier is dropped
            return []
        self.counters.payloads_in += 1
        return [Deliver(payload)]

    def _on_timestamps(self, grant: Grant, response: TimestampsResponse, now: Now) -> list[Action]:
        t3 = now.utc_ms
        self.rtt_ms = (t3 - response.t0) - (response.t2 - response.t1)
        self.clock_offset_ms = ((response.t1 - response.t0) + (response.t2 - t3)) / 2
        self._clock.add(now.mono, abs(self.clock_offset_ms))
        if self._clock.mean() > grant.clock_diff_limit_ms:
            return self._close(CloseCause.LIMIT, "clock difference limit exceeded", True, now)
        return []

    def send_payload(self, payload: Payload, now: Now) -> list[Action]:
        """Frame a routed payload for this client, in the datagram its mode uses."""
        self._check_open()
        if self.grant is None:
            raise SessionClosed("session not authenticated yet")
        if self.grant.mode == "singleplex":
            payload = Payload(payload.payload_type, payload.origin_ms, payload.payload)
        self.counters.payloads_out += 1
        return [self._send(payload, now)]

    def reconnect(self, now: Now) -> list[Action]:
        """Ask the client for a new session (6.3.4.4); the client closes."""
        self._check_open()
        return [self._send(Reconnect(), now)]

    def tick(self, now: Now) -> list[Action]:
        if self.closed is not None:
            return []
        actions = self._keepalive_tick(now)
        if self.closed is None and self.grant is not None and now.mono >= self._next_timestamps:
            self._next_timestamps = now.mono + self.grant.timestamps_interval
            actions.append(self._send(TimestampsRequest(now.utc_ms), now))
        return actions

    def next_deadline(self) -> float:
        deadline = super().next_deadline()
        return min(deadline, self._next_timestamps) if self.grant is not None else deadline
