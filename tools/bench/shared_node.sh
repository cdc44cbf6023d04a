#!/usr/bin/env bash
# Ranks of sophon-train --mode=smartoff on one node against one loopback sophon-server with
# --prep-workers=1: what each rank predicted for each epoch and what it took, with the ranks
# planning the server, link and cores they share (no root needed; tools/bench/node-jobs does
# the same over a rate-limited link). Prints one row per epoch per rank.
#
# Usage: tools/bench/shared_node.sh [DATA]   (default: N synthetic photos made into
#        $BUILD_DIR/shared-node-data-N by tools/make-dataset)
# Environment: BUILD_DIR (default build), N (200), EPOCHS (4), RANKS (2), WORKERS (1, each rank's
#        --workers), PREP_WORKERS (1), MODEL (default: an emulated A100 training AlexNet on
#        224-pixel crops, so that the data path, not this node's CPU training, binds), EXTRA
#        (more sophon-train flags), KEEP (a folder to copy the logs and reports to)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
n=${N:-200}
data=${1:-$build/shared-node-data-$n}
epochs=${EPOCHS:-4}
ranks=${RANKS:-2}
workers=${WORKERS:-1}
prep_workers=${PREP_WORKERS:-1}
model=${MODEL:---arch=alexnet --device=emulate --gpu-type=a100 --crop-size=224 --batch-size=20}
work=$(mktemp -d)
trap 'rm -rf "$work"; [[ -n ${server:-} ]] && kill "$server" 2>/dev/null; true' EXIT
if [[ ! -d $data ]]; then
  tools/make-dataset --source=synthetic --profile=imagenet --n="$n" --classes=4 --seed=1 \
    --out="$data" >/dev/null
fi
source tools/bench/lib/loopback_server.sh
start_loopback_server "$build" "$data" "$prep_workers" "$work/server.log"
# The profile is made once, before the ranks start (they would otherwise wait for each other).
"$build/sophon-train" --server="$address" --mode=smartoff $model --epochs=1 --max-batches=1 --workers="$workers" --torch-threads=1 \
  --profile-folder="$work/profile" --log-level=warn >"$work/profile.log" 2>&1 ||
  { echo "shared_node: profiling failed" >&2; cat "$work/profile.log" >&2; exit 1; }
port=$((29500 + RANDOM % 1000))
pids=()
for ((rank = 0; rank < ranks; rank++)); do
  "$build/sophon-train" --server="$address" --mode=smartoff $model --epochs="$epochs" --workers="$workers" --world-size="$ranks" --rank=$rank \
    --master-addr=127.0.0.1 --master-port=$port --torch-threads=1 \
    --profile-folder="$work/profile" ${EXTRA:-} \
    --report-json="$work/report.$rank.json" --log-level=info >"$work/rank.$rank.log" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}" || { echo "shared_node: a rank failed" >&2; cat "$work"/rank.*.log >&2; exit 1; }
[[ -n ${KEEP:-} ]] && cp -r "$work" "$KEEP"
/usr/bin/env python3 - "$work" "$ranks" <<'PY'
import json, sys
work, ranks = sys.argv[1], int(sys.argv[2])
print("| rank | epoch | predicted s | measured s | measured / predicted |")
print("|---|---|---|---|---|")
for r in range(ranks):
    for e in json.load(open(f"{work}/report.{r}.json"))["epochs"]:
        p, m = e.get("predicted_seconds", 0), e["wall_seconds"]
        print(f"| {r} | {e['epoch']} | {p:.3f} | {m:.3f} | {m / p if p else float('nan'):.2f} |")
PY
