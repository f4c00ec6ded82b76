"""Key generation and PEM encoding for the session-level PKI.

EC P-256 by default; RSA (at least 2048 bits) on request. Every key signs with SHA-256.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from certs.errors import PkiError

PrivateKey = Union[ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey]
KeyType = Literal["ec", "rsa"]
MIN_RSA_BITS = 2048
MAX_RSA_BITS = 8192
SIGNATURE_HASH = hashes.SHA256()


@dataclass(frozen=True)
class KeySpec:
    """Which key to create: ``ec`` (P-256) or ``rsa`` with 2048 <= ``rsa_bits`` <= 8192."""

    type: KeyType = "ec"
    rsa_bits: int = 2048

    def __post_init__(self) -> None:
        if self.type not in ("ec", "rsa"):
            raise PkiError(f"unknown key type {self.type!r}: use ec or rsa")
        if self.type == "rsa" and not MIN_RSA_BITS <= self.rsa_bits <= MAX_RSA_BITS:
            raise PkiError(
                f"RSA keys must have at least {MIN_RSA_BITS} and at most {MAX_RSA_BITS} bits (got {self.rsa_bits})"
            )

    def generate(self) -> PrivateKey:
        """Create a fresh private key of this kind."""
        if self.type == "rsa":
            return rsa.generate_private_key(public_exponent=65537, key_size=self.rsa_bits)
        return ec.generate_private_key(ec.SECP256R1())

    def describe(self) -> str:
        """A short label such as ``ec-p256`` or ``rsa-3072`` for listings."""
        return f"rsa-{self.rsa_bits}" if self.type == "rsa" else "ec-p256"


def describe_key(key: PrivateKey) -> str:
    """The listing label of an existing private key."""
    if isinstance(key, rsa.RSAPrivateKey):
        return f"rsa-{key.key_size}"
    return f"ec-{key.curve.name}"


def private_key_pem(key: PrivateKey) -> bytes:
    """Unencrypted PKCS#8 PEM (the file itself is protected by mode 0600)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_private_key(data: bytes) -> PrivateKey:
    """Load a PKCS#8/traditional PEM private key created by this package."""
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise PkiError("unsupported private key type in the PKI directory")
    return key
