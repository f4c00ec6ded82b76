#!/usr/bin/env bash
# The body of the example CI jobs (github-actions.yml, gitlab-ci.yml): install the node if needed
# (Debian/Ubuntu packages it builds against, then the project into a virtualenv, without the test
# or Spark extras), start the demo's two-node federation on loopback (`interchange interop --self`:
# a test PKI, DNS SRV/A records, nodes a.interchange.test and b.interchange.test, actor-1's datasets
# and delivery) and run every interop check against node A.
#
# Reports: $INTEROP_OUT/junit.xml and $INTEROP_OUT/report.json (default interop-results/), the
# federation's configs, PKI and node logs under $INTEROP_OUT/federation/. Exit status: 0 when no
# check failed, 1 when one did, 2 for a usage error. Extra arguments go to `interchange interop`,
# e.g. --skip 'tls.*.refuse-*'. INTEROP_VENV picks the virtualenv (default .venv; reused when it
# already has the `interchange` command).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${INTEROP_VENV:-.venv}
out=${INTEROP_OUT:-interop-results}

if [ ! -x "$venv/bin/interchange" ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  missing=()
  python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
  python3 -c 'import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' 2>/dev/null || missing+=(python3-dev)
  command -v cc >/dev/null || missing+=(gcc)
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  [ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)   # python-qpid-proton builds against OpenSSL
  if ((${#missing[@]})); then
    echo "interop: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  echo "interop: installing the node into $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check .
fi

mkdir -p "$out"
exec "$venv/bin/interchange" interop --self --self-dir "$out/federation" \
  --junit "$out/junit.xml" --json "$out/report.json" "$@"
