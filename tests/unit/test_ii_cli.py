"""`interchange discover`, `neighbours` and `subscriptions` (ii_api.node.cli): arguments, empty and missing
databases (the runs against a real dnsmasq and a running node: tests/integration/test_ii_cli_live.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ii_api.node.cli import parse_dns_server
from ii_api.peers.discovery import Neighbour
from ii_api.storage.store import Store
from interchange.app.cli import main
from interchange.ground.errors import CliError


def test_neighbours_shows_the_last_seen_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Store.open(tmp_path) as store:
        store.neighbours.upsert([Neighbour("ixn-a.one.test", "10.0.0.1", 443, "one.test")], seen_ms=1_700_000_000_000)
    assert main(["neighbours", "--data-dir", str(tmp_path)]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[1].split() == ["ixn-a.one.test", "10.0.0.1", "443", "one.test", "2023-11-14T22:13:20Z"]


def test_neighbours_of_an_empty_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Store.open(tmp_path).close()
    assert main(["neighbours", "--data-dir", str(tmp_path)]) == 0
    assert "no neighbours recorded" in capsys.readouterr().out


def test_neighbours_without_database_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["neighbours", "--data-dir", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("interchange neighbours: error: no II database in") and "Traceback" not in err
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("argv, message", [
    (["--dns", "dns.example:53", "--domain", "one.test"], "not an IP address"),
    (["--dns", "127.0.0.1:0", "--domain", "one.test"], "port must be"),
    (["--dns", "127.0.0.1:5\u00b3", "--domain", "one.test"], "port must be"),  # was a traceback
    (["--dns", "127.0.0.1", "--domain", "bad..domain"], "domains"),
    (["--dns", "127.0.0.1", "--domain", "one.test", "--timeout", "0"], "timeout_s"),
])
def test_discover_argument_errors(argv: list[str], message: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", *argv, "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("interchange discover: error:") and message in err


def test_parse_dns_server_forms() -> None:
    assert parse_dns_server("127.0.0.1") == ("127.0.0.1", 53)
    assert parse_dns_server("127.0.0.1:5353") == ("127.0.0.1", 5353)
    assert parse_dns_server("[::1]:5353") == ("::1", 5353)
    assert parse_dns_server("::1") == ("::1", 53)
    with pytest.raises(CliError):
        parse_dns_server("[::1")
    with pytest.raises(CliError):
        parse_dns_server("127.0.0.1:x")


# ------------------------------------------------------------------------------------ interchange subscriptions


def test_subscriptions_of_an_empty_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Store.open(tmp_path / "var").close()
    (tmp_path / "node.json").write_text('{"name": "a.interchange.test", "data_dir": "var"}')
    assert main(["subscriptions", "--config", str(tmp_path / "node.json")]) == 0
    assert capsys.readouterr().out.count("(none)") == 4


def test_subscriptions_without_database_is_a_one_line_error(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "node.toml").write_text('name = "a.interchange.test"\ndata_dir = "nowhere"\n')
    assert main(["subscriptions", "--config", str(tmp_path / "node.toml"), "--json"]) == 2
    err = capsys.readouterr().err
    assert err == f"interchange subscriptions: error: no II database in {tmp_path / 'nowhere'} " \
                  "(the node has not run with [ii] there)\n"
    assert not (tmp_path / "nowhere").exists()
    assert main(["subscriptions", "--config", str(tmp_path / "missing.toml")]) == 2
    assert capsys.readouterr().err.startswith("interchange subscriptions: error: cannot read config")
