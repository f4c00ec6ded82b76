"""`audit report`: the exact aggregates of a generated log, and the page in a real headless chromium
(no console error, no request but the page itself, every chart drawn and visible)."""
from __future__ import annotations

import asyncio
import csv
import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from interchange.testing import browser_harness
from spark import loggen, tables
from spark.cli import main
from spark.ingest import ingest
from spark.report import build
from spark.report_model import Count, Latency, Offender, ReportData, RuleCount, Subscription, bucket_for
from spark.report_render import history_rules, render

T0 = 1_795_000_000_000
TYPES = ("DENM", "CAM", "SPATEM", "MAPEM")
RUN_REQUIREMENT = "A broker shall be able to route a single message ... in <30ms"


def _message(i: int) -> loggen.Message:
    federated = i % 7 == 0
    return loggen.Message("ixc-a", i + 1, T0 + i * 3000, loggen.properties(TYPES[i % 4], f"NL0000{i % 3}", str(i % 5)),
                          publisher=f"actor-{i % 3}", origin="federated" if federated else "local",
                          neighbour="ixc-b" if federated else None)


def _records() -> list[dict[str, object]]:
    """200 messages: 20 dropped, 20 expired, 160 delivered (19 of them later than 30 ms), 8 rejections, II events."""
    records = []
    for i in range(200):
        message = _message(i)
        records.append(loggen.received(message))
        if i % 10 == 3:
            records.append(loggen.lost("dropped_message", message, message.arrival_ms + 5))
        elif i % 10 == 5:
            records.append(loggen.lost("expired_message", message, message.arrival_ms + 60_000))
        else:
            records.append(loggen.sent(message, message.arrival_ms + (45 if i % 9 == 0 else i % 20)))
        if i % 25 == 0:
            records.append(loggen.rejected("ixc-a", 1000 + i, message.arrival_ms, "quadTree: malformed (IP_037)"))
    records += [
        loggen.event_record("ii_neighbours_changed", "ixc-a", T0, neighbours=["ixc-b"], gone=[], new_or_moved=["ixc-b"]),
        loggen.event_record("ii_neighbours_changed", "ixc-a", T0 + 300_000, neighbours=["ixc-b", "ixc-c"], gone=[],
                            new_or_moved=["ixc-c"]),
        loggen.event_record("ii_subscription_received", "ixc-a", T0 + 2000, neighbour="ixc-c", id="s-1",
                            selector="messageType = 'CAM'", consumer="ixc-c", status="CREATED", error=None),
    ]
    for at, status in ((T0 + 1000, "REQUESTED"), (T0 + 5000, "CREATED"), (T0 + 400_000, "ERROR")):
        records.append(loggen.event_record("ii_subscription_status", "ixc-a", at, neighbour="ixc-b",
                                           selector="messageType = 'DENM'", phase="polling", status=status,
                                           error="HTTP 503" if status == "ERROR" else None))
    return records


def _violation(run: str, run_ms: int, rule: str, check: str, publisher: str | None, severity: str = "error",
               at: int = T0 + 1000, message: str | None = None) -> tuple[object, ...]:
    values = {"runId": run, "runMs": run_ms, "rule": rule, "check": check, "requirement": RUN_REQUIREMENT,
              "severity": severity, "node": "ixc-a", "publisher": publisher, "timestampMs": at, "messageId": message,
              "observed": f"observed {message}", "expected": "expected"}
    return tuple(values.get(f.name) for f in tables.VIOLATIONS.fields)


@pytest.fixture(scope="module")
def audited(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the log, an ingest output of it with two validate runs' violations)."""
    root = tmp_path_factory.mktemp("report")
    log = root / "node-20261118T000000000000-0001.jsonl"
    log.write_text(loggen.lines(_records()) + '{"truncated\n')
    out = root / "tables"
    ingest(spark, [str(log)], str(out))
    rows = [_violation("old", 1, "IP_022", "originatingCountry", "actor-2")] * 5 + [
        _violation("new", 2, "IP_012", "latency", "actor-0", message="m1"),
        _violation("new", 2, "IP_012", "latency", "actor-0", message="m2", at=T0 + 500_000),
        _violation("new", 2, "IP_012", "latency", "actor-1", message="m3"),
        _violation("new", 2, "IP_022", "originatingCountry", "actor-0", message="m4")] + [
        _violation("new", 2, "AUDIT", "redelivery", None, "info", message=f"r{i}") for i in range(5)]
    spark.createDataFrame(rows, tables.VIOLATIONS).write.parquet(tables.Layout(str(out)).violations)
    history = [(run, run_ms, "logs", rule, check, RUN_REQUIREMENT, "error", checked, found)
               for run, run_ms, rule, check, checked, found in HISTORY]
    spark.createDataFrame(history, tables.RULE_METRICS).write.parquet(tables.Layout(str(out)).rule_metrics)
    return log, out


#: rule metrics of three validate runs (run, runMs, rule, check, checked, violations), written out of order
HISTORY = [("new", 2, "IP_012", "latency", 160, 3), ("new", 2, "IP_022", "properties", 200, 1),
           ("new", 2, "IP_104", "spatem_after_mapem", 50, 0),
           ("old", 1, "IP_012", "latency", 150, 9), ("old", 1, "IP_022", "properties", 190, 5),
           ("old", 1, "IP_104", "spatem_after_mapem", 40, 0),
           ("mid", 1, "IP_012", "latency", 155, 4)]


@pytest.fixture(scope="module")
def report_data(spark: SparkSession, audited: tuple[Path, Path]) -> ReportData:
    return build(spark, [str(audited[1])], top=5)


def test_report_aggregates_are_exact(report_data: ReportData) -> None:
    data = report_data
    assert data.records == {"received_message": 200, "sent_message": 160, "dropped_message": 20,
                            "expired_message": 20, "rejected_message": 8}
    assert data.corrupt_lines == 1 and data.nodes == ["ixc-a"]
    assert (data.first_ms, data.last_ms) == (T0, T0 + 645_000)  # the last expiry: 60 s after the last arrival
    assert data.volumes.bucket_ms == bucket_for(645_000) == 60_000
    assert {key: sum(points.values()) for key, points in data.volumes.points.items()} == dict.fromkeys(TYPES, 50)
    assert data.publishers == [Count(("actor-0", "NL00000"), 67), Count(("actor-1", "NL00001"), 67),
                               Count(("actor-2", "NL00002"), 66)]
    assert data.neighbours == [Count(("ixc-b",), 29)] and data.per_node == [Count(("ixc-a",), 200)]
    total = data.latency[-1]
    assert (total.message_type, total.deliveries, total.over_limit, total.max, total.p99) == ("all", 160, 19, 45, 45)
    assert [row.message_type for row in data.latency] == ["CAM", "DENM", "MAPEM", "SPATEM", "all"]
    assert sum(row.over_limit for row in data.latency[:-1]) == 19
    assert sum(points for points in data.latency_series.points["p99"].values()) > 0
    assert data.losses == [Count(("dropped", "actor-2-src", "buffer_full", "CAM"), 10),
                           Count(("dropped", "actor-2-src", "buffer_full", "MAPEM"), 10),
                           Count(("expired", "actor-2-src", "-", "CAM"), 10),
                           Count(("expired", "actor-2-src", "-", "MAPEM"), 10)]
    assert {key: sum(p.values()) for key, p in data.loss_series.points.items()} == {"dropped": 20, "expired": 20}
    assert data.rejections == [Count(("quadTree: malformed (IP_037)",), 8)]
    assert data.violations_run is not None and data.violations_run.startswith("new ")
    # by severity first: the info rows (more of them) after the errors
    assert data.violations == [RuleCount("IP_012", "latency", "error", RUN_REQUIREMENT, 3),
                               RuleCount("IP_022", "originatingCountry", "error", RUN_REQUIREMENT, 1),
                               RuleCount("AUDIT", "redelivery", "info", RUN_REQUIREMENT, 5)]
    assert [f.message_id for f in data.findings[("IP_012", "latency")]] == ["m1", "m3", "m2"]  # by time
    assert data.findings_total == 9
    assert data.previous_run is not None and data.previous_run.startswith("old ")
    assert [(c.rule, c.check, c.before, c.after) for c in data.changes] == [
        ("IP_012", "latency", 9, 3), ("IP_022", "properties", 5, 1)]
    neighbour = next(p for p in data.parties if p.kind == "neighbour")
    consumer = next(p for p in data.parties if p.kind == "consumer")
    assert (neighbour.name, neighbour.received, neighbour.findings) == ("ixc-b", 29, 0)
    assert neighbour.delivered == sum(1 for i in range(200) if i % 7 == 0 and i % 10 not in (3, 5))
    assert (consumer.name, consumer.delivered, consumer.over_limit, consumer.findings) == ("actor-2", 160, 19, 0)
    assert data.offenders == [Offender("actor-0", 3, ("IP_012", "IP_022")), Offender("actor-1", 1, ("IP_012",))]
    assert [(run.run_id, run.run_ms, run.total) for run in data.history] == [("mid", 1, 4), ("old", 1, 14), ("new", 2, 4)]
    assert data.history[-1].violations == {("IP_012", "latency"): 3, ("IP_022", "properties"): 1,
                                           ("IP_104", "spatem_after_mapem"): 0}
    assert data.history[1].checked[("IP_022", "properties")] == 190
    assert history_rules(data.history) == [("IP_012", "latency"), ("IP_022", "properties")]
    assert data.neighbour_counts == [(T0, 1), (T0 + 300_000, 2)]
    assert [change.status for change in data.status_changes] == ["REQUESTED", "CREATED", "ERROR"]
    assert data.subscriptions == [
        Subscription("incoming", "ixc-c", "messageType = 'CAM'", "CREATED", T0 + 2000, 1, None),
        Subscription("outgoing", "ixc-b", "messageType = 'DENM'", "ERROR", T0 + 400_000, 3, "HTTP 503")]


def test_report_page_loads_in_chromium_with_no_error_no_request_and_visible_charts(
        report_data: ReportData, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(report_data), encoding="utf-8")
    loaded = asyncio.run(browser_harness.load(page))
    (tmp_path / "report.png").write_bytes(loaded.screenshot)
    assert loaded.errors == []
    assert loaded.requests_besides(page.resolve().as_uri()) == []
    assert loaded.title == "C-Roads interchange audit report"
    assert len(loaded.charts) == 8  # volumes, latency x2, violations, history, losses, neighbours, subscriptions
    for chart in loaded.charts:
        assert chart["shown"] and chart["width"] > 400 and chart["height"] > 100 and chart["shapes"] > 5, chart
    assert loaded.screenshot.startswith(b"\x89PNG")
    history = loaded.charts[4]  # the validation history: a line per rule with violations, a tick per run
    assert history["shapes"] > 10
    html = page.read_text()
    assert html.count('<td class="n bad">9 / 150</td>') == 1 and "No rule metrics found" not in html


def test_the_browser_check_sees_requests_and_console_errors(tmp_path: Path) -> None:
    """The harness itself: a page that fetches and logs an error is caught (so an empty list means none)."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><title>bad</title></head><body>'
                    '<img src="http://127.0.0.1:9/chart.png"><script>console.error("boom")</script>'
                    '<figure><svg width="10" height="10"></svg></figure></body></html>')
    loaded = asyncio.run(browser_harness.load(page))
    assert loaded.requests_besides(page.resolve().as_uri()) == ["http://127.0.0.1:9/chart.png"]
    assert any("boom" in error for error in loaded.errors)
    assert loaded.charts and loaded.charts[0]["shapes"] == 0


def test_report_command_over_raw_logs(spark: SparkSession, audited: tuple[Path, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "out" / "report.html"
    assert main(["report", "--input", str(audited[0]), "--output", str(output)]) == 0
    assert "report: 200 messages received" in capsys.readouterr().out
    html = output.read_text()
    assert html.count("<svg") == 6  # no violations chart: raw logs carry no validate run
    assert "No validation run found" in html and re.search(r'(src|href)="(https?:|//)', html) is None
    assert main(["report", "--input", str(audited[0]), "--output", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_an_empty_report_says_so() -> None:
    html = render(ReportData(inputs=["empty.log"], generated_ms=T0))
    assert "<svg" not in html
    for text in ("No received messages in the log", "no deliveries logged", "No validation run found",
                 "nothing dropped, expired or unroutable", "No neighbour discovery events", "No rule metrics found"):
        assert text in html
    assert Latency("x", 0, 0, 0, 0, 0, 0).over_share == 0.0


#: Per bar chart (by its bars' id prefix): the bars' drawn heights added up, in the units of the y axis
#: (read off two of its tick marks and their labels), as the browser lays them out.
BAR_TOTALS = """
(() => {
  const totals = {};
  for (const prefix of ["volume", "loss"]) {
    const bars = [...document.querySelectorAll(`g[id^="${prefix}-"]`)];
    if (!bars.length) continue;
    const svg = bars[0].closest("svg");
    const ticks = [...svg.querySelectorAll('g[id^="ytick_"]')].map(t => {
      const box = t.querySelector("use").getBoundingClientRect();
      return {y: box.top + box.height / 2, v: parseFloat(t.querySelector("text").textContent.replace("\u2212", "-"))};
    }).filter(t => !isNaN(t.v));
    const [a, b] = [ticks[0], ticks[ticks.length - 1]];
    const perUnit = (a.y - b.y) / (b.v - a.v);
    totals[prefix] = {bars: bars.length,
                      total: bars.reduce((sum, bar) => sum + bar.getBoundingClientRect().height, 0) / perUnit};
  }
  return totals;
})()
"""


def test_the_drawn_bars_add_up_to_the_headline(report_data: ReportData, tmp_path: Path) -> None:
    """In headless chromium, the volume chart's bars (every bucket, the last one too) add up to the
    messages received the page's first card says, and the loss chart's to the drops and expiries."""
    page = tmp_path / "report.html"
    page.write_text(render(report_data), encoding="utf-8")
    loaded = asyncio.run(browser_harness.load(page, probe=BAR_TOTALS))
    (tmp_path / "report.png").write_bytes(loaded.screenshot)
    totals = loaded.probed
    received = report_data.records["received_message"]
    assert abs(totals["volume"]["total"] - received) < received * 0.005, totals
    assert totals["volume"]["bars"] == sum(len(points) for points in report_data.volumes.points.values())
    lost = sum(sum(points.values()) for points in report_data.loss_series.points.values())
    assert abs(totals["loss"]["total"] - lost) < lost * 0.005, totals
    last_bucket = max(start for points in report_data.volumes.points.values() for start in points)
    assert last_bucket >= T0 + 199 * 3000 - report_data.volumes.bucket_ms  # the last arrival's bucket is drawn


def test_a_short_log_keeps_its_time_axis_and_an_outlier_keeps_the_limit_readable() -> None:
    """One bucket of data spans that bucket (ticks of seconds, one date: not years); a 5 s outlier
    leaves the 30 ms line on a logarithmic axis (tick labels as powers of ten) instead of at its foot."""
    from spark.report_model import Series
    from spark.report_render import series_chart
    svg = series_chart(Series(1000, {"DENM": {T0: 3.0}}), "messages") or ""
    labels = set(re.findall(r">([^<>]{1,40})</text>", svg))
    assert {label[:4] for label in labels if re.match(r"(19|20)\d\d", label)} == {"2026"}
    assert {"40.0", "41.0"} <= labels  # seconds of the one bucket
    latency = series_chart(Series(1000, {"p50": {T0: 5.0, T0 + 1000: 6.0}, "p99": {T0: 5000.0, T0 + 1000: 9.0}}),
                           "ms", stacked=False, limit=30) or ""
    assert "IP_012 limit (30 ms)" in latency
    assert len(re.findall(r'<g id="ytick_\d+">.*?<tspan', latency, re.DOTALL)) >= 3  # 10^1, 10^2, 10^3 ...


def test_report_period_and_findings_csv(spark: SparkSession, audited: tuple[Path, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """--from/--until select records and findings; every finding of the run is in the CSV linked from the page."""
    output = tmp_path / "report.html"
    assert main(["report", "--input", str(audited[1]), "--output", str(output), "--from", str(T0),
                 "--until", str(T0 + 300_000)]) == 0
    printed = capsys.readouterr().out
    assert "report: 100 messages received" in printed and "(3 error, 0 warning, 5 info)" in printed  # m2 is later
    csv_file = tmp_path / "report.findings.csv"
    rows = list(csv.DictReader(csv_file.open(encoding="utf-8")))
    assert [(r["severity"], r["rule"], r["messageId"]) for r in rows] == [
        ("error", "IP_012", "m1"), ("error", "IP_012", "m3"), ("error", "IP_022", "m4"),
        *[("info", "AUDIT", f"r{i}") for i in range(5)]]
    assert rows[0]["observed"] == "observed m1" and rows[0]["timestampMs"] == str(T0 + 1000)
    html = output.read_text()
    assert 'href="report.findings.csv"' in html and "Selected: records and findings" in html
    assert main(["report", "--input", str(audited[1]), "--output", str(output), "--from", str(T0 + 1),
                 "--until", str(T0)]) == 2
    assert "is not before --until" in capsys.readouterr().err
