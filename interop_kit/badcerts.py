"""Client certificates the target must refuse, prepared before the run (``interchange interop prepare``).

IP_050/IP_117/IP_057 (chapter 5, appendix E): a peer is accepted only with a certificate chaining
to the common root through an intermediate, sent whole, currently valid, not revoked, usable for
client authentication. One identity per way of breaking that (``foreign-root``, ``expired``,
``not-yet-valid``, ``revoked``, ``wrong-eku``, ``missing-intermediate``) plus the ``valid`` control,
issued from ``--pki DIR``; :func:`prepare` writes them and what the target must load (root, CRLs)
under ``DIR/interop-kit/``, :func:`identities_for` finds them for the run. Every identity verifies
the target against ``--trust``, never the PKI's root. The identities and the manifest:
docs/interop-kit.md.
"""
from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pydantic import BaseModel, ConfigDict, ValidationError

from certs.fsutil import write_atomic, write_private
from certs.keys import SIGNATURE_HASH, KeySpec, load_private_key, private_key_pem
from certs.pki import IssuedIdentity, Pki
from certs.testpki import create_test_pki
from certs.tls import TlsFiles
from interop_kit.model import CheckSkipped, Findings, Target

KINDS = ("foreign-root", "expired", "not-yet-valid", "revoked", "wrong-eku", "missing-intermediate")
CN_PREFIX = "interop-kit-"
PREPARED_DIR = "interop-kit"
MANIFEST = "manifest.json"
DEFAULT_DAYS = 90
MAX_DAYS = 365  #: IP_051: no certificate is valid for longer than a year
CRL_MARGIN = timedelta(days=7)  #: CRLs copied for the target are refreshed when they expire sooner


class PreparedFile(BaseModel):
    """One prepared client identity: its files (relative to the prepared directory) and facts."""

    model_config = ConfigDict(extra="forbid")

    cn: str
    chain: str
    key: str
    serial: int
    not_after: datetime


class RevokedFile(PreparedFile):
    """A revoked identity: when, by which CA, in which CRL number (the first one to list it)."""

    ca: str
    revoked_at: datetime
    crl_number: int


class Prepared(BaseModel):
    """``manifest.json``: what :func:`prepare` made; ``revoked`` holds the newest last."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    prepared_at: datetime
    ca: str  #: the intermediate CA that issued the refusal certificates
    valid_until: datetime  #: the control's notAfter: the set is usable until then
    identities: dict[str, PreparedFile]  #: "valid" and every kind but "revoked"
    revoked: list[RevokedFile]
    root: str  #: install/root.pem
    crls: list[str]  #: install/crl/<ca>.pem, one per intermediate

    def newest_revoked(self) -> RevokedFile:
        return self.revoked[-1]


def prepared_dir(pki_dir: Path) -> Path:
    return pki_dir / PREPARED_DIR


def load(pki_dir: Path) -> Prepared | None:
    """The manifest in ``pki_dir``, None when nothing was prepared there; ValueError when damaged."""
    path = prepared_dir(pki_dir) / MANIFEST
    try:
        return Prepared.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError) as exc:
        raise ValueError(f"{path} cannot be read ({type(exc).__name__}): run `interchange interop prepare "
                         f"--pki {pki_dir} --renew`") from None


def _first_intermediate(pki: Pki) -> str:
    names = sorted(pki.load_state().intermediates)
    if not names:
        raise ValueError(f"the PKI in {pki.directory} has no intermediate CA to issue test certificates from")
    return names[0]


def _wrong_eku(pki: Pki, ca: str, now: datetime, days: int) -> tuple[bytes, bytes, x509.Certificate]:
    ca_cert = x509.load_pem_x509_certificate((pki.ca_dir(ca) / "cert.pem").read_bytes())
    ca_key = load_private_key((pki.ca_dir(ca) / "key.pem").read_bytes())
    key = KeySpec().generate()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{CN_PREFIX}wrong-eku")]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1)).not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, SIGNATURE_HASH)
    )
    chain = cert.public_bytes(Encoding.PEM) + ca_cert.public_bytes(Encoding.PEM)
    return chain, private_key_pem(key), cert


def _keep(out: Path, name: str, chain: bytes, key: bytes, cn: str, serial: int, not_after: datetime) -> PreparedFile:
    """Copy an identity into ``out/certs/<name>/`` (``issued/<cn>/`` is replaced when re-issued)."""
    folder = out / "certs" / name
    write_atomic(folder / "chain.pem", chain)
    write_private(folder / "key.pem", key)
    return PreparedFile(cn=cn, chain=f"certs/{name}/chain.pem", key=f"certs/{name}/key.pem", serial=serial,
                        not_after=not_after)


def _kept(out: Path, name: str, issued: IssuedIdentity, *, leaf_only: bool = False) -> PreparedFile:
    chain = (issued.cert if leaf_only else issued.chain).read_bytes()
    return _keep(out, name, chain, issued.key.read_bytes(), issued.cn, issued.serial, issued.not_after)


def _issue_set(pki: Pki, out: Path, ca: str, now: datetime, days: int) -> dict[str, PreparedFile]:
    """The control and every kind but ``revoked`` (issued by :func:`_issue_revoked`)."""
    made: dict[str, PreparedFile] = {}
    valid = pki.issue_client(f"{CN_PREFIX}valid", ca=ca, days=days, now=now)
    made["valid"] = _kept(out, "valid", valid)
    made["missing-intermediate"] = _kept(out, "missing-intermediate", valid, leaf_only=True)
    expired = pki.issue_client(f"{CN_PREFIX}expired", ca=ca, not_before=now - timedelta(days=2),
                               not_after=now - timedelta(days=1))
    made["expired"] = _kept(out, "expired", expired)
    start = valid.not_after + timedelta(days=1)  # not valid for as long as the set is used
    future = pki.issue_client(f"{CN_PREFIX}not-yet-valid", ca=ca, not_before=start, not_after=start + timedelta(days=30))
    made["not-yet-valid"] = _kept(out, "not-yet-valid", future)
    chain, key, cert = _wrong_eku(pki, ca, now, days)
    made["wrong-eku"] = _keep(out, "wrong-eku", chain, key, f"{CN_PREFIX}wrong-eku", cert.serial_number,
                              cert.not_valid_after_utc)
    shutil.rmtree(out / "foreign-pki", ignore_errors=True)
    foreign = create_test_pki(out / "foreign-pki", [], [f"{CN_PREFIX}foreign-root"], now=now)
    made["foreign-root"] = _kept(out, "foreign-root", foreign.identity(f"{CN_PREFIX}foreign-root"))
    return made


def _issue_revoked(pki: Pki, out: Path, ca: str, now: datetime, days: int) -> RevokedFile:
    issued = pki.issue_client(f"{CN_PREFIX}revoked", ca=ca, days=days, now=now)
    done = pki.revoke(issued.serial, reason="key_compromise", now=now)
    kept = _kept(out, f"revoked-{issued.serial:x}", issued)
    record = pki.load_state().ca(done.ca)
    assert record is not None
    return RevokedFile(**kept.model_dump(), ca=done.ca, revoked_at=now, crl_number=record.crl_number)


def _expires_soon(crl: Path, now: datetime) -> bool:
    next_update = x509.load_pem_x509_crl(crl.read_bytes()).next_update_utc
    return next_update is None or next_update < now + CRL_MARGIN


def _install_files(pki: Pki, out: Path, now: datetime) -> tuple[str, list[str]]:
    """Copy the root and every intermediate's CRL to ``out/install/`` (fresh CRLs if they expire soon)."""
    paths = pki.crl_paths()
    if any(_expires_soon(path, now) for path in paths):
        pki.write_crl(now=now)
    write_atomic(out / "install" / "root.pem", pki.trust_bundle.read_bytes())
    shutil.rmtree(out / "install" / "crl", ignore_errors=True)
    crls = []
    for path in paths:
        name = path.parent.name
        write_atomic(out / "install" / "crl" / f"{name}.pem", path.read_bytes())
        crls.append(f"install/crl/{name}.pem")
    return "install/root.pem", crls


def _complete(out: Path, prepared: Prepared) -> bool:
    entries = [*prepared.identities.values(), *prepared.revoked]
    return all((out / entry.chain).is_file() and (out / entry.key).is_file() for entry in entries)


def prepare(pki_dir: Path, *, days: int = DEFAULT_DAYS, renew: bool = False,
            now: datetime | None = None) -> tuple[Prepared, bool]:
    """Issue the refusal certificates into ``pki_dir/interop-kit`` (or keep a set still valid for a
    day, unless ``renew``) and copy the files to install on the target; (manifest, issued anew)."""
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"--days {days}: between 1 and {MAX_DAYS} (IP_051)")
    pki = Pki(pki_dir)
    if not pki.exists():
        raise ValueError(f"--pki {pki_dir}: no PKI there (state.json missing)")
    moment = now or datetime.now(timezone.utc)
    out = prepared_dir(pki_dir)
    current = load(pki_dir)
    fresh = renew or current is None or current.valid_until - moment < timedelta(days=1) or not _complete(out, current)
    if fresh:
        ca = _first_intermediate(pki)
        identities = _issue_set(pki, out, ca, moment, days)
        earlier = [r for r in (current.revoked if current is not None else []) if r.not_after > moment]
        revoked = [*earlier, _issue_revoked(pki, out, ca, moment, days)]
        valid_until = identities["valid"].not_after
    else:
        assert current is not None
        ca, identities, revoked, valid_until = current.ca, current.identities, current.revoked, current.valid_until
    root, crls = _install_files(pki, out, moment)
    since = current.prepared_at if current is not None and not fresh else moment
    manifest = Prepared(prepared_at=since, ca=ca, valid_until=valid_until, identities=identities, revoked=revoked,
                        root=root, crls=crls)
    write_atomic(out / MANIFEST, (manifest.model_dump_json(indent=2) + "\n").encode())
    return manifest, fresh


def identities_for(target: Target, findings: Findings) -> tuple[Prepared, dict[str, TlsFiles]]:
    """The prepared set and its identities (keyed by kind, ``revoked`` = the newest revoked one),
    each verifying the target's certificate against ``--trust``; CheckSkipped saying why not."""
    if target.pki is None:
        raise CheckSkipped("needs --pki DIR: a test PKI whose root the target trusts for client certificates, "
                           "prepared before the run with `interchange interop prepare --pki DIR`")
    if "badcerts" not in findings.values:
        try:
            prepared = load(target.pki)
        except ValueError as exc:
            raise CheckSkipped(str(exc)) from None
        if prepared is None:
            raise CheckSkipped(f"nothing prepared in {prepared_dir(target.pki)}: run `interchange interop prepare "
                               f"--pki {target.pki}` and install what it lists on the target before the run")
        if prepared.valid_until <= datetime.now(timezone.utc):
            raise CheckSkipped(f"the certificates prepared in {prepared_dir(target.pki)} expired on "
                               f"{prepared.valid_until:%Y-%m-%d %H:%M} UTC: run `interchange interop prepare --pki "
                               f"{target.pki} --renew` and install its CRL on the target")
        findings.values["badcerts"] = prepared
    found: Prepared = findings.values["badcerts"]
    return found, {kind: files(target, entry)
                   for kind, entry in {**found.identities, "revoked": found.newest_revoked()}.items()}


def prepared_path(target: Target, relative: str) -> Path:
    """A file of the set :func:`identities_for` found for ``target``."""
    assert target.pki is not None  # identities_for skips the check without it
    return prepared_dir(target.pki) / relative


def files(target: Target, entry: PreparedFile) -> TlsFiles:
    """``entry``'s certificate and key; the target's server certificate is verified against ``--trust``."""
    return TlsFiles(prepared_path(target, entry.chain), prepared_path(target, entry.key), target.identity.trust_bundle)
