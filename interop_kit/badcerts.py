"""Client certificates the target must refuse, issued from the test PKI the target trusts (``--pki``).

IP_050/IP_117 (chapter 5, appendix E): a peer is accepted only with a certificate that chains to
the common root through an intermediate CA, sent whole (IP_057), currently valid and not revoked,
usable for TLS client authentication. For each way of breaking that, the kit makes one identity:

- ``valid``: the control; it must be *accepted*, or the refusals prove nothing;
- ``foreign-root``: same kind of certificate from an unrelated root (a fresh PKI in the workdir);
- ``expired`` / ``not-yet-valid``: validity window in the past / in the future;
- ``revoked``: issued, then revoked in the PKI, whose CRL the target loads (its new CRL is written);
- ``wrong-eku``: extendedKeyUsage serverAuth only (a server certificate presented as a client);
- ``missing-intermediate``: the valid certificate without its intermediate in the chain.

Certificates are issued with :class:`certs.pki.Pki` (the PKI records them) except ``wrong-eku``,
which the PKI's profiles cannot express: it is signed here with the intermediate's key.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.keys import SIGNATURE_HASH, KeySpec, load_private_key, private_key_pem
from certs.pki import Pki
from certs.testpki import create_test_pki
from certs.tls import TlsFiles
from interop_kit.model import CheckSkipped, Findings, Target

KINDS = ("foreign-root", "expired", "not-yet-valid", "revoked", "wrong-eku", "missing-intermediate")
CN_PREFIX = "interop-kit-"


def _files(chain: Path, key: Path, trust: Path) -> TlsFiles:
    return TlsFiles(cert_chain=chain, key=key, trust_bundle=trust)


def _first_intermediate(pki: Pki) -> str:
    names = sorted(pki.load_state().intermediates)
    if not names:
        raise ValueError(f"the PKI in {pki.directory} has no intermediate CA to issue test certificates from")
    return names[0]


def _wrong_eku(pki: Pki, ca: str, out: Path) -> TlsFiles:
    ca_cert = x509.load_pem_x509_certificate((pki.ca_dir(ca) / "cert.pem").read_bytes())
    ca_key = load_private_key((pki.ca_dir(ca) / "key.pem").read_bytes())
    key = KeySpec().generate()
    now = datetime.now(timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{CN_PREFIX}wrong-eku")]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1)).not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, SIGNATURE_HASH)
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "key.pem").write_bytes(private_key_pem(key))
    (out / "chain.pem").write_bytes(cert.public_bytes(Encoding.PEM) + ca_cert.public_bytes(Encoding.PEM))
    return _files(out / "chain.pem", out / "key.pem", pki.trust_bundle)


def issue_all(pki_dir: Path, workdir: Path) -> dict[str, TlsFiles]:
    """``valid`` plus one identity per :data:`KINDS`, keyed by kind."""
    pki = Pki(pki_dir)
    if not pki.exists():
        raise ValueError(f"--pki {pki_dir}: no PKI there (state.json missing)")
    ca = _first_intermediate(pki)
    now = datetime.now(timezone.utc)
    trust = pki.trust_bundle
    made: dict[str, TlsFiles] = {}
    valid = pki.issue_client(f"{CN_PREFIX}valid", ca=ca, days=30)
    made["valid"] = _files(valid.chain, valid.key, trust)
    made["missing-intermediate"] = _files(valid.cert, valid.key, trust)
    expired = pki.issue_client(f"{CN_PREFIX}expired", ca=ca, not_before=now - timedelta(days=2),
                               not_after=now - timedelta(days=1))
    made["expired"] = _files(expired.chain, expired.key, trust)
    future = pki.issue_client(f"{CN_PREFIX}not-yet-valid", ca=ca, not_before=now + timedelta(days=1),
                              not_after=now + timedelta(days=30))
    made["not-yet-valid"] = _files(future.chain, future.key, trust)
    revoked = pki.issue_client(f"{CN_PREFIX}revoked", ca=ca, days=30)
    serial = x509.load_pem_x509_certificate(revoked.cert.read_bytes()).serial_number
    pki.revoke(serial, reason="key_compromise")
    made["revoked"] = _files(revoked.chain, revoked.key, trust)
    made["wrong-eku"] = _wrong_eku(pki, ca, workdir / "wrong-eku")
    foreign = create_test_pki(workdir / "foreign-pki", [], [f"{CN_PREFIX}foreign-root"])
    stranger = foreign.identity(f"{CN_PREFIX}foreign-root")
    made["foreign-root"] = _files(stranger.chain, stranger.key, trust)
    return made


def identities_for(target: Target, findings: Findings) -> dict[str, TlsFiles]:
    """The run's test identities (issued once per run); CheckSkipped without ``--pki``."""
    if target.pki is None:
        raise CheckSkipped("needs --pki DIR (a test PKI the target trusts) to issue the certificates it must refuse")
    if "badcerts" not in findings.values:
        findings.values["badcerts"] = issue_all(target.pki, findings.workdir / "badcerts")
    identities: dict[str, TlsFiles] = findings.values["badcerts"]
    return identities
