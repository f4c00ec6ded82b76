"""The audit of a set of logs in one Spark session: ingest, validate, report (what ``interchange demo``
runs on its federation's own logs at the end). Returns what a newcomer is shown: the counts, the
findings per severity and where the report is."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spark import report, session
from spark.ingest import IngestSummary, ingest
from spark.report_model import SEVERITY_RANK
from spark.report_render import render
from spark.tables import Layout
from spark.validate import load_messages, validate


@dataclass(frozen=True)
class AuditResult:
    ingested: IngestSummary
    findings: dict[str, int]  #: severity -> findings of the validate run
    report: Path
    findings_csv: Path | None

    def lines(self) -> list[str]:
        counts = ", ".join(f"{n} {severity}" for severity, n in self.findings.items())
        return [f"audit ingest: {self.ingested}",
                f"audit validate: findings per severity: {counts}",
                f"audit report: {self.report}" + (f" (every finding: {self.findings_csv})" if self.findings_csv else "")]


def audit(logs: Sequence[str], output: Path, title: str = "C-Roads interchange audit report",
          master: str | None = None) -> AuditResult:
    """Ingest ``logs`` into ``output/tables``, validate them, write ``output/report.html``."""
    spark, created = session.open_session(master, "interchange-audit")
    try:
        tables = str(output / "tables")
        ingested = ingest(spark, list(logs), tables)
        run = validate(spark, load_messages(spark, [tables]), tables, "demo")
        findings = dict.fromkeys(SEVERITY_RANK, 0)
        for metric in run.metrics:
            findings[metric.severity] = findings.get(metric.severity, 0) + metric.violations
        page = output / "report.html"
        data = report.build(spark, [tables], csv_path=page.with_suffix(".findings.csv"))
        page.write_text(render(data, title), encoding="utf-8")
        csv = page.with_suffix(".findings.csv") if data.findings_csv else None
        return AuditResult(ingested, findings, page, csv)
    finally:
        if created:
            spark.stop()


def layout(output: Path) -> Layout:
    return Layout(str(output / "tables"))
