#!/usr/bin/env bash
# Installs everything (scripts/setup.sh), runs the linters (scripts/lint.sh: ruff, mypy), then the
# test suite in its two parts: the unit part (tests/unit: no network socket, no process, no JVM;
# under a minute), then the integration part (tests/integration: real sockets, node processes,
# dnsmasq, RabbitMQ, PySpark, Chromium, the benchmarks at their smallest size). It stops at the
# first step that fails and says which. Each part runs on pytest-xdist workers, UNIT_WORKERS and
# INTEGRATION_WORKERS (default 2 each): the unit part is CPU only and two workers on two cores take
# about half its time; most integration tests wait on sockets, timers and other processes, so two
# workers take about half the time there too; the tests that use the Spark session share one worker
# (tests/integration/conftest.py), so a run still starts one JVM.
#
#   scripts/test.sh                      set-up, the linters, the unit part, then the integration part
#   scripts/test.sh unit                 set-up, the linters and the unit part only
#   scripts/test.sh integration          set-up and the integration part only
#   scripts/test.sh [unit] -x -k tls     extra arguments go to pytest (in each part it runs)
set -euo pipefail
cd "$(dirname "$0")/.."

parts=(unit integration)
case "${1:-}" in
  unit|integration) parts=("$1"); shift ;;
esac

bash scripts/setup.sh
echo "test.sh: the linters (scripts/lint.sh)"
if ! bash scripts/lint.sh; then
  echo "test.sh: the linters FAILED (scripts/lint.sh); the tests were not run" >&2
  exit 1
fi

passed=0 failed=0 skipped=0 ran=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
count() {  # the number before $1 in pytest's closing line ("12 passed, 1 skipped in 3.2s")
  tail -n 1 "$log" | grep -oE "[0-9]+ $1" | grep -oE "^[0-9]+" || echo 0
}
for part in "${parts[@]}"; do
  echo "test.sh: the $part part (tests/$part)"
  start=$SECONDS
  status=0
  workers=()
  case "$part" in
    unit) workers=(-n "${UNIT_WORKERS:-2}") ;;
    integration) workers=(-n "${INTEGRATION_WORKERS:-2}" --dist loadgroup --durations 25) ;;  # the slowest listed
  esac
  .venv/bin/python -m pytest "tests/$part" "${workers[@]}" "$@" | tee "$log" || status=${PIPESTATUS[0]}
  passed=$((passed + $(count passed))) failed=$((failed + $(count failed) + $(count error)))
  skipped=$((skipped + $(count skipped)))
  if [ "$status" = 5 ]; then  # pytest's "no tests collected": the arguments selected none here
    echo "test.sh: no test of the $part part was selected"
    continue
  fi
  if [ "$status" != 0 ]; then
    echo "test.sh: the $part part FAILED (pytest exit $status, $((SECONDS - start)) s); later parts not run" >&2
    echo "test.sh: $passed passed, $failed failed, $skipped skipped"
    exit "$status"
  fi
  ran=1
  echo "test.sh: the $part part passed ($((SECONDS - start)) s)"
done
if [ "$ran" = 0 ]; then
  echo "test.sh: no test was selected" >&2
  exit 5
fi
echo "test.sh: $passed passed, $failed failed, $skipped skipped"
