"""deploy/ci's job script starts the two-node federation and passes every interop check. It runs with
the suite's virtualenv (INTEROP_VENV), so it installs nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from interchange.testing.paths import REPO_ROOT

CI = REPO_ROOT / "deploy" / "ci"


def test_job_script_passes_against_the_repository_federation(tmp_path: Path) -> None:
    out = tmp_path / "results"
    env = {**os.environ, "INTEROP_VENV": sys.prefix, "INTEROP_OUT": str(out)}
    done = subprocess.run(["bash", str(CI / "interop.sh")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "result: OK" in done.stdout
    suites = ET.parse(out / "junit.xml").getroot()
    assert suites.get("failures") == "0" and suites.get("skipped") == "0" and int(suites.get("tests", "0")) >= 37
    assert (out / "report.json").is_file()
    assert (out / "federation" / "a.interchange.test" / "node.log").is_file()
