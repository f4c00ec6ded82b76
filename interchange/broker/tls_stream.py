"""TLS as a plain object fed bytes (sans-I/O): ciphertext in, plaintext and replies out. The server
side of the BI and the II; the client side of the IF2 bridge's connection to RabbitMQ (``server_side=False``:
:meth:`TlsSession.start` gives its first flight).

asyncio's own TLS (``create_server(ssl=...)``) closes a refused connection without sending the
alert OpenSSL produced and reports the failure nowhere; with the session in our hands the alert
is written before the close and the reason is logged (IP_009). The caller moves the bytes:

- :meth:`TlsSession.receive` takes what came from the socket and returns a :class:`TlsStep`:
  the plaintext received, the bytes to write back (handshake flights, alerts), whether the
  handshake just completed, whether the peer closed (close_notify), or why it failed;
- a handshake step in three parts, :meth:`TlsSession.feed`, :meth:`TlsSession.handshake` (the
  OpenSSL call alone: a worker thread runs it with as little Python around it as there can be,
  :mod:`interchange.broker.handshake_queue`) and :meth:`TlsSession.handshook` (its
  :class:`TlsStep`), is :meth:`TlsSession.receive` during the handshake;
- :attr:`TlsSession.native` is the session's CPython ``_ssl._SSLSocket`` when the step may run on a thread
  that never takes the GIL (:mod:`interchange.broker._handshake`: the self-test :func:`native_problem`
  holds and the context has no Python callback that OpenSSL would call in the handshake); that step's
  result becomes :meth:`TlsSession.handshake`'s outcome, the same exception included, by
  :meth:`TlsSession.native_outcome` on the loop's thread;
- :meth:`TlsSession.send` encrypts plaintext; :meth:`TlsSession.close` gives close_notify;
- :attr:`TlsSession.deadline` is when the handshake must be complete (from the session's start,
  :mod:`interchange.broker.deadlines`); :meth:`TlsSession.on_timer` fails it once that has passed.
"""
from __future__ import annotations

import functools
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from interchange.broker.deadlines import Deadline, stage_deadline

try:
    from interchange.broker import _handshake
except ImportError:  # not built: the steps run on a Python thread
    _handshake = None  # type: ignore[assignment]

#: A listener's TLS context: one context, or what gives the one current for each new connection (the
#: node's ``ReloadingTls.current``: rebuilt when a file changed, e.g. a new CRL). Asked when the session
#: is made (on the loop's thread), not by an SNI callback inside the handshake: that would run Python
#: (its file checks) in the handshake's OpenSSL call, on the low-priority worker thread.
ContextSource = ssl.SSLContext | Callable[[], ssl.SSLContext]

#: The reason logged when a handshake is not complete in time.
HANDSHAKE_TIMEOUT = "handshake timeout"

#: Plaintext bytes asked for per ``SSLObject.read``; OpenSSL returns at most one record
#: (16 KiB) per call, so larger buffers only cost allocation.
READ_SIZE = 16 * 1024 + 256

#: OpenSSL reason codes -> short texts for the connection log.
REASONS = {
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "no client certificate",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "no client certificate",
    "UNSUPPORTED_PROTOCOL": "protocol version not supported (TLS 1.3 only)",
    "TLSV1_ALERT_PROTOCOL_VERSION": "protocol version not supported (TLS 1.3 only)",
    "WRONG_VERSION_NUMBER": "not TLS, or an unsupported protocol version",
    "HTTP_REQUEST": "not TLS (an HTTP request)",
    "NO_SHARED_CIPHER": "no shared cipher suite",
    "NO_SUITABLE_SIGNATURE_ALGORITHM": "no shared signature algorithm",
    "TLSV1_ALERT_UNKNOWN_CA": "the peer does not trust our certificate (unknown CA)",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the peer refused our certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the peer refused our certificate (expired)",
    "TLSV1_ALERT_DECRYPT_ERROR": "the peer refused our certificate (decrypt error)",
}


def describe(error: ssl.SSLError) -> str:
    """A short readable reason for a TLS failure (certificate checks name the verify result)."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"client certificate rejected: {error.verify_message or 'verification failed'}"
    reason = getattr(error, "reason", None)
    if reason:
        return REASONS.get(reason, reason.lower().replace("_", " "))
    return str(error) or type(error).__name__


def step_error(outcome: object) -> BaseException | None:
    """What a handshake step raised, if it did: not a TLS outcome of :meth:`TlsSession.handshake`
    (None or an ``ssl.SSLError``, for :meth:`TlsSession.handshook`) but a failure of the step itself."""
    return outcome if isinstance(outcome, BaseException) and not isinstance(outcome, ssl.SSLError) else None


#: :meth:`TlsSession.native_outcome`'s status codes (``_handshake.c``).
NATIVE_DONE, NATIVE_WANT_READ = 0, 1
#: The interpreter whose private ``_ssl`` object layout ``_handshake.c`` reads.
NATIVE_PYTHON = (3, 11)


@functools.cache
def native_problem() -> str | None:
    """Why handshake steps cannot run on the C thread (None: they can). ``_handshake.c`` reads the SSL*
    out of CPython's private ``_ssl`` objects: this checks, on a session made here, that what it reads is
    the session's (OpenSSL's own answers: the SSL*'s context, its read and write BIOs are the context's and
    the MemoryBIOs'), and that it is linked with the OpenSSL that ``_ssl`` uses."""
    if _handshake is None:
        return "the C extension interchange.broker._handshake is not built"
    if sys.version_info[:2] != NATIVE_PYTHON:
        return f"it reads CPython {NATIVE_PYTHON[0]}.{NATIVE_PYTHON[1]}'s _ssl objects, not {sys.version.split()[0]}'s"
    if _handshake.openssl_version() != ssl.OPENSSL_VERSION_NUMBER:
        return f"it is linked with OpenSSL {_handshake.openssl_version():#x}, _ssl with {ssl.OPENSSL_VERSION_NUMBER:#x}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    sslobj = context.wrap_bio(incoming, outgoing, server_side=True)._sslobj  # type: ignore[attr-defined]  # noqa: SLF001
    try:
        probed = _handshake.probe(sslobj, context, incoming, outgoing)
    except TypeError as exc:
        return str(exc)
    if probed != (True, True, True, True):
        return f"the _ssl objects' layout is not the one it reads (context, rbio, wbio, server: {probed})"
    return None


def native_stepper() -> Any:
    """A new C handshake thread (``_handshake.Stepper``); only where :func:`native_problem` is None."""
    assert _handshake is not None, native_problem()
    return _handshake.Stepper()


def python_callbacks(context: ssl.SSLContext) -> bool:
    """Whether OpenSSL would call Python during a handshake with ``context`` (its SNI callback, its message
    callback, its key log): then the step must run where Python may (it would take the GIL)."""
    return (context.sni_callback is not None or getattr(context, "_msg_callback", None) is not None
            or context.keylog_filename is not None)


@dataclass(slots=True)
class TlsStep:
    """The outcome of one :meth:`TlsSession.receive` call.

    ``send`` is to be written to the socket in every case (on ``error`` it holds the alert;
    write it, then close). ``established`` is True on the call that completed the handshake.
    """

    data: bytes = b""
    send: bytes = b""
    established: bool = False
    closed: bool = False
    error: str | None = None


class TlsSession:
    """One TLS connection over memory BIOs (the server's side unless ``server_side`` is False: then the
    context's checks of the server's certificate, for ``server_hostname``)."""

    def __init__(self, context: ContextSource, now: float = 0.0, handshake_timeout_s: float = 10.0, *,
                 server_side: bool = True, server_hostname: str | None = None) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        if not isinstance(context, ssl.SSLContext):
            context = context()
        self.ssl_object = context.wrap_bio(self._incoming, self._outgoing, server_side=server_side,
                                           server_hostname=server_hostname)
        #: the ``_ssl._SSLSocket`` for a step on the C thread (None: the step runs in Python)
        self.native: Any = (None if native_problem() is not None or python_callbacks(context)
                            else self.ssl_object._sslobj)  # type: ignore[attr-defined]  # noqa: SLF001
        self.established = False
        self.failed = False
        self._deadline = stage_deadline(now, handshake_timeout_s, "TLS handshake")

    @property
    def deadline(self) -> Deadline | None:
        """When the handshake must be complete; None once it is (or failed)."""
        return None if self.established or self.failed else self._deadline

    def postpone(self, by: float) -> None:
        """The node held the peer's input for ``by`` seconds (waiting for a handshake step's turn, out on
        the worker): the deadline counts the peer's time, not the node's, so it moves by as much."""
        if by > 0:
            self._deadline = stage_deadline(self._deadline.at - self._deadline.timeout_s + by,
                                            self._deadline.timeout_s, self._deadline.stage)

    def on_timer(self, now: float) -> TlsStep | None:
        """The handshake's deadline passed: the session fails (close the socket, log the reason)."""
        deadline = self.deadline
        if deadline is None or not deadline.passed(now):
            return None
        self.failed = True
        return TlsStep(error=HANDSHAKE_TIMEOUT)

    def start(self) -> TlsStep:
        """The first flight before any input (a client's ClientHello)."""
        return self.handshook(self.handshake())

    def receive(self, data: bytes | bytearray | memoryview) -> TlsStep:
        """Feed bytes from the peer; returns the decrypted data and what to send back."""
        if self.failed:
            return TlsStep()
        self._incoming.write(data)
        if not self.established:
            return self.handshook(self.handshake())
        return self._records(TlsStep())

    # a handshake step in three parts, for a worker thread: feed and handshook on the loop's thread,
    # handshake (the crypto, which releases the GIL) on the worker, with nothing else of the session
    # touched meanwhile
    def feed(self, data: bytes) -> None:
        """Handshake input from the peer, for the next :meth:`handshake`."""
        if not self.failed:
            self._incoming.write(data)

    def handshake(self) -> ssl.SSLError | None:
        """The handshake's OpenSSL call alone (``SSLObject.do_handshake``, which releases the GIL for
        the crypto): None once complete, else what it raised (wanting more input, or a failure), for
        :meth:`handshook`. It reads the input fed and writes the flight to send, nothing else."""
        if self.failed or self.established:
            return None
        try:
            self.ssl_object.do_handshake()
        except ssl.SSLError as exc:
            return exc
        return None

    def native_outcome(self, status: int, errors: bytes | None) -> ssl.SSLError | None:
        """:meth:`handshake`'s outcome from a step run on the C thread: complete, wanting input, or else
        the error queue the step left there put on this thread's and ``_ssl`` called again on the failed
        session (it fails at once, with the exception it would have raised on the worker: reason,
        verify result); anything other than a failure is the next step's, run here."""
        if status == NATIVE_DONE:
            return None
        if status == NATIVE_WANT_READ:
            return ssl.SSLWantReadError(ssl.SSL_ERROR_WANT_READ, "The operation did not complete (read)")
        if errors and _handshake is not None:
            _handshake.restore(errors)
        return self.handshake()

    def handshook(self, outcome: ssl.SSLError | None) -> TlsStep:
        """The step that :meth:`handshake`'s ``outcome`` makes: the flight to send, the handshake
        complete (then the records that came with the peer's last flight) or why it failed."""
        step = TlsStep()
        if self.failed:
            return step
        if isinstance(outcome, ssl.SSLWantReadError):
            step.send = self._outgoing.read()
            return step
        if outcome is not None:
            self.failed = True
            step.send, step.error = self._outgoing.read(), describe(outcome)
            return step
        if not self.established:
            self.established = step.established = True
        return self._records(step)

    def _records(self, step: TlsStep) -> TlsStep:
        """The plaintext of the records received (and close_notify, or a failure), and what to send."""
        obj = self.ssl_object
        chunks: list[bytes] = []
        read = obj.read
        try:
            while True:
                chunk = read(READ_SIZE)
                if not chunk:
                    step.closed = True
                    break
                chunks.append(chunk)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            step.closed = True
        except ssl.SSLError as exc:
            self.failed = True
            step.error = describe(exc)
        if chunks:
            step.data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if self._outgoing.pending:
            step.send = self._outgoing.read()
        return step

    def send(self, plaintext: bytes | bytearray | memoryview) -> bytes:
        """Encrypt ``plaintext`` (all of it: the outgoing buffer is unbounded) into records."""
        if plaintext:
            self.ssl_object.write(plaintext)
        return self._outgoing.read()

    def close(self) -> bytes:
        """close_notify (best effort: nothing if the session never got established or failed)."""
        if not self.established or self.failed:
            return b""
        try:
            self.ssl_object.unwrap()
        except ssl.SSLError:
            pass
        return self._outgoing.read()
