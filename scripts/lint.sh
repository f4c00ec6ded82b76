#!/usr/bin/env bash
# The linters, as CI and the pre-commit hooks run them: ruff (rules in pyproject.toml's [tool.ruff])
# over the whole tree, then mypy ([tool.mypy]) over the packages. Needs the venv scripts/setup.sh builds.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m ruff check .
.venv/bin/python -m mypy --config-file pyproject.toml
