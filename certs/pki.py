"""The session-level PKI directory (chapter 5, appendix E): root, intermediates, leaves, CRLs.

A common root, intermediate CAs issuing interchanges' server and actors' client certificates
(IP_117), kept in one directory (``PKI_DIR``, default ``./pki``) for tests, demos and small
deployments: ``trust.pem`` (the root only, IP_115/116), ``root/``, ``ca/<name>/`` (each with a
current ``crl.pem``) and ``issued/<cn>/`` (``chain.pem`` = leaf + intermediate, IP_057), indexed in
``state.json``. Renewal (IP_051) replaces ``issued/<cn>/`` and keeps the older certificate
revocable. All writes are atomic; private keys have mode 0600. The layout: docs/pki-and-tls.md.
"""
from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pydantic import ValidationError

from certs.builders import (
    CLOCK_SKEW,
    RevokedEntry,
    Validity,
    build_crl,
    build_intermediate,
    build_leaf,
    build_root,
    utc_seconds,
)
from certs.errors import PkiError
from certs.fsutil import write_atomic, write_private
from certs.keys import KeySpec, PrivateKey, describe_key, load_private_key, private_key_pem
from certs.models import CaRecord, IssuedRecord, PkiState, Profile, Revocation, RevocationReason
from certs.names import ROOT_NAME, validate_actor_cn, validate_ca_name, validate_fqdn

DEFAULT_ROOT_CN = "C-Roads Session Test Root CA"
DEFAULT_ROOT_DAYS = 3650
DEFAULT_INTERMEDIATE_DAYS = 1825
DEFAULT_LEAF_DAYS = 365
DEFAULT_CRL_DAYS = 30

STATE_FILE = "state.json"
TRUST_FILE = "trust.pem"


@dataclass(frozen=True)
class IssuedIdentity:
    """Paths and facts of one issued leaf certificate (an identity directory ``issued/<cn>``)."""

    cn: str
    profile: Profile
    serial: int
    issuer: str
    not_before: datetime
    not_after: datetime
    directory: Path

    @property
    def key(self) -> Path:
        return self.directory / "key.pem"

    @property
    def cert(self) -> Path:
        return self.directory / "cert.pem"

    @property
    def chain(self) -> Path:
        """Leaf + intermediate (IP_057)."""
        return self.directory / "chain.pem"

    @property
    def trust(self) -> Path:
        """The root certificate only (IP_115/116)."""
        return self.directory / TRUST_FILE


@dataclass(frozen=True)
class Revoked:
    """The outcome of :meth:`Pki.revoke`."""

    cn: str
    serial: int
    ca: str
    crl: Path


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class Pki:
    """One PKI directory. Construction does no I/O; every method reads the state it needs."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    # -- paths ---------------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    @property
    def trust_bundle(self) -> Path:
        """The root certificate only (IP_115/116)."""
        return self.directory / TRUST_FILE

    def ca_dir(self, name: str) -> Path:
        return self.directory / ROOT_NAME if name == ROOT_NAME else self.directory / "ca" / name

    def crl_path(self, name: str) -> Path:
        return self.ca_dir(name) / "crl.pem"

    def identity_dir(self, cn: str) -> Path:
        return self.directory / "issued" / cn

    def crl_paths(self) -> tuple[Path, ...]:
        """Every intermediate's CRL (what a TLS context must load to check leaves, see certs.tls)."""
        state = self.load_state()
        return tuple(self.crl_path(name) for name in sorted(state.intermediates))

    # -- state ---------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.state_path.is_file()

    def load_state(self) -> PkiState:
        """Read ``state.json``; a missing or damaged file is a user error."""
        if not self.directory.is_dir():
            raise PkiError(f"PKI directory {self.directory} does not exist: run init-root first")
        try:
            raw = self.state_path.read_bytes()
        except FileNotFoundError:
            raise PkiError(f"{self.directory} holds no PKI ({STATE_FILE} missing): run init-root first") from None
        try:
            return PkiState.model_validate_json(raw)
        except ValidationError as exc:
            raise PkiError(f"{self.state_path} is damaged: {exc.error_count()} validation error(s)") from None

    def _save_state(self, state: PkiState) -> None:
        write_atomic(self.state_path, state.model_dump_json(indent=2).encode() + b"\n")

    @contextmanager
    def _locked(self, *, create: bool = False) -> Iterator[None]:
        """Hold the directory's advisory lock; only init_root may create the directory."""
        if create:
            self.directory.mkdir(parents=True, exist_ok=True)
        elif not self.directory.is_dir():
            raise PkiError(f"PKI directory {self.directory} does not exist: run init-root first")
        with open(self.directory / ".lock", "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _load_ca(self, record: CaRecord) -> tuple[x509.Certificate, PrivateKey]:
        folder = self.directory / record.directory
        try:
            cert = x509.load_pem_x509_certificate((folder / "cert.pem").read_bytes())
            key = load_private_key((folder / "key.pem").read_bytes())
        except (OSError, ValueError) as exc:
            raise PkiError(f"cannot read CA {record.name!r} from {folder}: {exc}") from None
        return cert, key

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.directory).as_posix()

    # -- operations ----------------------------------------------------------------------------
    def init_root(
        self,
        *,
        cn: str = DEFAULT_ROOT_CN,
        days: int = DEFAULT_ROOT_DAYS,
        key_spec: KeySpec = KeySpec(),
        now: datetime | None = None,
    ) -> CaRecord:
        """Create the common TLS root (IP_115/116), ``trust.pem`` and an empty root CRL."""
        if not cn.strip():
            raise PkiError("the root CA needs a non-empty common name")
        with self._locked(create=True):
            if self.exists():
                raise PkiError(f"{self.directory} already holds a PKI (found {STATE_FILE})")
            validity = Validity.for_days(days, now=now)
            key = key_spec.generate()
            cert = build_root(key, cn, validity)
            folder = self.ca_dir(ROOT_NAME)
            write_private(folder / "key.pem", private_key_pem(key))
            write_atomic(folder / "cert.pem", _pem(cert))
            write_atomic(self.trust_bundle, _pem(cert))
            record = CaRecord(
                name=ROOT_NAME, cn=cn, serial=cert.serial_number, not_before=validity.not_before,
                not_after=validity.not_after, key=describe_key(key), directory=self._relative(folder),
            )
            state = PkiState(root=record)
            self._write_crl(state, record, now=now)
            self._save_state(state)
            return record

    def add_intermediate(
        self,
        name: str,
        *,
        cn: str | None = None,
        days: int | None = None,
        key_spec: KeySpec = KeySpec(),
        now: datetime | None = None,
    ) -> CaRecord:
        """Create intermediate CA ``name`` signed by the root (IP_117) and its empty CRL.

        Without ``days`` the CA lives DEFAULT_INTERMEDIATE_DAYS or until the root expires.
        """
        validate_ca_name(name)
        subject = cn or f"C-Roads Session Intermediate CA {name}"
        with self._locked():
            state = self.load_state()
            if name in state.intermediates:
                raise PkiError(f"intermediate CA {name!r} already exists")
            if state.root.status(now) != "valid":
                raise PkiError(f"the root CA is {state.root.status(now)}: cannot issue from it")
            root_cert, root_key = self._load_ca(state.root)
            if days is None:
                validity = Validity.for_days(DEFAULT_INTERMEDIATE_DAYS, now=now)
                validity = Validity(validity.not_before, min(validity.not_after, root_cert.not_valid_after_utc))
            else:
                validity = Validity.for_days(days, now=now)
            key = key_spec.generate()
            cert = build_intermediate(key.public_key(), subject, validity, root_cert, root_key)
            folder = self.ca_dir(name)
            write_private(folder / "key.pem", private_key_pem(key))
            write_atomic(folder / "cert.pem", _pem(cert))
            write_atomic(folder / "chain.pem", _pem(cert) + _pem(root_cert))
            record = CaRecord(
                name=name, cn=subject, serial=cert.serial_number, issuer=ROOT_NAME,
                not_before=validity.not_before, not_after=validity.not_after,
                key=describe_key(key), directory=self._relative(folder),
            )
            state.intermediates[name] = record
            self._write_crl(state, record, now=now)
            self._save_state(state)
            return record

    def issue_server(self, fqdn: str, **options: Any) -> IssuedIdentity:
        """An interchange certificate: CN = SAN dNSName = SRV target (IP_125), EKU server+client.

        ``options`` are those of :meth:`issue` (ca, days, not_before, not_after, key_spec, now).
        """
        return self.issue(fqdn, "server", **options)

    def issue_client(self, cn: str, **options: Any) -> IssuedIdentity:
        """A C-ITS actor's client certificate (EKU clientAuth); ``options`` as for :meth:`issue`."""
        return self.issue(cn, "client", **options)

    def issue(
        self,
        cn: str,
        profile: Profile,
        *,
        ca: str | None = None,
        days: int = DEFAULT_LEAF_DAYS,
        not_before: datetime | None = None,
        not_after: datetime | None = None,
        key_spec: KeySpec = KeySpec(),
        now: datetime | None = None,
    ) -> IssuedIdentity:
        """Issue a leaf from intermediate ``ca`` (default: the only intermediate).

        ``not_before``/``not_after`` override the window (tests use them for expired or
        not-yet-valid certificates); the total length is always capped at 365 days (IP_051).
        """
        if profile == "server":
            cn = validate_fqdn(cn)
        else:
            validate_actor_cn(cn)
        with self._locked():
            state = self.load_state()
            ca_record = self._pick_issuer(state, ca, now)
            ca_cert, ca_key = self._load_ca(ca_record)
            if not_before is not None:
                start = utc_seconds(not_before)
            else:
                start = utc_seconds(now or datetime.now(timezone.utc)) - CLOCK_SKEW
            end = utc_seconds(not_after) if not_after is not None else start + timedelta(days=days)
            validity = Validity(start, end)
            previous = [record for record in state.issued if record.cn == cn]
            if previous and previous[-1].profile != profile:
                raise PkiError(f"{cn!r} already has a {previous[-1].profile} certificate; use another name")
            key = key_spec.generate()
            cert = build_leaf(key.public_key(), cn, profile, validity, ca_cert, ca_key)
            folder = self.identity_dir(cn)
            write_private(folder / "key.pem", private_key_pem(key))
            write_atomic(folder / "cert.pem", _pem(cert))
            write_atomic(folder / "chain.pem", _pem(cert) + _pem(ca_cert))
            write_atomic(folder / TRUST_FILE, self.trust_bundle.read_bytes())
            record = IssuedRecord(
                cn=cn, profile=profile, serial=cert.serial_number, issuer=ca_record.name,
                not_before=validity.not_before, not_after=validity.not_after,
                key=describe_key(key), directory=self._relative(folder),
            )
            state.issued.append(record)
            self._save_state(state)
            return self._identity(record)

    def identity(self, cn: str) -> IssuedIdentity:
        """The newest certificate issued for ``cn``."""
        state = self.load_state()
        for record in reversed(state.issued):
            if record.cn == cn:
                return self._identity(record)
        raise PkiError(f"no certificate has been issued for {cn!r}")

    def revoke(
        self, serial: int, *, reason: RevocationReason | None = None, now: datetime | None = None
    ) -> Revoked:
        """Mark ``serial`` revoked and rewrite the issuing CA's CRL."""
        with self._locked():
            state = self.load_state()
            if serial == state.root.serial:
                raise PkiError("the root certificate cannot be revoked; replace the trust domain instead")
            record = state.find_serial(serial)
            if record is None:
                raise PkiError(f"no certificate with serial {serial:#x} was issued by this PKI")
            if record.revocation is not None:
                raise PkiError(f"certificate {serial:#x} (CN={record.cn}) is already revoked")
            assert record.issuer is not None  # find_serial never returns the root
            record.revocation = Revocation(at=utc_seconds(now or datetime.now(timezone.utc)), reason=reason)
            issuer = state.ca(record.issuer)
            assert issuer is not None
            crl = self._write_crl(state, issuer, now=now)
            self._save_state(state)
            return Revoked(cn=record.cn, serial=serial, ca=issuer.name, crl=crl)

    def write_crl(
        self, ca: str | None = None, *, days: int = DEFAULT_CRL_DAYS, now: datetime | None = None
    ) -> list[Path]:
        """Write fresh CRLs (nextUpdate = now + ``days``) for ``ca``, or for every CA when None."""
        if days < 1:
            raise PkiError("a CRL's nextUpdate must be at least one day ahead")
        with self._locked():
            state = self.load_state()
            if ca is None:
                records = [state.root, *state.intermediates.values()]
            else:
                found = state.ca(ca)
                if found is None:
                    raise PkiError(f"unknown CA {ca!r} (known: {', '.join(self._ca_names(state))})")
                records = [found]
            paths = [self._write_crl(state, record, days=days, now=now) for record in records]
            self._save_state(state)
            return paths

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _ca_names(state: PkiState) -> list[str]:
        return [ROOT_NAME, *sorted(state.intermediates)]

    def _pick_issuer(self, state: PkiState, ca: str | None, now: datetime | None) -> CaRecord:
        if ca is None:
            if not state.intermediates:
                raise PkiError("no intermediate CA yet: run add-intermediate first (IP_117)")
            if len(state.intermediates) > 1:
                raise PkiError(f"several intermediate CAs ({', '.join(sorted(state.intermediates))}): choose one with --ca")
            record = next(iter(state.intermediates.values()))
        elif ca == ROOT_NAME:
            raise PkiError("client and server certificates are issued by an intermediate CA, not the root (IP_117)")
        else:
            found = state.intermediates.get(ca)
            if found is None:
                known = ", ".join(sorted(state.intermediates)) or "none"
                raise PkiError(f"unknown intermediate CA {ca!r} (known: {known})")
            record = found
        status = record.status(now)
        if status != "valid":
            raise PkiError(f"intermediate CA {record.name!r} is {status}: it cannot issue certificates")
        return record

    def _write_crl(
        self, state: PkiState, record: CaRecord, *, days: int = DEFAULT_CRL_DAYS, now: datetime | None = None
    ) -> Path:
        cert, key = self._load_ca(record)
        moment = utc_seconds(now or datetime.now(timezone.utc))
        record.crl_number += 1
        entries = [
            RevokedEntry(
                serial=child.serial,
                revoked_at=child.revocation.at,
                reason=x509.ReasonFlags[child.revocation.reason] if child.revocation.reason else None,
            )
            for child in state.revoked_by(record.name)
            if child.revocation is not None
        ]
        crl = build_crl(
            cert, key, entries, crl_number=record.crl_number,
            this_update=moment, next_update=moment + timedelta(days=days),
        )
        path = self.crl_path(record.name)
        write_atomic(path, crl.public_bytes(serialization.Encoding.PEM))
        return path

    def _identity(self, record: IssuedRecord) -> IssuedIdentity:
        return IssuedIdentity(
            cn=record.cn, profile=record.profile, serial=record.serial, issuer=record.issuer,
            not_before=record.not_before, not_after=record.not_after,
            directory=self.directory / record.directory,
        )
