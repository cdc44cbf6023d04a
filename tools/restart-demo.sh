#!/usr/bin/env bash
# A storage server killed (SIGKILL) in the middle of an epoch and restarted on
# the same address: sophon-train waits for it, re-opens its stream, asks again
# for the samples it had not received, and finishes the epoch.
#
# Environment knobs (all optional):
#   DATA=DIR       ImageFolder dataset (default: the demo's, made if missing)
#   PORT=50731     loopback port of the server
#   KILL_AFTER=4   seconds of training before the kill
#   DOWN_FOR=2     seconds the server stays down
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh --target sophon-server sophon-train

build=${BUILD_DIR:-build}
data=${DATA:-$build/demo-data}
port=${PORT:-50731}
if [[ ! -d "$data" ]]; then
  echo "restart-demo: making a synthetic dataset of 256 images in $data"
  tools/make-dataset --source=synthetic --profile=imagenet --n=256 --classes=4 --seed=1 \
    --out="$data"
fi

start_server() {  # $1: log file; waits until it listens
  "$build/sophon-server" --data="$data" --host=127.0.0.1 --port="$port" --prep-workers=1 \
    >"$1" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    grep -q '^listening on ' "$1" && return 0
    kill -0 "$server_pid" 2>/dev/null || { echo "restart-demo: sophon-server exited:" >&2; cat "$1" >&2; exit 1; }
    sleep 0.1
  done
  echo "restart-demo: sophon-server did not start" >&2
  exit 1
}

server_pid=""
trap '[[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null || true' EXIT
start_server "$build/restart-demo-server-1.log"
echo "restart-demo: sophon-server (pid $server_pid) is serving $data on 127.0.0.1:$port"

"$build/sophon-train" --server="127.0.0.1:$port" --mode=resizeoff --arch=resnet18 --crop-size=112 \
  --batch-size=32 --epochs=1 --workers=1 --report-json="$build/restart-demo-report.json" &
train_pid=$!
sleep "${KILL_AFTER:-4}"
kill -9 "$server_pid"
wait "$server_pid" 2>/dev/null || true
echo "restart-demo: killed sophon-server with SIGKILL; restarting it in ${DOWN_FOR:-2}s"
sleep "${DOWN_FOR:-2}"
start_server "$build/restart-demo-server-2.log"
echo "restart-demo: sophon-server restarted (pid $server_pid)"
wait "$train_pid"
echo "restart-demo: the epoch finished; report in $build/restart-demo-report.json"
