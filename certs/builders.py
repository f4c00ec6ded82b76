"""Pure X.509 construction: certificates and CRLs for the session-level PKI (no file access).

IP_063: X.509 v3 certificates (RFC 5280) with basicConstraints and keyUsage (both critical),
subject/authority key identifiers, extendedKeyUsage on leaves, random 159-bit serial numbers.
IP_117: leaves are signed by an intermediate CA (pathLen 0) below the common root.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.errors import PkiError
from certs.keys import SIGNATURE_HASH, PrivateKey

#: IP_051: client and server certificates are renewed at least yearly.
MAX_LEAF_VALIDITY = timedelta(days=365)
#: not_before is set this far in the past to tolerate small clock differences between peers;
#: the total validity (not_after - not_before) still respects MAX_LEAF_VALIDITY.
CLOCK_SKEW = timedelta(minutes=1)

Profile = Literal["server", "client"]


@dataclass(frozen=True)
class Validity:
    """A certificate's validity window, in UTC with whole seconds."""

    not_before: datetime
    not_after: datetime

    def __post_init__(self) -> None:
        if self.not_after <= self.not_before:
            raise PkiError("certificate validity is empty: not_after must be after not_before")

    @classmethod
    def for_days(cls, days: int, *, now: datetime | None = None) -> Validity:
        """``days`` long, starting CLOCK_SKEW before ``now``."""
        if days < 1:
            raise PkiError(f"validity must be at least one day (got {days})")
        start = utc_seconds(now or datetime.now(timezone.utc)) - CLOCK_SKEW
        return cls(start, start + timedelta(days=days))

    @property
    def length(self) -> timedelta:
        return self.not_after - self.not_before


def utc_seconds(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime without microseconds (what X.509 can encode)."""
    if moment.tzinfo is None:
        raise PkiError("datetimes given to the PKI must be timezone-aware")
    return moment.astimezone(timezone.utc).replace(microsecond=0)


def new_serial() -> int:
    """A random positive serial of at most 159 bits (RFC 5280: at most 20 octets, positive)."""
    while True:
        serial = x509.random_serial_number()
        if serial > 0:
            return serial


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca_key_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=False, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )


def _leaf_key_usage() -> x509.KeyUsage:
    # TLS 1.3 only uses the leaf key for signatures (CertificateVerify), for RSA and EC alike.
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
        encipher_only=False, decipher_only=False,
    )


def _issuer_aki(issuer: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    ski = issuer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _check_within_issuer(validity: Validity, issuer: x509.Certificate) -> None:
    if validity.not_after > issuer.not_valid_after_utc:
        raise PkiError(
            f"the certificate would outlive its issuing CA (valid until "
            f"{issuer.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC): ask for fewer days"
        )


def build_root(key: PrivateKey, cn: str, validity: Validity) -> x509.Certificate:
    """The self-signed common TLS root (IP_115/116): CA, pathLen 1 (root -> intermediate -> leaf)."""
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(new_serial())
        .not_valid_before(validity.not_before)
        .not_valid_after(validity.not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
        .add_extension(_ca_key_usage(), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
    )
    return builder.sign(key, SIGNATURE_HASH)


def build_intermediate(
    public_key: object, cn: str, validity: Validity, issuer: x509.Certificate, issuer_key: PrivateKey
) -> x509.Certificate:
    """An intermediate CA (IP_117) signed by the root: CA with pathLen 0."""
    _check_within_issuer(validity, issuer)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer.subject)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(new_serial())
        .not_valid_before(validity.not_before)
        .not_valid_after(validity.not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_ca_key_usage(), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)  # type: ignore[arg-type]
        .add_extension(_issuer_aki(issuer), critical=False)
    )
    return builder.sign(issuer_key, SIGNATURE_HASH)


def build_leaf(
    public_key: object,
    cn: str,
    profile: Profile,
    validity: Validity,
    issuer: x509.Certificate,
    issuer_key: PrivateKey,
) -> x509.Certificate:
    """A TLS leaf certificate.

    ``server``: an interchange; CN and SAN dNSName are its SRV target name (IP_125), EKU serverAuth
    and clientAuth (an interchange is also a client of other interchanges).
    ``client``: a C-ITS actor; EKU clientAuth.
    IP_051: validity at most MAX_LEAF_VALIDITY.
    """
    if validity.length > MAX_LEAF_VALIDITY:
        raise PkiError(
            f"client and server certificates may be valid for at most {MAX_LEAF_VALIDITY.days} days "
            f"(IP_051); asked for {validity.length.days} days"
        )
    _check_within_issuer(validity, issuer)
    if profile == "server":
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    else:
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer.subject)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(new_serial())
        .not_valid_before(validity.not_before)
        .not_valid_after(validity.not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_leaf_key_usage(), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)  # type: ignore[arg-type]
        .add_extension(_issuer_aki(issuer), critical=False)
    )
    if profile == "server":
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(cn)]), critical=False)
    return builder.sign(issuer_key, SIGNATURE_HASH)


@dataclass(frozen=True)
class RevokedEntry:
    """One CRL entry."""

    serial: int
    revoked_at: datetime
    reason: x509.ReasonFlags | None = None


def build_crl(
    issuer: x509.Certificate,
    issuer_key: PrivateKey,
    revoked: Iterable[RevokedEntry],
    *,
    crl_number: int,
    this_update: datetime,
    next_update: datetime,
) -> x509.CertificateRevocationList:
    """A v2 CRL signed by ``issuer`` with CRL number, AKI and nextUpdate."""
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(issuer.subject)
        .last_update(utc_seconds(this_update))
        .next_update(utc_seconds(next_update))
        .add_extension(x509.CRLNumber(crl_number), critical=False)
        .add_extension(_issuer_aki(issuer), critical=False)
    )
    for entry in revoked:
        revoked_builder = (
            x509.RevokedCertificateBuilder()
            .serial_number(entry.serial)
            .revocation_date(utc_seconds(entry.revoked_at))
        )
        if entry.reason is not None:
            revoked_builder = revoked_builder.add_extension(x509.CRLReason(entry.reason), critical=False)
        builder = builder.add_revoked_certificate(revoked_builder.build())
    return builder.sign(issuer_key, SIGNATURE_HASH)
