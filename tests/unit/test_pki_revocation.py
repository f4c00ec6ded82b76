"""Revocation and CRLs of the session-level PKI (appendix E: publication of revoked certificates)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509

from certs import Pki, PkiError, TestPki
from certs.listing import format_listing
from interchange.testing.pki_fixtures import ACTOR, EXPIRED_ACTOR, REVOKED_ACTOR, SERVER


def load_crl(path: Path) -> x509.CertificateRevocationList:
    return x509.load_pem_x509_crl(path.read_bytes())


def load_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def crl_number(crl: x509.CertificateRevocationList) -> int:
    return crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number


def test_every_ca_starts_with_an_empty_signed_crl(pki_fresh: TestPki) -> None:
    intermediate = load_cert(pki_fresh.intermediate_cert)
    assert pki_fresh.crls == (pki_fresh.pki.crl_path("test"),)
    crl = load_crl(pki_fresh.crls[0])
    assert len(crl) == 0 and crl.issuer == intermediate.subject
    assert crl.is_signature_valid(intermediate.public_key())
    assert crl.next_update_utc is not None and crl.next_update_utc > datetime.now(timezone.utc)
    root_crl = load_crl(pki_fresh.pki.crl_path("root"))
    assert root_crl.is_signature_valid(load_cert(pki_fresh.trust_bundle).public_key())


def test_revoke_puts_the_serial_on_the_intermediates_crl(pki_fresh: TestPki) -> None:
    pki, identity = pki_fresh.pki, pki_fresh.clients[ACTOR]
    before = crl_number(load_crl(pki.crl_path("test")))
    result = pki.revoke(identity.serial, reason="key_compromise")
    assert (result.cn, result.ca, result.crl) == (ACTOR, "test", pki.crl_path("test"))
    crl = load_crl(result.crl)
    intermediate = load_cert(pki_fresh.intermediate_cert)
    assert crl.is_signature_valid(intermediate.public_key())
    assert not crl.is_signature_valid(load_cert(pki_fresh.trust_bundle).public_key())
    entry = crl.get_revoked_certificate_by_serial_number(identity.serial)
    assert entry is not None
    assert entry.extensions.get_extension_for_class(x509.CRLReason).value.reason == x509.ReasonFlags.key_compromise
    assert crl.get_revoked_certificate_by_serial_number(pki_fresh.servers[SERVER].serial) is None
    assert crl_number(crl) > before
    aki = crl.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == intermediate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest


def test_revocations_persist_across_instances_and_crl_rewrites(pki_fresh: TestPki) -> None:
    serial = pki_fresh.clients[ACTOR].serial
    Pki(pki_fresh.directory).revoke(serial)
    paths = Pki(pki_fresh.directory).write_crl(days=2)
    assert paths == [pki_fresh.pki.crl_path("root"), pki_fresh.pki.crl_path("test")]
    crl = load_crl(pki_fresh.pki.crl_path("test"))
    assert crl.get_revoked_certificate_by_serial_number(serial) is not None
    assert crl.next_update_utc is not None
    assert crl.next_update_utc - crl.last_update_utc == timedelta(days=2)
    state = Pki(pki_fresh.directory).load_state()
    assert next(r for r in state.issued if r.serial == serial).status() == "revoked"


def test_revoking_an_intermediate_goes_on_the_root_crl(pki_fresh: TestPki) -> None:
    pki = pki_fresh.pki
    nl = pki.add_intermediate("nl")
    assert pki.revoke(nl.serial).ca == "root"
    assert load_crl(pki.crl_path("root")).get_revoked_certificate_by_serial_number(nl.serial) is not None
    with pytest.raises(PkiError, match="is revoked"):
        pki.issue_client("actor-nl", ca="nl")


def test_revoke_refusals(pki_fresh: TestPki) -> None:
    pki = pki_fresh.pki
    with pytest.raises(PkiError, match="no certificate with serial 0x1 "):
        pki.revoke(1)
    with pytest.raises(PkiError, match="root certificate cannot be revoked"):
        pki.revoke(pki.load_state().root.serial)
    pki.revoke(pki_fresh.clients[ACTOR].serial)
    with pytest.raises(PkiError, match="already revoked"):
        pki.revoke(pki_fresh.clients[ACTOR].serial)
    with pytest.raises(PkiError, match="unknown CA 'dk'"):
        pki.write_crl("dk")


def test_listing_shows_each_status(pki_main: TestPki) -> None:
    text = format_listing(pki_main.pki.load_state(), pki_main.directory)
    lines = text.splitlines()

    def status_of(cn: str) -> str:
        index = next(i for i, line in enumerate(lines) if line.split()[-1:] == [cn])
        return lines[index + 2]

    assert "[valid]" in status_of(SERVER)
    assert "[expired]" in status_of(EXPIRED_ACTOR)
    assert "[revoked" in status_of(REVOKED_ACTOR) and "key_compromise" in status_of(REVOKED_ACTOR)
    assert f"{pki_main.clients[ACTOR].serial:#x}" in text
    assert "CA test" in text and "C-Roads Session Test Root CA" in text
