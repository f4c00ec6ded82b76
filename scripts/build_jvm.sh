#!/usr/bin/env bash
# Builds spark/jvm (the ingest's line parser, a Spark SQL function in Java) into spark/jvm/target/croads-ingest.jar
# with the JDK's javac against the jars of the PySpark in .venv (Spark and Jackson). Run by scripts/setup.sh;
# rebuilt only when a source changed. Usage: scripts/build_jvm.sh [python]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
jars=$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
target=spark/jvm/target
stamp=$target/.built-$(find spark/jvm/src -name '*.java' -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ -f "$target/croads-ingest.jar" ]; then
  exit 0
fi
echo "setup: building spark/jvm (javac) into $target/croads-ingest.jar"
# the jar and what was trained on it (the archives and their stamps) go; the JDK 25 home beside them stays
rm -rf "$target/classes" "$target/croads-ingest.jar" "$target"/.built-* "$target"/.archive-* "$target"/audit.aot \
  "$target"/audit-classes.jsa
mkdir -p "$target/classes"
find spark/jvm/src -name '*.java' -print0 | xargs -0 javac -nowarn --release 17 -encoding UTF-8 \
  -cp "$jars/*" -d "$target/classes"
jar --create --file "$target/croads-ingest.jar" -C "$target/classes" .
touch "$stamp"
