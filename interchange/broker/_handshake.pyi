"""Types of the optional C handshake thread built from ``_handshake.c`` (see :mod:`interchange.broker.tls_stream`)."""

class Stepper:
    """TLS handshake steps on a thread that never takes the GIL."""

    native_id: int
    def submit(self, token: object, sslobj: object, /) -> None:
        """Queue a step (SSL_do_handshake) on an ``_ssl._SSLSocket``; ``token`` comes back with its outcome."""
    def results(self) -> list[tuple[object, int, float, bytes | None]]:
        """The outcomes back: (token, status 0 done / 1 wants input / 2 else, the step's CPU seconds, saved errors)."""
    def fileno(self) -> int:
        """The eventfd, readable when outcomes wait."""
    def close(self) -> None:
        """The thread ends after its step (joined); steps not collected are dropped."""

def openssl_version() -> int:
    """OpenSSL_version_num() of the libssl this module runs."""

def restore(errors: bytes, /) -> None:
    """A step's saved OpenSSL errors on the calling thread's error queue."""

def probe(sslobj: object, context: object, incoming: object, outgoing: object, /) -> tuple[bool, bool, bool, bool]:
    """What this module reads from the _ssl objects, checked with OpenSSL: (context, rbio, wbio, server side)."""
