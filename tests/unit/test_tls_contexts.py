"""certs.tls settings, CRL handling and reloading, and peer identities, without sockets (the real
handshakes: tests/integration/test_tls_contexts_live.py)."""
from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from certs import PeerIdentityError, TestPki
from certs.tls import ReloadingTls, TlsFiles, client_context, peer_common_name, server_context
from interchange.testing.pki_fixtures import ACTOR, SERVER, files_for

pytestmark = pytest.mark.timeout(60)


def test_contexts_are_tls13_only_with_mutual_authentication(pki_main: TestPki) -> None:
    for context in (server_context(files_for(pki_main, SERVER)), client_context(files_for(pki_main, ACTOR))):
        assert context.minimum_version == ssl.TLSVersion.TLSv1_3
        assert context.maximum_version == ssl.TLSVersion.TLSv1_3
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert context.verify_flags & ssl.VERIFY_CRL_CHECK_LEAF
        assert context.verify_flags & ssl.VERIFY_X509_STRICT
    assert client_context(files_for(pki_main, ACTOR)).check_hostname
    assert not client_context(files_for(pki_main, ACTOR), check_hostname=False).check_hostname
    assert server_context(files_for(pki_main, SERVER)).num_tickets == 0


def test_no_crl_checking_without_crls(pki_main: TestPki) -> None:
    context = server_context(files_for(pki_main, SERVER, crls=False))
    assert not context.verify_flags & ssl.VERIFY_CRL_CHECK_LEAF


def test_trust_store_holds_the_root_only(pki_main: TestPki) -> None:
    store = server_context(files_for(pki_main, SERVER, crls=False)).get_ca_certs()
    assert [dict(rdn[0] for rdn in cert["subject"])["commonName"] for cert in store] == [
        "C-Roads Session Test Root CA"
    ]


def test_tls_files_from_identity_dir(pki_main: TestPki) -> None:
    identity = pki_main.servers[SERVER]
    files = TlsFiles.from_identity_dir(identity.directory)
    assert files.cert_chain == identity.chain and files.key == identity.key
    assert files.trust_bundle == identity.trust and files.crls == ()
    assert files.trust_bundle.read_bytes() == pki_main.trust_bundle.read_bytes()
    assert files_for(pki_main, SERVER).crls == pki_main.crls


def test_missing_file_is_reported_by_name(tmp_path: Path, pki_main: TestPki) -> None:
    files = files_for(pki_main, SERVER).with_crls([tmp_path / "absent-crl.pem"])
    with pytest.raises(FileNotFoundError, match="absent-crl.pem"):
        server_context(files)


async def test_broken_new_crl_keeps_the_previous_context(pki_fresh: TestPki) -> None:
    reloading = ReloadingTls(files_for(pki_fresh, SERVER), "server")
    first = reloading.current()
    crl = pki_fresh.pki.crl_path("test")
    crl.write_text("-----BEGIN X509 CRL-----\nbroken\n-----END X509 CRL-----\n")
    assert reloading.current() is first
    with pytest.raises(ssl.SSLError):
        reloading.reload()
    pki_fresh.pki.write_crl("test")
    assert reloading.current() is not first


def test_client_reloading_has_no_listener(pki_main: TestPki) -> None:
    with pytest.raises(ValueError, match="server"):
        ReloadingTls(files_for(pki_main, ACTOR), "client").listener_context()


def test_peer_common_name_from_der_dict_and_certificate(pki_main: TestPki) -> None:
    cert = x509.load_pem_x509_certificate(pki_main.clients[ACTOR].cert.read_bytes())
    der = cert.public_bytes(Encoding.DER)
    assert peer_common_name(der) == ACTOR
    assert peer_common_name(cert) == ACTOR
    assert peer_common_name({"subject": ((("countryName", "NL"),), (("commonName", ACTOR),))}) == ACTOR
    for nothing in (None, b"", {}):
        with pytest.raises(PeerIdentityError):
            peer_common_name(nothing)
    with pytest.raises(PeerIdentityError, match="exactly one"):
        peer_common_name({"subject": ((("commonName", "a"),), (("commonName", "b"),))})

