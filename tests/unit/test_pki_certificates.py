"""The session-level PKI's certificates: extensions, chains, validity cap, key files (chapter 5)."""
from __future__ import annotations

import json
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import Criticality, ExtensionPolicy, PolicyBuilder, Store, VerificationError

from certs import KeySpec, Pki, PkiError, TestPki, create_test_pki
from interchange.testing.pki_fixtures import ACTOR, EXPIRED_ACTOR, SERVER


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def load_all(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def ext(cert: x509.Certificate, kind: type) -> x509.Extension:  # type: ignore[type-arg]
    return cert.extensions.get_extension_for_class(kind)


def cn_of(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def test_root_is_a_self_signed_v3_ca(pki_main: TestPki) -> None:
    root = load(pki_main.trust_bundle)
    assert load_all(pki_main.trust_bundle) == [root]  # trust.pem is the root only (IP_115/116)
    assert root.version == x509.Version.v3 and root.subject == root.issuer
    basic = ext(root, x509.BasicConstraints)
    assert basic.critical and basic.value.ca and basic.value.path_length == 1
    usage = ext(root, x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    ski = ext(root, x509.SubjectKeyIdentifier).value
    assert ext(root, x509.AuthorityKeyIdentifier).value.key_identifier == ski.digest
    root.verify_directly_issued_by(root)


def test_intermediate_is_a_pathlen0_ca_signed_by_the_root(pki_main: TestPki) -> None:
    root, intermediate = load(pki_main.trust_bundle), load(pki_main.intermediate_cert)
    basic = ext(intermediate, x509.BasicConstraints)
    assert basic.critical and basic.value.ca and basic.value.path_length == 0
    usage = ext(intermediate, x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature
    assert (ext(intermediate, x509.AuthorityKeyIdentifier).value.key_identifier
            == ext(root, x509.SubjectKeyIdentifier).value.digest)
    intermediate.verify_directly_issued_by(root)
    with pytest.raises(x509.ExtensionNotFound):
        ext(intermediate, x509.ExtendedKeyUsage)


def test_server_certificate_names_the_srv_target_and_serves_both_roles(pki_main: TestPki) -> None:
    cert = load(pki_main.servers[SERVER].cert)
    assert cn_of(cert) == SERVER  # IP_125
    assert ext(cert, x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName) == [SERVER]
    assert set(ext(cert, x509.ExtendedKeyUsage).value) == {
        ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    }
    basic = ext(cert, x509.BasicConstraints)
    assert basic.critical and not basic.value.ca
    usage = ext(cert, x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature and not usage.value.key_cert_sign
    intermediate = load(pki_main.intermediate_cert)
    assert (ext(cert, x509.AuthorityKeyIdentifier).value.key_identifier
            == ext(intermediate, x509.SubjectKeyIdentifier).value.digest)
    assert ext(cert, x509.SubjectKeyIdentifier).value.digest
    cert.verify_directly_issued_by(intermediate)


def test_client_certificate_is_client_auth_only(pki_main: TestPki) -> None:
    cert = load(pki_main.clients[ACTOR].cert)
    assert cn_of(cert) == ACTOR
    assert list(ext(cert, x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert not ext(cert, x509.BasicConstraints).value.ca
    cert.verify_directly_issued_by(load(pki_main.intermediate_cert))


def test_serials_are_random_positive_and_at_most_159_bits(pki_main: TestPki) -> None:
    serials = [load(path).serial_number for path in (
        pki_main.trust_bundle, pki_main.intermediate_cert,
        *(identity.cert for identity in [*pki_main.servers.values(), *pki_main.clients.values()]),
    )]
    assert all(0 < serial < 2**159 for serial in serials)
    assert len(set(serials)) == len(serials)
    assert max(serial.bit_length() for serial in serials) > 140  # random, not counters


def test_chain_file_is_leaf_then_intermediate(pki_main: TestPki) -> None:
    identity = pki_main.servers[SERVER]
    assert load_all(identity.chain) == [load(identity.cert), load(pki_main.intermediate_cert)]  # IP_057


def _verify_time() -> datetime:
    return datetime.now(timezone.utc) + timedelta(minutes=5)


def _builder(trust: Path, *, for_clients: bool = False) -> PolicyBuilder:
    """The web PKI profile; for clients, actor certificates need not carry a subjectAltName."""
    builder = PolicyBuilder().store(Store([load(trust)])).time(_verify_time())
    if not for_clients:
        return builder
    ee = ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.SubjectAlternativeName, Criticality.AGNOSTIC, None
    )
    return builder.extension_policies(ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=ee)


def test_chains_verify_with_the_server_and_client_verifiers(pki_main: TestPki) -> None:
    builder = _builder(pki_main.trust_bundle)
    server_chain = load_all(pki_main.servers[SERVER].chain)
    verified = builder.build_server_verifier(x509.DNSName(SERVER)).verify(server_chain[0], server_chain[1:])
    assert [cn_of(cert) for cert in verified][0] == SERVER and len(verified) == 3
    for identity in (pki_main.clients[ACTOR], pki_main.servers[SERVER]):  # both act as TLS clients
        chain = load_all(identity.chain)
        client = _builder(pki_main.trust_bundle, for_clients=True).build_client_verifier().verify(chain[0], chain[1:])
        assert len(client.chain) == 3


def test_client_certificate_does_not_verify_as_a_server(pki_main: TestPki) -> None:
    builder = _builder(pki_main.trust_bundle)
    chain = load_all(pki_main.clients[ACTOR].chain)
    with pytest.raises(VerificationError):
        builder.build_server_verifier(x509.DNSName(ACTOR + ".example")).verify(chain[0], chain[1:])


def test_chain_from_another_root_does_not_verify(pki_main: TestPki, tmp_path: Path) -> None:
    other = create_test_pki(tmp_path / "other", [SERVER], [])
    chain = load_all(other.servers[SERVER].chain)
    verifier = _builder(pki_main.trust_bundle)
    with pytest.raises(VerificationError):
        verifier.build_server_verifier(x509.DNSName(SERVER)).verify(chain[0], chain[1:])


def test_leaf_validity_is_capped_at_365_days(pki_fresh: TestPki) -> None:
    pki = pki_fresh.pki
    identity = pki.issue_client("actor-year", days=365)
    assert identity.not_after - identity.not_before == timedelta(days=365)  # IP_051
    with pytest.raises(PkiError, match="at most 365 days"):
        pki.issue_client("actor-long", days=366)
    start = datetime.now(timezone.utc)
    with pytest.raises(PkiError, match="at most 365 days"):
        pki.issue_server("long.interchange.test", not_before=start, not_after=start + timedelta(days=400))
    assert "actor-long" not in {record.cn for record in pki.load_state().issued}


def test_explicit_window_makes_expired_certificates(pki_main: TestPki) -> None:
    cert = load(pki_main.clients.get(EXPIRED_ACTOR, pki_main.pki.identity(EXPIRED_ACTOR)).cert)
    assert cert.not_valid_after_utc < datetime.now(timezone.utc)
    record = next(r for r in pki_main.pki.load_state().issued if r.cn == EXPIRED_ACTOR)
    assert record.status() == "expired"


def test_leaf_cannot_outlive_its_intermediate(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    pki.init_root()
    pki.add_intermediate("short", days=30)
    with pytest.raises(PkiError, match="outlive its issuing CA"):
        pki.issue_client(ACTOR, days=60)
    assert pki.issue_client(ACTOR, days=20).cn == ACTOR


def test_private_keys_are_mode_0600(pki_main: TestPki) -> None:
    keys = sorted(pki_main.directory.rglob("key.pem"))
    assert len(keys) == 2 + len(pki_main.servers) + len(pki_main.clients) + 1  # + the expired actor
    for key in keys:
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    for cert in pki_main.directory.rglob("cert.pem"):
        assert stat.S_IMODE(cert.stat().st_mode) & 0o044  # certificates stay readable


def test_no_temporary_files_are_left_behind(pki_main: TestPki) -> None:
    assert [path for path in pki_main.directory.rglob("*") if path.name.endswith(".tmp")] == []


def test_rsa_keys_on_request(tmp_path: Path) -> None:
    made = create_test_pki(tmp_path / "rsa", [SERVER], [ACTOR], key_spec=KeySpec("rsa", 3072))
    for path in (made.trust_bundle, made.intermediate_cert, made.servers[SERVER].cert, made.clients[ACTOR].cert):
        public = load(path).public_key()
        assert isinstance(public, rsa.RSAPublicKey) and public.key_size == 3072
    assert "rsa-3072" in made.pki.load_state().root.key
    with pytest.raises(PkiError, match="at least 2048"):
        KeySpec("rsa", 1024)


def test_ec_p256_by_default(pki_main: TestPki) -> None:
    public = load(pki_main.servers[SERVER].cert).public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp256r1"


@pytest.mark.parametrize("name", ["localhost", "-bad.example", "a..b", "*.example.org", "ünï.example", "x" * 64 + ".org",
                                  "10.0.0.1"])
def test_server_names_must_be_fqdns(pki_fresh: TestPki, name: str) -> None:
    with pytest.raises(PkiError, match="invalid interchange name"):
        pki_fresh.pki.issue_server(name)


def test_server_name_is_normalised(pki_fresh: TestPki) -> None:
    assert pki_fresh.pki.issue_server("IXC.Example.ORG.").cn == "ixc.example.org"


@pytest.mark.parametrize("name", ["", "../etc", "a/b", "with space", "x" * 65, ".hidden"])
def test_actor_names_are_safe(pki_fresh: TestPki, name: str) -> None:
    with pytest.raises(PkiError, match="invalid actor common name"):
        pki_fresh.pki.issue_client(name)


def test_leaves_come_from_an_intermediate_only(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    pki.init_root()
    with pytest.raises(PkiError, match="no intermediate CA"):
        pki.issue_client(ACTOR)
    pki.add_intermediate("nl")
    pki.add_intermediate("se")
    with pytest.raises(PkiError, match="several intermediate CAs"):
        pki.issue_client(ACTOR)
    with pytest.raises(PkiError, match="IP_117"):
        pki.issue_client(ACTOR, ca="root")
    with pytest.raises(PkiError, match="unknown intermediate CA"):
        pki.issue_client(ACTOR, ca="dk")
    assert pki.issue_client(ACTOR, ca="se").issuer == "se"


def test_reissue_replaces_files_and_keeps_the_record(pki_fresh: TestPki) -> None:
    pki = pki_fresh.pki
    first = pki_fresh.clients[ACTOR]
    old_serial = load(first.cert).serial_number
    second = pki.issue_client(ACTOR)
    assert second.directory == first.directory and load(second.cert).serial_number == second.serial != old_serial
    serials = [record.serial for record in pki.load_state().issued if record.cn == ACTOR]
    assert serials == [old_serial, second.serial]
    pki.issue_client("dual.example.org")
    with pytest.raises(PkiError, match="already has a client certificate"):
        pki.issue_server("dual.example.org")


def test_state_file_is_json_with_hex_serials(pki_main: TestPki) -> None:
    raw = json.loads((pki_main.directory / "state.json").read_text())
    assert raw["format"] == 1 and raw["root"]["serial"].startswith("0x")
    assert {entry["cn"] for entry in raw["issued"]} >= {SERVER, ACTOR}
    assert int(raw["root"]["serial"], 16) == load(pki_main.trust_bundle).serial_number


def test_pki_operations_need_an_initialised_directory(tmp_path: Path) -> None:
    with pytest.raises(PkiError, match="does not exist"):
        Pki(tmp_path / "absent").load_state()
    with pytest.raises(PkiError, match="init-root"):
        Pki(tmp_path).add_intermediate("nl")
    pki = Pki(tmp_path / "pki")
    pki.init_root()
    with pytest.raises(PkiError, match="already holds a PKI"):
        pki.init_root()


def test_create_test_pki_reuses_an_existing_pki_on_request(tmp_path: Path) -> None:
    first = create_test_pki(tmp_path / "pki", [SERVER], [ACTOR])
    with pytest.raises(PkiError, match="already holds a PKI"):
        create_test_pki(tmp_path / "pki", [SERVER], [ACTOR])
    again = create_test_pki(tmp_path / "pki", [SERVER], [ACTOR, "actor-new"], exist_ok=True)
    assert again.servers[SERVER].serial == first.servers[SERVER].serial
    assert again.clients[ACTOR].serial == first.clients[ACTOR].serial
    assert "actor-new" in again.clients and again.crls == first.crls
