"""The foreign interchange's own session-level PKI, made with ``cryptography`` (appendix E).

A root, one intermediate (IP_117: leaves are issued by a subordinate CA), leaves valid 90 days
(IP_051: at most a year) as X.509 v3 (IP_063), and the intermediate's CRL. The interchange's
server certificate carries its FQDN as CN and SAN dNSName (IP_125); client certificates carry
clientAuth. CA certificates have the key identifiers and critical basic constraints and key usage
that strict verification (RFC 5280) asks for.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LEAF_DAYS = 90


@dataclass(frozen=True)
class Identity:
    chain: Path  #: leaf + intermediate: what is sent in the handshake (IP_057)
    key: Path


@dataclass(frozen=True)
class ForeignPki:
    root: Path  #: the root certificate: the trust list (IP_115)
    crl: Path  #: the intermediate's CRL
    identities: dict[str, Identity] = field(default_factory=dict)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "SE"), x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
        path_length: int, now: datetime) -> x509.Certificate:
    issuer_name = issuer[0].subject if issuer else _name(subject)
    signer = issuer[1] if issuer else key
    builder = (
        x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    authority = (issuer[1] if issuer else key).public_key()
    builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(authority), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _leaf(cn: str, server: bool, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
          now: datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=LEAF_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(cn)]), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _pem(*certificates: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def build(directory: Path, server: str, clients: Sequence[str]) -> ForeignPki:
    """Root, intermediate, ``server``'s certificate and one client certificate per name, in ``directory``."""
    now = datetime.now(timezone.utc)
    directory.mkdir(parents=True, exist_ok=True)
    root_key, int_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    root = _ca("Foreign Session Root", root_key, None, 1, now)
    intermediate = _ca("Foreign Session CA 1", int_key, (root, root_key), 0, now)
    (directory / "root.pem").write_bytes(_pem(root))
    crl = (
        x509.CertificateRevocationListBuilder().issuer_name(intermediate.subject).last_update(now)
        .next_update(now + timedelta(days=30)).add_extension(x509.CRLNumber(1), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(int_key.public_key()), critical=False)
        .sign(int_key, hashes.SHA256())
    )
    (directory / "crl.pem").write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    made = ForeignPki(directory / "root.pem", directory / "crl.pem")
    for cn, is_server in [(server, True), *((c, False) for c in clients)]:
        cert, key = _leaf(cn, is_server, intermediate, int_key, now)
        (directory / f"{cn}.chain.pem").write_bytes(_pem(cert, intermediate))
        (directory / f"{cn}.key.pem").write_bytes(_key_pem(key))
        made.identities[cn] = Identity(directory / f"{cn}.chain.pem", directory / f"{cn}.key.pem")
    return made
