"""The interop kit against a foreign interchange and against broken variants of it.

The foreign interchange (``tests/integration/foreign_ixc``) is written from the profile and shares no code
with this project. Its certificate comes from its own PKI, so the kit verifies it with ``--trust``
= that PKI's root, while ``--pki`` is a test PKI of ours that the foreign interchange trusts for
client certificates: prepared with ``interchange interop prepare`` and installed on it (its root
and CRLs) before it starts, as an operator would. That is the setting in which the kit used to
verify the target against ``--pki``'s root and skip every refusal check.

The conforming interchange passes every check. Each mutant fails exactly the checks the table
names (and skips exactly those it names: the BI checks need the endpoints one mutant leaves out).
"""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from cryptography import x509

from certs import create_test_pki
from foreign_ixc import Faults, ForeignConfig, ForeignInterchange, IIFaults, RoutingFaults
from foreign_ixc import pki as foreign_pki
from foreign_ixc import start
from interchange.app.cli import build_parser
from interchange.ground.ports import free_port
from interchange.testing.dns_fixtures import DnsmasqServer, DnsRecords, Srv, find_dnsmasq
from interop_kit import badcerts
from interop_kit.catalogue import all_checks
from interop_kit.cli import target_from_args
from interop_kit.model import Outcome, Report
from interop_kit.runner import run_checks, select

NAME, DOMAIN, KIT, PUBLISHER = "ixc.foreign.test", "foreign.test", "kit.foreign.test", "publisher.foreign.test"
DELIVERY = "foreign-delivery"
FOREIGN_DIR = Path(__file__).resolve().parent / "foreign_ixc"
CAPABILITIES = [{
    "application": {"messageType": "DENM", "publisherId": "SE01234", "publicationId": "SE01234:foreign-denm",
                    "originatingCountry": "SE", "protocolVersion": "DENM:1.3.1", "quadTree": ["1202"],
                    "causeCode": [3, 6]},
    "metadata": {"redirectPolicy": "OPTIONAL"},
}]
TRAFFIC = {"selector": "messageType = 'DENM' AND quadTree LIKE '%,1202%'",
           "matching": {"messageType": "DENM", "publisherId": "SE01234", "publicationId": "SE01234:foreign-denm",
                        "originatingCountry": "SE", "protocolVersion": "DENM:1.3.1", "quadTree": ",120203,",
                        "causeCode": 3},
           "mismatching": {"quadTree": ",031333,"}}


@dataclass(frozen=True)
class Setting:
    """What every run shares: the two PKIs, the DNS server, the ports, the foreign config."""

    directory: Path
    config: ForeignConfig
    kit_pki: Path
    dns_port: int

    def args(self, kit_pki: Path | None = None) -> list[str]:
        """The kit's command line, as an operator writes it for this target."""
        identities = self.config.pki.identities
        traffic = self.directory / "traffic.json"
        return ["interop", "--name", NAME, "--ii-url", f"https://{NAME}:{self.config.ii_port}{self.config.base}",
                "--bi", f"amqps://{NAME}:{self.config.bi_port}", "--trust", str(self.config.pki.root),
                "--cert", str(identities[KIT].chain), "--key", str(identities[KIT].key), "--address", "127.0.0.1",
                "--domain", DOMAIN, "--dns-server", f"127.0.0.1:{self.dns_port}", "--pki", str(kit_pki or self.kit_pki),
                "--delivery-address", DELIVERY, "--delivery-cert", str(identities[PUBLISHER].chain),
                "--delivery-key", str(identities[PUBLISHER].key), "--traffic", str(traffic)]


def installed(kit_pki: Path) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The root and CRLs `interchange interop prepare` lists for installing on the target."""
    prepared = badcerts.load(kit_pki)
    assert prepared is not None
    folder = badcerts.prepared_dir(kit_pki)
    return (folder / prepared.root,), tuple(folder / crl for crl in prepared.crls)


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    directory = tmp_path_factory.mktemp("foreign")
    own = foreign_pki.build(directory / "foreign-pki", NAME, [KIT, PUBLISHER])
    kit_pki = directory / "kit-pki"
    create_test_pki(kit_pki, [], ["kit-pki-holder"])
    prepared = subprocess.run([sys.executable, "-m", "interchange", "interop", "prepare", "--pki", str(kit_pki)],
                              capture_output=True, text=True, timeout=120)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    assert "install on the target before the run" in prepared.stdout and "install/crl/test.pem" in prepared.stdout
    (directory / "traffic.json").write_text(json.dumps(TRAFFIC))
    ii_port, bi_port = free_port(), free_port()
    dns = DnsmasqServer(directory / "dns", find_dnsmasq())
    dns.start(DnsRecords(srv=[Srv(DOMAIN, NAME, ii_port), Srv(DOMAIN, KIT, 1)],
                         hosts={NAME: "127.0.0.1", KIT: "127.0.0.1"}))
    assert dns.port is not None
    roots, crls = installed(kit_pki)
    config = ForeignConfig(NAME, DOMAIN, ("127.0.0.1", dns.port), ii_port, bi_port, own, roots, crls, PUBLISHER,
                           DELIVERY, CAPABILITIES)
    try:
        yield Setting(directory, config, kit_pki, dns.port)
    finally:
        dns.stop()


@pytest.fixture
async def running(setting: Setting) -> AsyncIterator[Callable[..., object]]:
    """Starts the foreign interchange (with faults, with another config); closed after the test."""
    started: list[ForeignInterchange] = []

    async def run(faults: Faults = Faults(), config: ForeignConfig | None = None) -> ForeignInterchange:
        started.append(await start(config or setting.config, faults))
        return started[-1]

    try:
        yield run
    finally:
        for interchange in started:
            await interchange.close()


async def _kit(setting: Setting, workdir: Path, only: tuple[str, ...] = (), kit_pki: Path | None = None) -> Report:
    target = target_from_args(build_parser().parse_args(setting.args(kit_pki)))
    workdir.mkdir(parents=True, exist_ok=True)
    return await run_checks(select(all_checks(), only), target, workdir, timeout_s=30)


def _by_outcome(report: Report, outcome: Outcome) -> set[str]:
    return {r.name for r in report.results if r.outcome is outcome}


def _messages(report: Report) -> dict[str, str]:
    return {r.name: r.message for r in report.results}


async def test_conforming_foreign_interchange_passes_every_check(setting: Setting, running, tmp_path: Path) -> None:
    await running()
    report = await _kit(setting, tmp_path)
    problems = [f"{r.name}: {r.outcome.value}: {r.message}" for r in report.results if r.outcome is not Outcome.PASSED]
    assert problems == []
    assert len(report.results) == len(all_checks()) >= 37
    messages = _messages(report)
    assert "revoked at" in messages["tls.bi.refuse-revoked"] and "refused" in messages["tls.bi.refuse-revoked"]


def _foreign_root(setting: Setting) -> Faults:
    """Trusts the root (and loads the CRL) of the unrelated PKI `prepare` made for the foreign-root check."""
    foreign = badcerts.prepared_dir(setting.kit_pki) / "foreign-pki"
    return Faults(extra_roots=(foreign / "trust.pem",), extra_crls=tuple(sorted(foreign.glob("ca/*/crl.pem"))))


#: mutant -> (its faults, the checks that must fail, the checks that must be skipped)
MUTANTS: dict[str, tuple[Callable[[Setting], Faults], set[str], set[str]]] = {
    "trusts a foreign root": (_foreign_root, {"tls.ii.refuse-foreign-root", "tls.bi.refuse-foreign-root"}, set()),
    "accepts TLS 1.2": (lambda s: Faults(tls12=True), {"tls.ii.tls12-refused", "tls.bi.tls12-refused"}, set()),
    "answers 200 to a CN not in DNS": (lambda s: Faults(ii=IIFaults(any_cn=True)), {"ii.refuse-non-srv-target"}, set()),
    "CREATED without endpoints": (lambda s: Faults(ii=IIFaults(created_without_endpoints=True)),
                                  {"ii.subscription.created"}, {"bi.attach", "bi.selector-honoured", "bi.byte-exact"}),
    "changes bytes": (lambda s: Faults(routing=RoutingFaults(alter_body=True)), {"bi.byte-exact"}, set()),
    "delivers what the selector excludes": (lambda s: Faults(routing=RoutingFaults(ignore_selector=True)),
                                            {"bi.selector-honoured"}, set()),
    "checks no revocation": (lambda s: Faults(no_revocation=True), {"tls.ii.refuse-revoked", "tls.bi.refuse-revoked"},
                             set()),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
async def test_each_broken_variant_fails_its_check(mutant: str, setting: Setting, running, tmp_path: Path) -> None:
    faults, failing, skipped = MUTANTS[mutant]
    await running(faults(setting))
    report = await _kit(setting, tmp_path)
    failures = {r.name: r.message for r in report.results if r.outcome is Outcome.FAILED}
    assert set(failures) == failing, failures
    assert _by_outcome(report, Outcome.SKIPPED) == skipped, _messages(report)


async def test_target_whose_crl_is_older_than_the_revocation_is_told_so(setting: Setting, running,
                                                                         tmp_path: Path) -> None:
    """The target loaded the CRL of the first `prepare`; a renewed set revokes another certificate
    that CRL does not list. The target refuses the earlier revoked certificate and accepts the new
    one: the check is skipped saying its CRL is older than the revocation, not failed."""
    kit_pki = tmp_path / "kit-pki"
    shutil.copytree(setting.kit_pki, kit_pki)
    roots, crls = installed(kit_pki)
    await running(config=replace(setting.config, client_roots=roots, client_crls=crls))
    badcerts.prepare(kit_pki, renew=True)  # not installed on the target
    report = await _kit(setting, tmp_path / "work", ("tls.*.refuse-*",), kit_pki)
    assert _by_outcome(report, Outcome.FAILED) == set()
    assert _by_outcome(report, Outcome.SKIPPED) == {"tls.ii.refuse-revoked", "tls.bi.refuse-revoked"}
    message = _messages(report)["tls.bi.refuse-revoked"]
    assert "the CRL it loaded is older than that revocation" in message
    assert f"install {badcerts.prepared_dir(kit_pki)}/install/crl/test.pem" in message


async def test_target_not_trusting_the_pki_skips_the_refusals_saying_why(setting: Setting, running,
                                                                          tmp_path: Path) -> None:
    """A --pki the target was never given: the control certificate is refused, so no refusal can be
    judged; the checks say so (and what to install) instead of failing or blaming the target."""
    other = tmp_path / "other-pki"
    create_test_pki(other, [], ["kit-pki-holder"])
    badcerts.prepare(other)
    await running()
    report = await _kit(setting, tmp_path / "work", ("tls.*.refuse-*", "ii.refuse-non-srv-target"), other)
    assert _by_outcome(report, Outcome.FAILED) == set()
    assert _by_outcome(report, Outcome.SKIPPED) == {r.name for r in report.results}
    message = _messages(report)["tls.ii.refuse-expired"]
    assert "control certificate 'interop-kit-valid'" in message and "is refused too" in message
    assert f"install {badcerts.prepared_dir(other)}/install/root.pem" in message


async def test_target_not_verified_with_trust_skips_the_refusals_saying_why(setting: Setting, running,
                                                                           tmp_path: Path) -> None:
    """The kit given --pki's root as --trust (the foreign interchange's certificate does not chain to
    it): the handshake checks fail, and the refusal checks say the kit could not verify the target."""
    await running()
    args = setting.args()
    args[args.index("--trust") + 1] = str(badcerts.prepared_dir(setting.kit_pki) / "install" / "root.pem")
    workdir = tmp_path / "work"
    workdir.mkdir()
    report = await run_checks(select(all_checks(), ["tls.ii.tls13", "tls.ii.refuse-*"]),
                              target_from_args(build_parser().parse_args(args)), workdir, timeout_s=30)
    assert _by_outcome(report, Outcome.FAILED) == {"tls.ii.tls13"}
    message = _messages(report)["tls.ii.refuse-wrong-eku"]
    assert message.startswith("the kit could not verify the II's certificate against --trust")


async def test_refusal_checks_without_prepare_say_how_to_prepare(setting: Setting, running, tmp_path: Path) -> None:
    bare = tmp_path / "bare-pki"
    create_test_pki(bare, [], ["kit-pki-holder"])
    await running()
    report = await _kit(setting, tmp_path / "work", ("tls.bi.refuse-*",), bare)
    assert _by_outcome(report, Outcome.SKIPPED) == {r.name for r in report.results}
    assert f"run `interchange interop prepare --pki {bare}`" in _messages(report)["tls.bi.refuse-revoked"]


def test_prepare_keeps_a_valid_set_and_renew_keeps_the_earlier_revocations(tmp_path: Path) -> None:
    directory = tmp_path / "pki"
    create_test_pki(directory, [], ["kit-pki-holder"])
    first, issued = badcerts.prepare(directory, days=30)
    assert issued and len(first.revoked) == 1 and first.valid_until > first.prepared_at
    again, issued = badcerts.prepare(directory)
    assert not issued and again.revoked == first.revoked and again.identities == first.identities
    renewed, issued = badcerts.prepare(directory, renew=True)
    assert issued and renewed.revoked[0] == first.revoked[0] and len(renewed.revoked) == 2
    crl = badcerts.prepared_dir(directory) / renewed.crls[0]
    # the installed CRL lists both revoked certificates
    listed = {entry.serial_number for entry in x509.load_pem_x509_crl(crl.read_bytes())}
    assert {r.serial for r in renewed.revoked} <= listed
    assert "--days 0" in _prepare_cli(directory, "--days", "0").stderr


def _prepare_cli(directory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interchange", "interop", "prepare", "--pki", str(directory), *extra],
                          capture_output=True, text=True, timeout=120)


def test_foreign_interchange_shares_no_code_with_the_project() -> None:
    """Its modules import the standard library, aiohttp, dnspython, proton, cryptography and each other only."""
    allowed = set(sys.stdlib_module_names) | {"aiohttp", "dns", "proton", "cryptography", "foreign_ixc"}
    imported = set()
    for path in FOREIGN_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    assert imported - allowed == set()
    assert {"aiohttp", "proton", "cryptography", "dns"} <= imported
