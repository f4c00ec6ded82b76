"""The PKI state file (``state.json``): pydantic v2 models of CAs, issued certificates, revocations.

Serial numbers are stored as ``0x`` hex strings (159-bit integers do not survive JSON readers that
use doubles). Paths are relative to the PKI directory so the directory can be moved.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer


def _serial_in(value: object) -> object:
    if isinstance(value, str):
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    return value


Serial = Annotated[
    int,
    BeforeValidator(_serial_in),
    PlainSerializer(lambda value: f"{value:#x}", return_type=str),
]

RevocationReason = Literal[
    "unspecified",
    "key_compromise",
    "ca_compromise",
    "affiliation_changed",
    "superseded",
    "cessation_of_operation",
    "certificate_hold",
    "privilege_withdrawn",
]
Profile = Literal["server", "client"]
Status = Literal["valid", "revoked", "expired", "not-yet-valid"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Revocation(_Model):
    """When and why a certificate was revoked."""

    at: datetime
    reason: RevocationReason | None = None


class CertRecord(_Model):
    """Fields shared by every certificate the PKI created."""

    cn: str
    serial: Serial
    not_before: datetime
    not_after: datetime
    key: str = Field(description="key label, e.g. ec-secp256r1 or rsa-2048")
    directory: str = Field(description="directory holding key.pem/cert.pem, relative to the PKI dir")
    revocation: Revocation | None = None

    def status(self, now: datetime | None = None) -> Status:
        """revoked, expired, not-yet-valid or valid at ``now`` (default: the current time)."""
        moment = now or datetime.now(timezone.utc)
        if self.revocation is not None:
            return "revoked"
        if moment > self.not_after:
            return "expired"
        if moment < self.not_before:
            return "not-yet-valid"
        return "valid"


class CaRecord(CertRecord):
    """The root or an intermediate CA, with the number of its most recent CRL."""

    name: str
    issuer: str | None = Field(default=None, description="None for the root, else 'root'")
    crl_number: int = 0


class IssuedRecord(CertRecord):
    """A leaf certificate (IP_117: always issued by an intermediate CA)."""

    profile: Profile
    issuer: str


class PkiState(_Model):
    """Everything ``revoke``, ``crl`` and ``show`` need to know across runs."""

    format: Literal[1] = 1
    root: CaRecord
    intermediates: dict[str, CaRecord] = Field(default_factory=dict)
    issued: list[IssuedRecord] = Field(default_factory=list)

    def ca(self, name: str) -> CaRecord | None:
        """The CA called ``name`` ('root' or an intermediate's name)."""
        if name == self.root.name:
            return self.root
        return self.intermediates.get(name)

    def find_serial(self, serial: int) -> CaRecord | IssuedRecord | None:
        """The intermediate or leaf record with this serial (the root cannot be revoked)."""
        records: list[CaRecord | IssuedRecord] = [*self.intermediates.values(), *self.issued]
        for record in records:
            if record.serial == serial:
                return record
        return None

    def revoked_by(self, ca_name: str) -> list[CaRecord | IssuedRecord]:
        """Revoked certificates issued by ``ca_name``, for its CRL."""
        children: list[CaRecord | IssuedRecord] = (
            list(self.intermediates.values()) if ca_name == self.root.name
            else [record for record in self.issued if record.issuer == ca_name]
        )
        return [record for record in children if record.revocation is not None and record.issuer == ca_name]
