"""The last validation run as a Prometheus textfile-collector file (``interchange audit validate
--metrics-file PATH``): node_exporter's textfile collector serves it, and the alert
``InterchangeAuditErrors`` (``deploy/monitoring/rules/alerts.yml``) fires while the last run found
findings of severity error.

- ``interchange_audit_findings{rule, check, severity}``: findings of each check in the run;
- ``interchange_audit_checked{rule, check}``: the rows each check looked at;
- ``interchange_audit_last_run_timestamp_seconds``: when the run started.

Written with prometheus-client's ``write_to_textfile`` (a temporary file renamed over the old one,
so the collector never reads half a file).
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from spark.validate import ValidationRun


class _RunCollector:
    def __init__(self, run: ValidationRun) -> None:
        self._run = run

    def collect(self) -> Iterator[Metric]:
        findings = GaugeMetricFamily("interchange_audit_findings", "Findings of each audit check in the last "
                                     "validation run, by rule and severity", labels=["rule", "check", "severity"])
        checked = GaugeMetricFamily("interchange_audit_checked", "Rows each audit check looked at in the last run",
                                    labels=["rule", "check"])
        for metric in self._run.metrics:
            findings.add_metric([metric.rule, metric.check, metric.severity], metric.violations)
            checked.add_metric([metric.rule, metric.check], metric.checked)
        yield findings
        yield checked
        yield GaugeMetricFamily("interchange_audit_last_run_timestamp_seconds", "Start of the last validation run",
                                value=self._run.run_ms / 1000)


def write_metrics(path: str | Path, run: ValidationRun) -> None:
    """Replace ``path`` (name it ``*.prom`` in the collector's directory) with the run's metrics."""
    registry = CollectorRegistry()
    registry.register(_RunCollector(run))
    write_to_textfile(str(path), registry)
