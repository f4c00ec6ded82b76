#!/bin/sh
# Build the benchmark load generator: gcc + Debian's libqpid-proton11-dev (proton-C 0.37).
# Usage: benchmarks/loadgen/build.sh [OUTPUT]   (default: build/loadgen, which git ignores)
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/../../build/loadgen"}
mkdir -p "$(dirname "$out")"
gcc -O2 -Wall -Wextra -Wno-unused-parameter -o "$out" "$here/loadgen.c" \
    $(pkg-config --cflags --libs libqpid-proton 2>/dev/null || echo -lqpid-proton)
echo "built $out"
