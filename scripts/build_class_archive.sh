#!/usr/bin/env bash
# Builds the audit JVM's class data archive (HotSpot AppCDS; spark/class_archive.py) into
# spark/jvm/target/audit-classes.jsa: a training ingest and validate in a JVM of its own (~1 min). Run by
# scripts/setup.sh after scripts/build_jvm.sh; again only when the JDK or PySpark's jars changed. Without the
# archive (or with a stale one: HotSpot checks) the audit jobs run as before, only their JVMs start slower.
# Usage: scripts/build_class_archive.sh [python]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
target=spark/jvm/target
stamp=$target/.archive-$({ java -version 2>&1; ls -l "$jars"; } | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ -f "$target/audit-classes.jsa" ]; then
  exit 0
fi
echo "setup: building the audit JVM's class data archive into $target/audit-classes.jsa (a training run, ~1 min)"
rm -f "$target"/.archive-*
log=$(mktemp)
if "$python" -m spark.class_archive "$target/audit-classes.jsa" >"$log" 2>&1; then
  touch "$stamp"
else  # optional: the jobs run without it
  echo "setup: no class data archive (the audit JVMs start slower); the training run said:" >&2
  tail -n 20 "$log" >&2
fi
rm -f "$log"
