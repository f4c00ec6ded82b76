"""``interchange pki ...`` end to end through interchange.app.cli.main (real files, real keys)."""
from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509

from certs import Pki
from interchange.app.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def test_full_lifecycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pki = str(tmp_path / "pki")
    code, out, _ = run(capsys, "pki", "--dir", pki, "init-root", "--cn", "Test Root")
    assert code == 0 and "created root CA CN=Test Root" in out and "trust.pem" in out
    code, out, _ = run(capsys, "pki", "add-intermediate", "--dir", pki, "--name", "nl")
    assert code == 0 and "intermediate CA 'nl'" in out
    code, out, _ = run(capsys, "pki", "--dir", pki, "issue-server", "--cn", "ixc.example.nl")
    assert code == 0 and "CN=ixc.example.nl" in out and "chain" in out
    code, out, _ = run(capsys, "pki", "--dir", pki, "issue-client", "--cn", "actor-1", "--days", "30")
    assert code == 0 and "CN=actor-1" in out

    server_cert = tmp_path / "pki" / "issued" / "ixc.example.nl" / "cert.pem"
    client_cert = tmp_path / "pki" / "issued" / "actor-1" / "cert.pem"
    assert stat.S_IMODE((server_cert.parent / "key.pem").stat().st_mode) == 0o600
    leaf = x509.load_pem_x509_certificate(client_cert.read_bytes())
    assert (leaf.not_valid_after_utc - leaf.not_valid_before_utc).days == 30

    code, out, _ = run(capsys, "pki", "--dir", pki, "show")
    assert code == 0
    assert "ixc.example.nl" in out and "actor-1" in out and "CA nl" in out and out.count("[valid]") == 4

    server_serial, client_serial = serial_of(server_cert), serial_of(client_cert)
    code, out, _ = run(capsys, "pki", "--dir", pki, "revoke", hex(client_serial), "--reason", "key_compromise")
    assert code == 0 and "CN=actor-1" in out and "ca/nl/crl.pem" in out
    code, out, _ = run(capsys, "pki", "--dir", pki, "revoke", str(server_serial))
    assert code == 0 and "CN=ixc.example.nl" in out

    code, out, _ = run(capsys, "pki", "--dir", pki, "crl", "--ca", "nl")
    assert code == 0 and out.strip().endswith("ca/nl/crl.pem")
    crl = x509.load_pem_x509_crl((tmp_path / "pki" / "ca" / "nl" / "crl.pem").read_bytes())
    assert {entry.serial_number for entry in crl} == {server_serial, client_serial}
    assert crl.next_update_utc is not None

    code, out, _ = run(capsys, "pki", "--dir", pki, "show")
    assert out.count("[revoked") == 2 and "key_compromise" in out


def test_rsa_keys_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pki = str(tmp_path / "pki")
    assert run(capsys, "pki", "--dir", pki, "init-root", "--key-type", "rsa", "--rsa-bits", "3072")[0] == 0
    assert run(capsys, "pki", "--dir", pki, "add-intermediate", "--name", "se", "--key-type", "rsa")[0] == 0
    assert run(capsys, "pki", "--dir", pki, "issue-client", "--cn", "actor-rsa", "--key-type", "rsa")[0] == 0
    state = Pki(pki).load_state()
    assert [state.root.key, state.intermediates["se"].key, state.issued[0].key] == ["rsa-3072", "rsa-2048", "rsa-2048"]


def test_demo_creates_and_then_reuses_a_test_pki(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pki = str(tmp_path / "demo")
    code, out, _ = run(capsys, "pki", "demo", "--dir", pki)
    assert code == 0
    for expected in ("trust.pem", "a.interchange.test", "b.interchange.test", "actor-1", "actor-2", "crl.pem"):
        assert expected in out
    first = Pki(pki).identity("actor-1").serial
    code, out, _ = run(capsys, "pki", "demo", "--dir", pki, "--actor", "actor-1", "--actor", "actor-3")
    assert code == 0 and "actor-3" in out
    assert Pki(pki).identity("actor-1").serial == first


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show"], "does not exist"),
        (["issue-client", "--cn", "actor-1"], "does not exist"),
        (["revoke", "0x10"], "does not exist"),
    ],
)
def test_missing_pki_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run(capsys, "pki", "--dir", str(tmp_path / "nowhere"), *argv)
    assert code == 2 and out == ""
    assert err.startswith("interchange pki: error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "nowhere").exists()  # a mistyped --dir is not created


@pytest.fixture
def ready(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    pki = str(tmp_path / "pki")
    assert run(capsys, "pki", "--dir", pki, "init-root")[0] == 0
    assert run(capsys, "pki", "--dir", pki, "add-intermediate", "--name", "nl")[0] == 0
    return pki


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["init-root"], "already holds a PKI"),
        (["revoke", "0x1234"], "no certificate with serial 0x1234"),
        (["revoke", "12ab"], "invalid serial number '12ab'"),
        (["issue-server", "--cn", "localhost"], "invalid interchange name 'localhost'"),
        (["issue-server", "--cn", "bad_name.example.org"], "invalid interchange name"),
        (["issue-client", "--cn", "../escape"], "invalid actor common name"),
        (["issue-client", "--cn", "actor-1", "--days", "366"], "at most 365 days (IP_051)"),
        (["issue-server", "--cn", "ixc.example.nl", "--days", "1000"], "at most 365 days"),
        (["issue-client", "--cn", "actor-1", "--days", "0"], "at least 1"),
        (["issue-client", "--cn", "actor-1", "--key-type", "rsa", "--rsa-bits", "1024"], "at least 2048"),
        (["issue-client", "--cn", "actor-1", "--key-type", "rsa", "--rsa-bits", "16384"], "at most 8192"),
        (["issue-client", "--cn", "actor-1", "--ca", "dk"], "unknown intermediate CA 'dk'"),
        (["issue-client", "--cn", "actor-1", "--ca", "root"], "IP_117"),
        (["add-intermediate", "--name", "nl"], "already exists"),
        (["add-intermediate", "--name", "root"], "invalid CA name"),
        (["add-intermediate", "--name", "se", "--days", "99999"], "outlive its issuing CA"),
        (["crl", "--ca", "dk"], "unknown CA 'dk'"),
    ],
)
def test_user_errors_are_one_line_with_exit_status_2(
    ready: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, "pki", "--dir", ready, *argv)
    assert code == 2, (out, err)
    assert err.startswith("interchange pki: error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_revoking_twice_is_refused(ready: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "pki", "--dir", ready, "issue-client", "--cn", "actor-1")[0] == 0
    serial = serial_of(Path(ready) / "issued" / "actor-1" / "cert.pem")
    assert run(capsys, "pki", "--dir", ready, "revoke", str(serial))[0] == 0
    code, _, err = run(capsys, "pki", "--dir", ready, "revoke", f"{serial:#x}")
    assert code == 2 and "already revoked" in err


def test_default_directory_is_pki_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "pki", "init-root")[0] == 0
    assert (tmp_path / "pki" / "trust.pem").is_file()
