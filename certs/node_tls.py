"""A node's TLS settings and their reload without a restart (chapter 5, IP_050/IP_051).

:class:`NodeTls` owns the server and client contexts of one node process; :meth:`NodeTls.reload`
builds both from the configured files *before* swapping either in, so a broken file leaves the
process on its previous settings and the operator gets the reason (:class:`TlsReloadError`). New
connections use the new contexts; open ones are kept unless the new CRLs revoke their peer
(:attr:`NodeTls.revocations`, checked by ``BrokerServer.close_revoked`` and
``RunningII.close_revoked``). More: docs/pki-and-tls.md.
"""
from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from certs.revocation import Revocations, crl_summary, load_crls
from certs.tls import ReloadingTls, TlsFiles, certificate_lifetime_problem

__all__ = ["NodeTls", "TlsReload", "TlsReloadError", "certificate_summary"]


class TlsReloadError(ValueError):
    """The files cannot make a complete TLS setting; the previous one stays in use."""


def certificate_summary(chain: Path) -> dict[str, Any]:
    """The node's own certificate (the first of its chain file), as an operator checks a rotation."""
    cert = x509.load_pem_x509_certificate(chain.read_bytes())
    names = cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
    return {"subject": str(names[0].value) if names else cert.subject.rfc4514_string(),
            "serial": f"{cert.serial_number:#x}", "not_after": cert.not_valid_after_utc.isoformat(),
            "sha256": hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()}


def check_files(files: TlsFiles) -> None:
    """Raise ValueError naming the file that is not usable (OpenSSL's own errors do not name it)."""
    files.check()
    try:
        certificate = x509.load_pem_x509_certificate(files.cert_chain.read_bytes())
    except ValueError as exc:
        raise ValueError(f"{files.cert_chain}: not a PEM certificate chain ({exc})") from None
    try:
        key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{files.key}: not an unencrypted PEM private key ({exc})") from None
    if key.public_key().public_bytes(*_SPKI) != certificate.public_key().public_bytes(*_SPKI):
        raise ValueError(f"{files.key}: the key does not belong to the certificate in {files.cert_chain}")
    try:
        x509.load_pem_x509_certificates(files.trust_bundle.read_bytes())
    except ValueError as exc:
        raise ValueError(f"{files.trust_bundle}: not a PEM trust bundle ({exc})") from None


_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class TlsReload:
    """What one reload put in place."""

    certificate: dict[str, Any]
    crls: list[dict[str, object]]
    revocations: Revocations

    def summary(self) -> dict[str, Any]:
        return {"certificate": self.certificate, "crls": self.crls, "revoked_serials": len(self.revocations)}


class NodeTls:
    """The server and client contexts of one node process, reloaded together."""

    def __init__(self, files: TlsFiles, max_certificate_days: int | None = None) -> None:
        self.files = files
        self.max_certificate_days = max_certificate_days  #: IP_051, as tls.max_certificate_days
        self.server = ReloadingTls(files, "server")
        self.client = ReloadingTls(files, "client")
        self.revocations = Revocations.load(files.crls)

    def reload(self) -> TlsReload:
        """Re-read certificate, key, trust bundle and CRLs; use them for new connections.

        Blocking file and crypto work (milliseconds): call it off the event loop. Raises
        :class:`TlsReloadError` with the reason, having changed nothing, if any file is unusable."""
        try:
            check_files(self.files)
            crls = load_crls(self.files.crls)
            server, client = self.server.build(), self.client.build()
            certificate = certificate_summary(self.files.cert_chain)
            lifetime = (certificate_lifetime_problem(self.files.cert_chain, self.max_certificate_days)
                        if self.max_certificate_days is not None else None)
        except (OSError, ValueError, ssl.SSLError) as exc:  # ssl.SSLError: e.g. key and certificate differ
            raise TlsReloadError(f"TLS files not reloaded, the previous settings stay in use: {exc}") from None
        if lifetime is not None:
            raise TlsReloadError(f"TLS files not reloaded, the previous settings stay in use: "
                                 f"the node's own certificate {self.files.cert_chain}: {lifetime}")
        self.server.install(server)
        self.client.install(client)
        self.revocations = Revocations.from_crls(crls)
        return TlsReload(certificate, [crl_summary(crl) for crl in crls], self.revocations)
