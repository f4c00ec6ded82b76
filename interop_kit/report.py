"""The kit's outputs: a terminal summary, JUnit XML (what every CI system displays) and JSON.

JUnit: one ``<testsuite>`` per check group (tls, dns, ii, bi), one ``<testcase>`` per check with
``classname="interop.<group>"``; failures carry the reason in ``<failure message=...>``, skips in
``<skipped message=...>``; the requirement (IP_xxx) is a ``<property>`` and part of the name, so
it shows in CI test views. JSON is :class:`interop_kit.model.Report` as written by pydantic.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

from interop_kit.model import CheckResult, Outcome, Report

MARKS = {Outcome.PASSED: "PASS", Outcome.FAILED: "FAIL", Outcome.SKIPPED: "SKIP"}


def result_line(result: CheckResult) -> str:
    """``PASS  tls.ii.tls12-refused  [IP_054]  reason`` (one line per check)."""
    return f"{MARKS[result.outcome]:4}  {result.name:34} [{result.requirement}]  {result.message}"


def summary_lines(report: Report) -> list[str]:
    counts = ", ".join(f"{report.count(o)} {o.value}" for o in Outcome)
    verdict = "FAILED" if report.failed else "OK"
    lines = [f"interop {report.target} ({report.ii_url}, {report.bi_endpoint}): {counts} in {report.duration_s:.1f} s"]
    lines += [f"  failed: {r.name} [{r.requirement}]: {r.message}" for r in report.results if r.outcome is Outcome.FAILED]
    lines.append(f"result: {verdict}")
    return lines


def _groups(results: Iterable[CheckResult]) -> dict[str, list[CheckResult]]:
    groups: dict[str, list[CheckResult]] = {}
    for result in results:
        groups.setdefault(result.group or "interop", []).append(result)
    return groups


def junit_xml(report: Report) -> bytes:
    suites = ET.Element("testsuites", name=f"interop {report.target}", tests=str(len(report.results)),
                        failures=str(report.count(Outcome.FAILED)), skipped=str(report.count(Outcome.SKIPPED)),
                        time=f"{report.duration_s:.3f}")
    for group, results in _groups(report.results).items():
        suite = ET.SubElement(suites, "testsuite", name=f"interop.{group}", tests=str(len(results)),
                              failures=str(sum(r.outcome is Outcome.FAILED for r in results)), errors="0",
                              skipped=str(sum(r.outcome is Outcome.SKIPPED for r in results)),
                              time=f"{sum(r.duration_s for r in results):.3f}", timestamp=report.started)
        for result in results:
            case = ET.SubElement(suite, "testcase", classname=f"interop.{group}",
                                 name=f"{result.name} [{result.requirement}]", time=f"{result.duration_s:.3f}")
            properties = ET.SubElement(case, "properties")
            ET.SubElement(properties, "property", name="requirement", value=result.requirement)
            ET.SubElement(properties, "property", name="target", value=report.target)
            if result.outcome is Outcome.FAILED:
                ET.SubElement(case, "failure", message=result.message, type="InteropCheckFailed").text = result.summary
            elif result.outcome is Outcome.SKIPPED:
                ET.SubElement(case, "skipped", message=result.message)
            else:
                ET.SubElement(case, "system-out").text = result.message
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def write_outputs(report: Report, junit: Path | None, json_path: Path | None) -> None:
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_bytes(junit_xml(report))
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
