"""deploy/ci (issue 14): the example CI jobs parse, call the job script, read its reports, and the
job script itself starts the two-node federation and passes every interop check.

The script runs here with the suite's virtualenv (INTEROP_VENV), so it installs nothing; the
GitHub/GitLab files are checked for what they run and which report paths they publish. The
"neighbour" job's kit command line is parsed by the real `interchange` parser.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import yaml

from interchange.app.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / "deploy" / "ci"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CI / name).read_text(encoding="utf-8"))
    return data


def test_github_workflow_runs_the_job_script_and_publishes_junit() -> None:
    workflow = _load("github-actions.yml")
    steps = workflow["jobs"]["federation"]["steps"]
    assert any(step.get("run") == "bash deploy/ci/interop.sh" for step in steps)
    reports = [step["with"]["report_paths"] for step in steps if "junit" in step.get("uses", "")]
    assert reports == ["interop-results/junit.xml"]


def test_github_neighbour_job_is_a_valid_kit_command_line() -> None:
    steps = _load("github-actions.yml")["jobs"]["neighbour"]["steps"]
    command = next(step["run"] for step in steps if step.get("name") == "interop kit")
    words = shlex.split(command.replace("${{ vars.", "VAR_").replace(" }}", ""))
    assert words[:2] == [".venv/bin/interchange", "interop"]
    args = build_parser().parse_args(words[1:])
    assert args.ii_url == "VAR_INTEROP_II_URL" and str(args.junit) == "interop-results/junit.xml"


def test_gitlab_job_runs_the_job_script_and_publishes_junit() -> None:
    job = _load("gitlab-ci.yml")["interop"]
    assert job["script"] == ["bash deploy/ci/interop.sh"]
    assert job["artifacts"]["reports"]["junit"] == "interop-results/junit.xml"
    assert job["artifacts"]["when"] == "always"


def test_job_script_passes_against_the_repository_federation(tmp_path: Path) -> None:
    out = tmp_path / "results"
    env = {**os.environ, "INTEROP_VENV": str(Path(sys.executable).parent.parent), "INTEROP_OUT": str(out)}
    done = subprocess.run(["bash", str(CI / "interop.sh")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "result: OK" in done.stdout
    suites = ET.parse(out / "junit.xml").getroot()
    assert suites.get("failures") == "0" and suites.get("skipped") == "0" and int(suites.get("tests", "0")) >= 37
    assert (out / "report.json").is_file()
    assert (out / "federation" / "a.interchange.test" / "node.log").is_file()
