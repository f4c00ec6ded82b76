#!/usr/bin/env bash
# Builds the audit JVM's archive for the Java it runs on (spark.runtime.select_runtime; spark/class_archive.py): on
# JDK 25 (spark/jvm/target/jdk25, scripts/build_java_home.sh) its AOT cache spark/jvm/target/audit.aot, classes
# loaded and linked and the training's method profiles; on the system's JDK 17 its class data archive
# spark/jvm/target/audit-classes.jsa (AppCDS). A training ingest, validate and report in a JVM of its own (~1.5 min).
# Run by scripts/setup.sh after scripts/build_jvm.sh and scripts/build_java_home.sh; again only when the Java, its
# HotSpot options or PySpark's jars changed. Without it (or with a stale one: HotSpot checks) the audit jobs run as
# before, only their JVMs start and warm up slower.
# Usage: scripts/build_class_archive.sh [python]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
# the archive's file, the java that will map it and the HotSpot options it is tied to (one line each)
mapfile -t plan < <("$python" -c 'from spark.class_archive import plan; print(*plan(), sep="\n")')
archive=${plan[0]} java=${plan[1]} options=${plan[2]}
target=$(dirname "$archive")
stamp=$target/.archive-$({ "$java" -version 2>&1; echo "$archive $options"; ls -l "$jars"; } | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ -f "$archive" ]; then
  exit 0
fi
echo "setup: building the audit JVM's archive into $archive (a training run, ~1.5 min)"
rm -f "$target"/.archive-*
log=$(mktemp)
if "$python" -m spark.class_archive "$archive" >"$log" 2>&1; then
  touch "$stamp"
else  # optional: the jobs run without it
  echo "setup: no archive for the audit JVM (it starts and warms up slower); the training run said:" >&2
  tail -n 20 "$log" >&2
fi
rm -f "$log"
