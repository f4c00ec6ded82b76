"""deploy/ci: the example CI jobs parse, call the job script and publish its reports. The GitHub/GitLab
files are checked for what they run and which report paths they publish; the "neighbour" job's kit
command line is parsed by the real `interchange` parser (the job script itself runs in
tests/integration/test_interop_ci_job.py)."""
from __future__ import annotations

import shlex
from typing import Any

import yaml

from interchange.app.cli import build_parser
from interchange.testing.paths import REPO_ROOT

ROOT = REPO_ROOT
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
