"""deploy/monitoring/ offline: Prometheus' own checker and rule unit tests (Debian's promtool), with
mutants that show each alert's test can fail, and the Grafana dashboard's structure against
Grafana's dashboard schema (the grafana-foundation-sdk's models, generated from it: a key the schema
does not know is dropped on the round trip) and its queries through promtool's PromQL parser.

The dashboard's queries are evaluated against a live node in tests/integration/test_monitoring_live.py.
"""
from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from interchange.testing.paths import REPO_ROOT

MONITORING = REPO_ROOT / "deploy" / "monitoring"
ALERTS = MONITORING / "rules" / "alerts.yml"
RECORDING = MONITORING / "rules" / "recording.yml"
RULE_TESTS = MONITORING / "tests" / "alerts.test.yml"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "interchange.json"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
#: what the issue asks an alert for, by the alert that covers it
REQUIRED_ALERTS = {
    "InterchangeNodeDown", "InterchangeProcessDown", "InterchangeTlsRefusalsRising", "InterchangeCertificateExpiresSoon",
    "InterchangePeerCertificateExpiresSoon", "InterchangeCrlStale", "InterchangeNeighbourUnreachable",
    "InterchangeSubscriptionNotCreated", "InterchangeSourceNearLimit", "InterchangeMessagesDropped",
    "InterchangeMessagesExpiredUndelivered", "InterchangeRoutingLatencyHigh", "InterchangeDurableStoreFailing",
    "InterchangeDiskSpaceLow", "InterchangeBridgeDisconnected", "InterchangeAuditErrors", "InterchangeErrorsLogged"}


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).exists():
        raise RuntimeError("promtool is not installed: run scripts/setup.sh (it installs Debian's prometheus)")
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def alerts() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules() -> None:
    result = promtool("check", "rules", str(RECORDING), str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_accepts_the_scrape_configuration() -> None:
    result = promtool("check", "config", str(MONITORING / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_says_how_bad_and_what_to_do() -> None:
    names = [rule["alert"] for rule in alerts()]
    assert len(names) == len(set(names))
    assert REQUIRED_ALERTS <= set(names)
    for rule in alerts():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(annotations), rule["alert"]
        assert len(annotations["runbook"]) > 40, rule["alert"]


def test_each_alert_fires_and_resolves_in_the_rule_tests() -> None:
    """promtool runs the series of each case; every alert has a case where it fires and a later one where it is gone."""
    result = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    checks: dict[str, list[tuple[int, bool]]] = {}
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            minutes = int(str(check["eval_time"]).rstrip("m"))
            checks.setdefault(check["alertname"], []).append((minutes, bool(check["exp_alerts"])))
    for name in (rule["alert"] for rule in alerts()):
        seen = sorted(checks.get(name, []))
        fires = [t for t, fired in seen if fired]
        assert fires, f"{name}: no rule test where it fires"
        assert any(not fired and t > min(fires) for t, fired in seen), f"{name}: no rule test where it resolves"


def _run_with(tmp_path: Path, name: str, mutate: Any) -> subprocess.CompletedProcess[str]:
    """The rule tests against alerts.yml with alert ``name``'s expression replaced by ``mutate(expr)``."""
    document = yaml.safe_load(ALERTS.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                rule["expr"] = mutate(rule["expr"])
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "tests").mkdir(exist_ok=True)
    shutil.copy(RECORDING, tmp_path / "rules" / "recording.yml")
    (tmp_path / "rules" / "alerts.yml").write_text(yaml.safe_dump(document))
    cases = yaml.safe_load(RULE_TESTS.read_text())  # only the cases that check this alert: faster
    cases["tests"] = [case for case in cases["tests"]
                      if any(check["alertname"] == name for check in case["alert_rule_test"])]
    (tmp_path / "tests" / RULE_TESTS.name).write_text(yaml.safe_dump(cases))
    return promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path / "tests")


@pytest.mark.parametrize("name", sorted(rule["alert"] for rule in alerts()))
def test_mutants_of_each_alert_fail_its_rule_test(tmp_path: Path, name: str) -> None:
    """An alert that never fires, and one that stays on for an hour after its condition ended,
    each fail the rule tests, naming that alert."""
    for mutant in ("vector(1) < 0", "last_over_time(({expr})[1h:1m])"):
        result = _run_with(tmp_path, name, lambda expr: mutant.format(expr=expr))  # noqa: B023 (called within this turn of the loop)
        failed = [line.strip() for line in (result.stdout + result.stderr).splitlines() if "alertname:" in line]
        assert result.returncode != 0 and failed, (mutant, result.stdout + result.stderr)
        assert all(line.startswith(f"alertname: {name},") for line in failed), (mutant, failed)


# ------------------------------------------------------------------------------------- dashboard
def dashboard_queries(document: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of every panel, the $node variable as 'all nodes'."""
    return [(panel["title"], target["expr"].replace("$node", ".+"))
            for panel in document["panels"] if panel["type"] != "row" for target in panel["targets"]]


def _dropped(original: Any, parsed: Any, path: str = "") -> list[str]:
    if isinstance(original, dict):
        return [found for key, value in original.items()
                for found in ([f"{path}/{key}"] if not isinstance(parsed, dict) or key not in parsed
                              else _dropped(value, parsed[key], f"{path}/{key}"))]
    if isinstance(original, list) and isinstance(parsed, list):
        return [found for i, (a, b) in enumerate(zip(original, parsed)) for found in _dropped(a, b, f"{path}[{i}]")]
    return [] if original == parsed else [f"{path}: {original!r} became {parsed!r}"]


def schema_round_trip(document: dict[str, Any]) -> list[str]:
    """What Grafana's dashboard schema models do not keep of ``document`` (unknown keys, changed values)."""
    plugins.register_default_plugins()  # the panel plugins' options and the Prometheus query model
    parsed = json.loads(json.dumps(Dashboard.from_json(copy.deepcopy(document)).to_json(),
                                   default=lambda o: o.to_json()))
    return _dropped(document, parsed)


def test_the_dashboard_fits_grafanas_schema() -> None:
    document = json.loads(DASHBOARD.read_text())
    assert schema_round_trip(document) == []
    panels = [p for p in document["panels"]]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24 and box["h"] > 0, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "interchange-prometheus"}
            refs = [t["refId"] for t in panel["targets"]]
            assert refs and len(set(refs)) == len(refs), panel["title"]
    provisioned = yaml.safe_load((MONITORING / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert provisioned["datasources"][0]["uid"] == "interchange-prometheus"


def test_the_schema_check_finds_a_misspelt_key() -> None:
    """Mutants: a misspelt panel key and a misspelt dashboard key are reported."""
    document = json.loads(DASHBOARD.read_text())
    broken = copy.deepcopy(document)
    broken["panels"][1]["gridPoz"] = broken["panels"][1].pop("gridPos")
    broken["refreshh"] = "1m"
    found = schema_round_trip(broken)
    assert "/panels[1]/gridPoz" in found and "/refreshh" in found


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """promtool parses each query (as a recording rule); a broken one is named (mutant)."""
    document = json.loads(DASHBOARD.read_text())
    queries = dashboard_queries(document)
    assert len(queries) >= 20

    def check(items: list[tuple[str, str]]) -> subprocess.CompletedProcess[str]:
        rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"panel:query_{i}", "expr": expr}
                                                            for i, (_, expr) in enumerate(items)]}]}
        (tmp_path / "queries.yml").write_text(yaml.safe_dump(rules))
        return promtool("check", "rules", str(tmp_path / "queries.yml"))
    result = check(queries)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = check(queries + [("broken", "sum by (node) (rate(interchange_messages_received_total[1m])")])
    assert broken.returncode != 0 and "panel:query_" in broken.stdout + broken.stderr
