"""How long each stage of a connection's preamble may take (sans-I/O: deadlines are data).

A connection that never finishes its preamble holds a socket, buffers and a timer for ever unless
every stage has a deadline, measured from the stage's start to its end (not from the last byte:
a peer trickling one byte a second is no better than a silent one):

- the TLS handshake, from the accepted socket (:class:`~interchange.broker.tls_stream.TlsSession`);
- the AMQP or SASL protocol header, from the end of the handshake (the arrival of the client's last
  flight, however long its handshake step then waited for its turn), and the SASL exchange
  (sasl-init), from the header's arrival (:class:`~interchange.broker.sasl.SaslServer`);
- the peer's ``open`` frame, from the end of SASL, when its outcome is sent (the client may wait for it;
  :class:`~interchange.broker.engine.ConnectionEngine`).

A deadline counts the client's time, not the node's: the handshake's moves by the time the node held the
client's input (waiting for a handshake step's turn, out on the low-priority worker) and is judged at the
input's arrival; the header and SASL stages start at the arrival of the bytes that began them. A busy
node neither gives a client its own wait as extra time nor refuses it for that wait.

Each object exposes the deadline of its current stage (:class:`Deadline`, absolute, in the
caller's monotonic seconds) and answers ``on_timer(now)`` with what to do when it has passed; the
asyncio shell only arms one timer per connection. After the open, AMQP's idle time-out takes over.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StageTimeouts:
    """Seconds each stage may take (``[broker.limits]``: ``handshake_timeout_s``, ...)."""

    handshake_s: float = 10.0
    header_s: float = 10.0
    sasl_s: float = 10.0
    open_s: float = 10.0


@dataclass(frozen=True, slots=True)
class Deadline:
    """The end of a stage: ``at`` (monotonic seconds), the stage's name and the time it was given."""

    at: float
    stage: str
    timeout_s: float

    def passed(self, now: float) -> bool:
        return now >= self.at

    @property
    def reason(self) -> str:
        """What the peer failed to do, for the log and the close."""
        return f"{self.stage} not complete within {self.timeout_s:g} s"


def stage_deadline(started: float, timeout_s: float, stage: str) -> Deadline:
    return Deadline(started + timeout_s, stage, timeout_s)


def came_in_time(deadline: Deadline | None, arrived: float | None) -> bool:
    """Input that ``arrived`` (None: none waits) before a pending ``deadline`` and still waits to be applied
    (for a handshake step's turn): the deadline is judged at its arrival, as nginx reads ready sockets
    before it expires timers, so a client is not refused for the time its bytes waited on a busy node."""
    return deadline is not None and arrived is not None and arrived <= deadline.at
