"""Which open connections a new set of CRLs revokes (IP_050/IP_051, chapter 5).

OpenSSL checks the CRLs during each handshake, so a new CRL binds new connections as soon as the
TLS context is rebuilt. Connections opened before it stay up until someone looks at their peer
certificates again: :class:`Revocations` is that look. It is built from the same PEM CRL files the
TLS context loads and answers, for a peer certificate, whether (and why) one of them lists it.

A certificate is revoked when a CRL issued by the certificate's issuer (same issuer name and,
when both carry it, the same authority key identifier) lists its serial number. The CRLs' own
signatures are checked by OpenSSL when the context is built and used; here they are the
operator's configured files, trusted as the configuration is.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

__all__ = ["RevokedEntry", "Revocations", "crl_summary"]

_PEM_CRL = re.compile(rb"-----BEGIN X509 CRL-----.+?-----END X509 CRL-----", re.DOTALL)


@dataclass(frozen=True)
class RevokedEntry:
    """One serial listed by one CRL."""

    issuer: str
    serial: int
    revoked_at: datetime
    reason: str | None

    def describe(self) -> str:
        why = f", reason {self.reason}" if self.reason else ""
        return (f"certificate serial {self.serial:#x} revoked by the CRL of {self.issuer} "
                f"at {self.revoked_at.isoformat()}{why}")


def _authority_key_id(extensions: x509.Extensions) -> bytes | None:
    try:
        return extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
    except x509.ExtensionNotFound:
        return None


def _common_name(name: x509.Name) -> str:
    names = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else name.rfc4514_string()


def _entry(crl: x509.CertificateRevocationList, revoked: x509.RevokedCertificate) -> RevokedEntry:
    try:
        reason: str | None = revoked.extensions.get_extension_for_class(x509.CRLReason).value.reason.name
    except x509.ExtensionNotFound:
        reason = None
    return RevokedEntry(issuer=_common_name(crl.issuer), serial=revoked.serial_number,
                        revoked_at=revoked.revocation_date_utc, reason=reason)


def load_crls(paths: Iterable[Path]) -> list[x509.CertificateRevocationList]:
    """Every CRL in ``paths`` (PEM; a file may hold several). Raises ValueError naming a bad file."""
    crls = []
    for path in paths:
        blocks = _PEM_CRL.findall(Path(path).read_bytes())
        if not blocks:
            raise ValueError(f"{path}: no PEM CRL in the file")
        for block in blocks:
            try:
                crls.append(x509.load_pem_x509_crl(block))
            except ValueError as exc:
                raise ValueError(f"{path}: not a valid CRL ({exc})") from None
    return crls


@dataclass(frozen=True)
class Revocations:
    """The serials the configured CRLs list, by (issuer name, authority key id)."""

    #: issuer DER name -> (the CRL's authority key id or None, serial -> entry)
    _by_issuer: dict[bytes, list[tuple[bytes | None, dict[int, RevokedEntry]]]] = field(default_factory=dict)

    @classmethod
    def from_crls(cls, crls: Iterable[x509.CertificateRevocationList]) -> Revocations:
        by_issuer: dict[bytes, list[tuple[bytes | None, dict[int, RevokedEntry]]]] = {}
        for crl in crls:
            serials = {revoked.serial_number: _entry(crl, revoked) for revoked in crl}
            by_issuer.setdefault(crl.issuer.public_bytes(), []).append((_authority_key_id(crl.extensions), serials))
        return cls(by_issuer)

    @classmethod
    def load(cls, paths: Iterable[Path]) -> Revocations:
        return cls.from_crls(load_crls(paths))

    def __len__(self) -> int:
        return sum(len(serials) for lists in self._by_issuer.values() for _, serials in lists)

    def lookup(self, certificate: x509.Certificate | bytes) -> RevokedEntry | None:
        """The CRL entry revoking ``certificate`` (a cryptography certificate or DER), or None."""
        cert = x509.load_der_x509_certificate(certificate) if isinstance(certificate, bytes) else certificate
        key_id = _authority_key_id(cert.extensions)
        for crl_key_id, serials in self._by_issuer.get(cert.issuer.public_bytes(), ()):
            if key_id is not None and crl_key_id is not None and key_id != crl_key_id:
                continue  # same issuer name, another CA key: not this CRL's certificate
            entry = serials.get(cert.serial_number)
            if entry is not None:
                return entry
        return None


def crl_summary(crl: x509.CertificateRevocationList) -> dict[str, object]:
    """What an operator wants to see of a loaded CRL (admin reload answer, log record)."""
    next_update = crl.next_update_utc
    return {"issuer": _common_name(crl.issuer), "last_update": crl.last_update_utc.isoformat(),
            "next_update": next_update.isoformat() if next_update is not None else None,
            "revoked": sum(1 for _ in crl)}
