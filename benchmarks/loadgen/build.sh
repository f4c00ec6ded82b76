#!/bin/sh
# Build the benchmark load generator (gcc + Debian's libqpid-proton11-dev, proton-C 0.37) and, next
# to it, the IF2 benchmark's AMQP 0-9-1 clients if2_consume and if2_publish (librabbitmq-dev,
# rabbitmq-c 0.11; their shared connection set-up is if2_amqp.h) and the stalled clients (stalled.c,
# libssl-dev) and the C steady client (steady.c, proton-C) of bench_deadline_phases.py.
# Usage: benchmarks/loadgen/build.sh [OUTPUT]   (default: build/loadgen, which git ignores;
#        if2_consume, if2_publish and stalled go to OUTPUT's folder)
#        benchmarks/loadgen/build.sh --stalled OUTPUT   (the stalled clients alone; extra gcc flags
#        in STALLED_CFLAGS, e.g. a test's mutant)
#        benchmarks/loadgen/build.sh --steady OUTPUT   (the steady client alone)
set -e
here=$(cd "$(dirname "$0")" && pwd)
stalled() {  # written beside, then renamed: a concurrent build never runs a half-written binary
    gcc -O2 -Wall -Wextra -Wno-unused-parameter ${STALLED_CFLAGS:-} -o "$1.$$" "$here/stalled.c" -lssl -lcrypto
    mv "$1.$$" "$1"
    echo "built $1"
}
steady() {
    gcc -O2 -Wall -Wextra -Wno-unused-parameter -o "$1.$$" "$here/steady.c" \
        $(pkg-config --cflags --libs libqpid-proton 2>/dev/null || echo -lqpid-proton)
    mv "$1.$$" "$1"
    echo "built $1"
}
if [ "${1:-}" = "--steady" ]; then
    mkdir -p "$(dirname "$2")"
    steady "$2"
    exit 0
fi
if [ "${1:-}" = "--stalled" ]; then
    mkdir -p "$(dirname "$2")"
    stalled "$2"
    exit 0
fi
out=${1:-"$here/../../build/loadgen"}
mkdir -p "$(dirname "$out")"
gcc -O2 -Wall -Wextra -Wno-unused-parameter -o "$out" "$here/loadgen.c" \
    $(pkg-config --cflags --libs libqpid-proton 2>/dev/null || echo -lqpid-proton)
echo "built $out"
for client in if2_consume if2_publish; do
    gcc -O2 -Wall -Wextra -o "$(dirname "$out")/$client" "$here/$client.c" \
        $(pkg-config --cflags --libs librabbitmq 2>/dev/null || echo -lrabbitmq) -lssl -lcrypto
    echo "built $(dirname "$out")/$client"
done
stalled "$(dirname "$out")/stalled"
steady "$(dirname "$out")/steady"
