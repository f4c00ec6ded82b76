"""The type-check gate: mypy, configured by ``[tool.mypy]`` in pyproject.toml, finds no error in the packages."""
from __future__ import annotations

import subprocess
import sys
from interchange.testing.paths import REPO_ROOT

ROOT = REPO_ROOT


def test_packages_type_check() -> None:
    # The packages come from the configuration's `files`; the cache is the default .mypy_cache in
    # the repository (a few seconds cold, well under a second warm).
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, f"mypy failed (exit {result.returncode}):\n{result.stdout}{result.stderr}"
