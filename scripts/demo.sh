#!/usr/bin/env bash
# Installs everything (scripts/setup.sh) and runs the main job: the interchange demo
# on embedded defaults (generated test PKI, loopback), ending with the Spark audit of its own
# logs (report path and findings per severity; --no-audit skips it). Extra arguments go to
# `interchange demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/interchange demo "$@"
