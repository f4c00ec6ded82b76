#!/usr/bin/env bash
# The audit jobs unchanged on a Spark standalone cluster: one master and two workers (1 core, 1 GB
# each) started from the installed pyspark on loopback, then `interchange audit ingest/validate
# --master spark://...` and the same validate through spark-submit (spark/submit.py). The jobs use
# no Python UDFs, so the executors run only the JVM. Everything started here is stopped on exit.
#
#     bash scripts/spark_cluster.sh [WORK_DIR] [LINES]      # after scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(realpath -m "${1:-$(mktemp -d -t spark-cluster-XXXX)}")
lines=${2:-20000}
mkdir -p "$work"

SPARK_HOME=$(.venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
export SPARK_HOME SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$PWD/.venv/bin/python" SPARK_LOG_DIR="$work/logs"
port=$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
master="spark://127.0.0.1:$port"

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

"$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master --host 127.0.0.1 --port "$port" \
  --webui-port 0 >"$work/master.log" 2>&1 &
pids+=($!)
for n in 1 2; do
  "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores 1 --memory 1g \
    --webui-port 0 --work-dir "$work/worker-$n" "$master" >"$work/worker-$n.log" 2>&1 &
  pids+=($!)
done
registered() { grep -c 'Registering worker' "$work/master.log" 2>/dev/null || true; }
deadline=$((SECONDS + 300))  # JVM start-up is slow on a loaded 2-core machine
until [ "$(registered)" -ge 2 ] || [ "$SECONDS" -ge "$deadline" ]; do sleep 1; done
[ "$(registered)" -ge 2 ] || { echo "spark_cluster: workers did not register" >&2; exit 1; }
echo "spark_cluster: master $master with 2 workers (logs in $work)"

.venv/bin/python - "$work/logs-in/node-20261118T000000000000-0001.jsonl" "$lines" <<'EOF'
import pathlib, sys
from spark import loggen
path = pathlib.Path(sys.argv[1]); path.parent.mkdir(parents=True, exist_ok=True)
path.write_text("".join(line + "\n" for line in loggen.traffic(int(sys.argv[2]))))
EOF
.venv/bin/interchange audit ingest --input "$work/logs-in" --output "$work/out" --master "$master"
.venv/bin/interchange audit validate --input "$work/out" --output "$work/out" --master "$master" --run-id cluster \
  | tail -n 1
"$SPARK_HOME/bin/spark-submit" --master "$master" --conf spark.driver.host=127.0.0.1 spark/submit.py \
  validate --input "$work/out" --output "$work/out" --run-id spark-submit 2>/dev/null | tail -n 1
grep -c 'Asked to launch executor' "$work/worker-1.log" "$work/worker-2.log" | sed 's/^/spark_cluster: executors launched by /'
