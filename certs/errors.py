"""Errors raised by the session-level PKI and TLS helpers."""
from __future__ import annotations


class PkiError(Exception):
    """A PKI operation was refused (bad input, missing directory, policy violation).

    The message is written for a person: the CLI prints it as one line.
    """


class PeerIdentityError(ValueError):
    """The TLS peer presented no usable identity (no certificate, or no single common name)."""
