"""Validation of the names the PKI puts into certificates and onto disk.

IP_125: an interchange certificate's common name is the target of its DNS SRV record, so server
names must be fully qualified DNS host names. Actor and CA names also become directory names, so
they are restricted to a safe character set.
"""
from __future__ import annotations

import re

from certs.errors import PkiError

_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_ACTOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_CA_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
ROOT_NAME = "root"


def validate_fqdn(name: str) -> str:
    """Return the normalised (lower-case, no trailing dot) FQDN, or refuse it.

    IP_125/IP_087: the CN of an interchange is the SRV target host name (an A record), so it
    must be an ASCII host name with at least two labels; wildcards are not allowed.
    """
    candidate = name.strip().lower()
    if candidate.endswith("."):
        candidate = candidate[:-1]
    labels = candidate.split(".")
    if (
        not candidate
        or len(candidate) > 253
        or len(labels) < 2
        or not all(_LABEL.match(label) for label in labels)
        or labels[-1].isdigit()
    ):
        raise PkiError(
            f"invalid interchange name {name!r}: expected a fully qualified DNS host name "
            "such as ixc.example.org (the target of the interchange's SRV record, IP_125)"
        )
    return candidate


def validate_actor_cn(name: str) -> str:
    """Return the actor common name unchanged, or refuse it (1-64 of A-Z a-z 0-9 . _ -)."""
    if not _ACTOR.match(name) or ".." in name:
        raise PkiError(
            f"invalid actor common name {name!r}: use 1-64 characters from A-Z a-z 0-9 . _ - "
            "starting with a letter or digit"
        )
    return name


def validate_ca_name(name: str) -> str:
    """Return an intermediate CA's short name, or refuse it (1-32 of a-z 0-9 _ -, not 'root')."""
    if not _CA_NAME.match(name) or name == ROOT_NAME:
        raise PkiError(
            f"invalid CA name {name!r}: use 1-32 characters from a-z 0-9 _ - "
            f"(and not {ROOT_NAME!r}, which names the root CA)"
        )
    return name


def parse_serial(text: str) -> int:
    """Parse a certificate serial given as decimal, 0x-hex or colon-separated hex (aa:bb:..)."""
    value = text.strip()
    try:
        if value.lower().startswith("0x"):
            serial = int(value[2:], 16)
        elif ":" in value:
            serial = int(value.replace(":", ""), 16)
        else:
            serial = int(value, 10)
    except ValueError:
        raise PkiError(f"invalid serial number {text!r}: give it in decimal or as 0x-hex") from None
    if serial <= 0:
        raise PkiError(f"invalid serial number {text!r}: serials are positive")
    return serial
