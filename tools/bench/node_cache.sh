#!/usr/bin/env bash
# Two ranks of sophon-train on one node against one loopback sophon-server: what the node's
# sample cache holds and what the ranks receive, with a memory cache per process against one
# folder on tmpfs that both share (docs/sophon-train.md#several-processes-on-one-node-one-cache-for-all-of-them).
#
# Usage: tools/bench/node_cache.sh [DATA]   (default: 200 synthetic photos made into
#        $BUILD_DIR/node-cache-data by tools/make-dataset)
# Environment: BUILD_DIR (default build), EPOCHS (3), SHM (default /dev/shm/sophon-node-cache-$$)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
data=${1:-$build/node-cache-data}
epochs=${EPOCHS:-3}
shm=${SHM:-/dev/shm/sophon-node-cache-$$}
work=$(mktemp -d)
trap 'rm -rf "$work" "$shm"; [[ -n ${server:-} ]] && kill "$server" 2>/dev/null; true' EXIT
if [[ ! -d $data ]]; then
  tools/make-dataset --source=synthetic --profile=imagenet --n=200 --classes=4 --seed=1 \
    --out="$data" >/dev/null
fi
source tools/bench/lib/loopback_server.sh
start_loopback_server "$build" "$data" 1 "$work/server.log"

run() {  # NAME CACHE-FLAGS...
  local name=$1; shift
  local port=$((29500 + RANDOM % 1000)) pids=()
  for rank in 0 1; do
    "$build/sophon-train" --server="$address" --mode=nooff --arch=tinycnn --crop-size=32 \
      --batch-size=10 --epochs="$epochs" --workers=1 --world-size=2 --rank=$rank \
      --master-addr=127.0.0.1 --master-port=$port --torch-threads=1 "$@" \
      --report-json="$work/$name.$rank.json" --log-level=warn >"$work/$name.$rank.log" 2>&1 &
    pids+=($!)
  done
  # The shared folder, sampled while the ranks run (on tmpfs it goes with its last user).
  local peak=0 bytes
  while kill -0 "${pids[@]}" 2>/dev/null; do
    bytes=$(du -sb "$shm" 2>/dev/null | cut -f1 || echo 0)
    (( ${bytes:-0} > peak )) && peak=$bytes
    sleep 0.2
  done
  echo "$peak" >"$work/$name.peak"
  wait "${pids[@]}" || { echo "node_cache: a rank failed ($name)" >&2; cat "$work/$name".*.log >&2; exit 1; }
}
run memory --local-cache-bytes=1000000000
run shared --local-cache-dir="$shm" --local-cache-dir-bytes=1000000000 --local-cache-bytes=0
shared_bytes=$(cat "$work/shared.peak")
/usr/bin/env python3 - "$work" "$(du -sb "$data" | cut -f1)" "$shared_bytes" "$epochs" <<'PY'
import json, sys
work, data_bytes, shared_bytes, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(f"dataset {data_bytes / 1e6:.1f} MB; two ranks, {epochs} epochs\n")
print("| cache | node's cache bytes (most while running) | bytes received per epoch, both ranks |")
print("|---|---|---|")
for name, label in (("memory", "--local-cache-bytes (each rank its own)"),
                    ("shared", "--local-cache-dir on tmpfs, --local-cache-bytes=0")):
    reports = [json.load(open(f"{work}/{name}.{r}.json"))["epochs"] for r in (0, 1)]
    received = [sum(rep[e]["bytes_received"] for rep in reports) / 1e6 for e in range(epochs)]
    held = sum(rep[-1]["sample_cache_bytes"] for rep in reports) if name == "memory" else shared_bytes
    print(f"| {label} | {held / 1e6:.1f} MB ({held / data_bytes:.3f}x the set) | "
          + ", ".join(f"{r:.2f} MB" for r in received) + " |")
PY
