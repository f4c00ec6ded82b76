#!/bin/sh
# Build the benchmark load generator (gcc + Debian's libqpid-proton11-dev, proton-C 0.37) and, next
# to it, the IF2 benchmark's AMQP 0-9-1 consumer if2_consume (librabbitmq-dev, rabbitmq-c 0.11).
# Usage: benchmarks/loadgen/build.sh [OUTPUT]   (default: build/loadgen, which git ignores;
#        if2_consume goes to OUTPUT's folder)
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/../../build/loadgen"}
mkdir -p "$(dirname "$out")"
gcc -O2 -Wall -Wextra -Wno-unused-parameter -o "$out" "$here/loadgen.c" \
    $(pkg-config --cflags --libs libqpid-proton 2>/dev/null || echo -lqpid-proton)
echo "built $out"
consume="$(dirname "$out")/if2_consume"
gcc -O2 -Wall -Wextra -o "$consume" "$here/if2_consume.c" \
    $(pkg-config --cflags --libs librabbitmq 2>/dev/null || echo -lrabbitmq) -lssl -lcrypto
echo "built $consume"
