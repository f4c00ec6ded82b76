"""`interchange discover` and `interchange neighbours` (ii_api.cli) against a real dnsmasq."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dns_fixtures import DnsmasqServer, DnsRecords, Srv, dnsmasq  # noqa: F401  (fixture)
from ii_api.cli import parse_dns_server
from ii_api.discovery import Neighbour
from ii_api.store import Store
from interchange.cli import main
from interchange.errors import CliError

RECORDS = DnsRecords(
    srv=[Srv("one.test", "ixn-a.one.test", 8443, priority=5, weight=7), Srv("one.test", "me.one.test", 443),
         Srv("two.test", "ixn-b.two.test", 443)],
    hosts={"ixn-a.one.test": "127.0.0.1", "me.one.test": "127.0.0.2", "ixn-b.two.test": "127.0.0.3"},
    zones=["empty.test"],
)
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def test_discover_stores_and_prints_then_neighbours_lists(dnsmasq: DnsmasqServer, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    dnsmasq.start(RECORDS)
    data = tmp_path / "var"
    status = main(["discover", "--dns", f"127.0.0.1:{dnsmasq.port}", "--domain", "one.test", "--domain", "two.test",
                   "--name", "me.one.test", "--data-dir", str(data)])
    out, err = capsys.readouterr()
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "HOST", "PORT", "DOMAIN", "PRIORITY", "WEIGHT"]
    assert [line.split() for line in lines[1:]] == [["ixn-a.one.test", "127.0.0.1", "8443", "one.test", "5", "7"],
                                                   ["ixn-b.two.test", "127.0.0.3", "443", "two.test", "10", "10"]]
    assert err == ""

    assert main(["neighbours", "--data-dir", str(data)]) == 0
    out, _ = capsys.readouterr()
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["NAME", "HOST", "PORT", "DOMAIN", "LAST", "SEEN"]
    assert [r[:4] for r in rows[1:]] == [["ixn-a.one.test", "127.0.0.1", "8443", "one.test"],
                                        ["ixn-b.two.test", "127.0.0.3", "443", "two.test"]]
    assert all(re.fullmatch(ISO, r[4]) for r in rows[1:])


def test_discover_reports_failing_domains_and_keeps_the_rest(dnsmasq: DnsmasqServer, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    dnsmasq.start(RECORDS)
    status = main(["discover", "--dns", f"127.0.0.1:{dnsmasq.port}", "--domain", "empty.test",
                   "--domain", "two.test", "--data-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert status == 1
    assert "ixn-b.two.test" in out
    assert err.strip() == "interchange discover: empty.test: SRV _ixc._tcp.empty.test: NXDOMAIN"
    with Store.open(tmp_path, create=False) as store:
        assert [n.name for n in store.list_neighbours()] == ["ixn-b.two.test"]


def test_neighbours_shows_the_last_seen_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Store.open(tmp_path) as store:
        store.upsert_neighbours([Neighbour("ixn-a.one.test", "10.0.0.1", 443, "one.test")], seen_ms=1_700_000_000_000)
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
