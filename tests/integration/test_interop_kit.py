"""The interop kit against our own node, and against nodes misconfigured on purpose.

Our node passes every check. Each misconfiguration makes exactly the checks that prove the broken
requirement fail: TLS 1.2 allowed (IP_054), no client certificate required (IP_050), a certificate
whose CN is not the SRV target (IP_125), an invalid selector accepted (Table 14 NOT_VALID). The
misconfigurations live here, not in the node: the TLS ones wrap certs.tls.server_context (every
listener of the node builds its context there), the certificate one is plain config, the selector
one wraps the II's decision function.
"""
from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

import certs.tls
import ii_api.resources.incoming
from certs import create_test_pki
from ii_api.decisions.subscriptions import IncomingDecision
from ii_api.wire.models import SubscriptionStatus
from interchange.app.selfnode import SelfFederation, start_self
from interop_kit.catalogue import all_checks
from interop_kit.demo_data import INTERCHANGE
from interop_kit.model import Outcome, Report
from interop_kit.report import junit_xml
from interop_kit.runner import SelectionError, run_checks, select

WRONG_NAME = "wrong.interchange.test"


async def _run(federation: SelfFederation, workdir: Path, only: Sequence[str] = ()) -> Report:
    assert federation.target is not None
    workdir.mkdir(parents=True, exist_ok=True)
    return await run_checks(select(all_checks(), only), federation.target, workdir, timeout_s=30)


def _failed(report: Report) -> set[str]:
    return {r.name for r in report.results if r.outcome is Outcome.FAILED}


async def _misconfigured(tmp_path: Path, only: Sequence[str], **options: Any) -> Report:
    federation = await start_self(tmp_path / "self", **options)
    try:
        return await _run(federation, tmp_path / "work", only)
    finally:
        await federation.close()


async def test_own_node_passes_every_check(interop_self: SelfFederation, tmp_path: Path) -> None:
    report = await _run(interop_self, tmp_path / "work")
    problems = [f"{r.name}: {r.outcome.value}: {r.message}" for r in report.results if r.outcome is not Outcome.PASSED]
    assert problems == []
    assert len(report.results) == len(all_checks()) >= 37
    suites = ET.fromstring(junit_xml(report))
    assert suites.get("tests") == str(len(report.results)) and suites.get("failures") == "0"
    assert {s.get("name") for s in suites} == {"interop.tls", "interop.dns", "interop.ii", "interop.bi"}
    assert Report.model_validate_json(report.model_dump_json()) == report


@pytest.fixture
def tls12_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    original = certs.tls.server_context

    def lenient(files: certs.tls.TlsFiles) -> ssl.SSLContext:
        context = original(files)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    monkeypatch.setattr(certs.tls, "server_context", lenient)


@pytest.fixture
def client_certificate_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    original = certs.tls.server_context

    def optional(files: certs.tls.TlsFiles) -> ssl.SSLContext:
        context = original(files)
        context.verify_mode = ssl.CERT_OPTIONAL
        return context

    monkeypatch.setattr(certs.tls, "server_context", optional)


HANDSHAKE_CHECKS = ("tls.*.tls13", "tls.*.tls12-refused", "tls.*.client-cert-required", "tls.*.chain-sent")


@pytest.mark.usefixtures("tls12_allowed")
async def test_tls12_allowed_fails_the_tls12_checks(tmp_path: Path) -> None:
    report = await _misconfigured(tmp_path, HANDSHAKE_CHECKS, delivery=False)
    assert _failed(report) == {"tls.ii.tls12-refused", "tls.bi.tls12-refused"}
    message = next(r.message for r in report.results if r.name == "tls.bi.tls12-refused")
    assert "TLSv1.2" in message


@pytest.mark.usefixtures("client_certificate_optional")
async def test_client_certificate_not_required_fails_its_checks(tmp_path: Path) -> None:
    report = await _misconfigured(tmp_path, HANDSHAKE_CHECKS, delivery=False)
    # The II serves the certificate-less client (its HTTP answer, whatever the status, came over TLS);
    # the broker, past the handshake, drops any connection without a peer identity before AMQP starts,
    # so its refusal still holds and its check rightly passes.
    assert _failed(report) == {"tls.ii.client-cert-required"}
    outcomes = {r.name: r for r in report.results}
    assert "answer b'HTTP/1.1 " in outcomes["tls.ii.client-cert-required"].message
    assert outcomes["tls.bi.client-cert-required"].outcome is Outcome.PASSED


def _wrong_certificate(configs: dict[str, dict[str, Any]], pki_dir: Path) -> None:
    """Node A keeps its name and SRV record but serves a certificate for another name."""
    wrong = create_test_pki(pki_dir, [WRONG_NAME], [], exist_ok=True).identity(WRONG_NAME)
    configs[INTERCHANGE]["tls"].update(cert_chain=str(wrong.chain), key=str(wrong.key))


async def test_wrong_cn_fails_the_name_checks(tmp_path: Path) -> None:
    report = await _misconfigured(tmp_path, ("tls.*.tls13", "tls.*.cn-is-srv-target", "tls.*.chain-sent", "dns.*"),
                                  tweak=_wrong_certificate, delivery=False)
    assert _failed(report) == {"tls.ii.tls13", "tls.bi.tls13", "tls.ii.cn-is-srv-target", "tls.bi.cn-is-srv-target",
                               "dns.cert-matches-srv"}
    outcomes = {r.name: r for r in report.results}
    assert WRONG_NAME in outcomes["tls.ii.cn-is-srv-target"].message
    assert outcomes["dns.srv"].outcome is Outcome.PASSED and outcomes["dns.a"].outcome is Outcome.PASSED


@pytest.fixture
def invalid_selectors_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The II answers an unparsable selector as if it were valid and matched nothing."""
    original = ii_api.resources.incoming.decide_incoming_steps  # (a generator: the decision is made in slices)

    def lenient(*args: Any, **kwargs: Any) -> Generator[None, None, IncomingDecision]:
        decision = yield from original(*args, **kwargs)
        if decision.status is SubscriptionStatus.NOT_VALID:
            return IncomingDecision(SubscriptionStatus.NO_OVERLAP, decision.consumer, "no capability matches")
        return decision

    monkeypatch.setattr(ii_api.resources.incoming, "decide_incoming_steps", lenient)


@pytest.mark.usefixtures("invalid_selectors_accepted")
async def test_invalid_selector_accepted_fails_not_valid(tmp_path: Path) -> None:
    report = await _misconfigured(tmp_path, ("ii.*",))
    assert _failed(report) == {"ii.subscription.not-valid"}
    message = next(r.message for r in report.results if r.name == "ii.subscription.not-valid")
    assert "NO_OVERLAP" in message and "expected NOT_VALID" in message


def test_selection_by_name_and_pattern() -> None:
    checks = all_checks()
    assert [c.name for c in select(checks, ["dns.*"], ["dns.a"])] == ["dns.srv", "dns.cert-matches-srv"]
    with pytest.raises(SelectionError, match="names no check"):
        select(checks, ["tls.ii.tls1.2"])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interchange", "interop", *args], capture_output=True, text=True,
                          timeout=240)


async def test_cli_against_a_named_target_writes_reports_and_exits_1_on_failure(
        interop_self: SelfFederation, tmp_path: Path) -> None:
    """The operator's form (explicit URL, endpoint, credentials) with a wrong --name: the name checks fail."""
    target = interop_self.target
    assert target is not None
    junit, report_json = tmp_path / "out" / "interop.xml", tmp_path / "out" / "interop.json"
    common = ["--ii-url", target.ii_url, "--bi", f"amqps://{target.bi_host}:{target.bi_port}",
              "--trust", str(target.identity.trust_bundle), "--cert", str(target.identity.cert_chain),
              "--key", str(target.identity.key), "--address", "127.0.0.1",
              "--domain", str(target.domain), "--dns-server", f"127.0.0.1:{target.dns_port}",
              "--junit", str(junit), "--json", str(report_json)]
    only = ["--only", "tls.*.cn-is-srv-target,dns.*,ii.capabilities"]
    assert target.delivery is not None and target.traffic is not None
    traffic = tmp_path / "traffic.json"
    traffic.write_text(json.dumps({"selector": target.traffic.selector, "matching": target.traffic.matching,
                                   "mismatching": target.traffic.mismatching}))
    bi = ["--only", "ii.subscription.created,bi.*,ii.subscription.delete", "--traffic", str(traffic),
          "--delivery-address", target.delivery.address, "--delivery-cert", str(target.delivery.identity.cert_chain),
          "--delivery-key", str(target.delivery.identity.key)]
    good = await asyncio.to_thread(_cli, "--name", target.name, *common, *only, *bi)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "result: OK" in good.stdout and "11 passed, 0 failed, 0 skipped" in good.stdout
    bad = await asyncio.to_thread(_cli, "--name", WRONG_NAME, *common, *only)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL  tls.ii.cn-is-srv-target" in bad.stdout and "result: FAILED" in bad.stdout
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    assert cases["tls.bi.cn-is-srv-target [IP_125]"].find("failure") is not None
    assert cases["ii.capabilities [IP_094]"].find("failure") is not None  # the name in the answer is not WRONG_NAME
    data = json.loads(report_json.read_text())
    assert data["target"] == WRONG_NAME and [r["outcome"] for r in data["results"]] == ["failed"] * 6
    assert "do not include wrong.interchange.test" in data["results"][2]["message"]  # dns.srv


def test_cli_usage_errors_exit_2(tmp_path: Path) -> None:
    missing = _cli("--name", "x.example")
    assert missing.returncode == 2 and "give --ii-url, --bi, --trust, --cert, --key (or --self)" in missing.stderr
    typo = _cli("--self", "--only", "tls.nope")
    assert typo.returncode == 2 and "'tls.nope' names no check" in typo.stderr
    traffic = tmp_path / "traffic.json"
    traffic.write_text(json.dumps({"selector": "messageType = 'DENM'", "matching": {"messageType": "DENM"}}))
    no_mismatch = _cli("--name", "x.example", "--ii-url", "https://x.example", "--bi", "amqps://x.example",
                       "--trust", str(traffic), "--cert", str(traffic), "--key", str(traffic), "--traffic", str(traffic))
    assert no_mismatch.returncode == 2 and "--traffic" in no_mismatch.stderr and "mismatching" in no_mismatch.stderr
    listed = _cli("--list", "--only", "bi.*")
    assert listed.returncode == 0 and listed.stdout.count("[IP_") == 3


def test_prepare_help_says_what_it_writes_where_it_goes_and_how_the_run_finds_it(tmp_path: Path) -> None:
    helped = _cli("prepare", "--help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert "What it writes, in DIR/interop-kit/" in text and "install/crl/<ca>.pem" in text
    assert "Where the operator installs it: on the target, before the run" in text
    assert "How the run finds it: `interchange interop ... --pki DIR` reads DIR/interop-kit/manifest.json" in text
    missing = _cli("prepare", "--pki", str(tmp_path / "none"))
    assert missing.returncode == 2 and "no PKI there" in missing.stderr
