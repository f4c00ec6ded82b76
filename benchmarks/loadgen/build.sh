#!/bin/sh
# Build the benchmark load generator (gcc + Debian's libqpid-proton11-dev, proton-C 0.37) and, next
# to it, the IF2 benchmark's AMQP 0-9-1 clients if2_consume and if2_publish (librabbitmq-dev,
# rabbitmq-c 0.11; their shared connection set-up is if2_amqp.h).
# Usage: benchmarks/loadgen/build.sh [OUTPUT]   (default: build/loadgen, which git ignores;
#        if2_consume and if2_publish go to OUTPUT's folder)
set -e
here=$(cd "$(dirname "$0")" && pwd)
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
