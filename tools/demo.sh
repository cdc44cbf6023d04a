#!/usr/bin/env bash
# The main job end to end on one machine: installs what is missing, builds,
# makes a small synthetic ImageFolder dataset, starts sophon-server on
# 127.0.0.1 (a free port) and trains a model from it with sophon-train in
# smartoff mode (it profiles the dataset through the server on the first run,
# measures the link, and plans every sample).
#
# Environment knobs (all optional):
#   MODE=smartoff    offload mode (nooff, resizeoff, alloff, smartoff)
#   ARCH=resnet18    model
#   EPOCHS=2         epochs
#   N=256            dataset size (synthetic images, imagenet-like sizes)
#   DATA=DIR         use this ImageFolder dataset instead of making one
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/build.sh --target sophon-server sophon-train

build=${BUILD_DIR:-build}
data=${DATA:-$build/demo-data}
if [[ ! -d "$data" ]]; then
  echo "demo: making a synthetic dataset of ${N:-256} images in $data"
  tools/make-dataset --source=synthetic --profile=imagenet --n="${N:-256}" --classes=4 \
    --seed=1 --out="$data"
fi

log=$build/demo-server.log
"$build/sophon-server" --data="$data" --host=127.0.0.1 --port=0 --prep-workers=1 \
  --stats-interval=5s >"$log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true' EXIT
address=""
for _ in $(seq 100); do
  address=$(sed -n 's/^listening on //p' "$log" | head -1)
  [[ -n "$address" ]] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "demo: sophon-server exited:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
[[ -n "$address" ]] || { echo "demo: sophon-server did not start" >&2; cat "$log" >&2; exit 1; }
echo "demo: sophon-server is serving $data on $address (log: $log)"

"$build/sophon-train" --server="$address" --mode="${MODE:-smartoff}" --arch="${ARCH:-resnet18}" \
  --crop-size=112 --batch-size=32 --epochs="${EPOCHS:-2}" --workers=1 --lr=0.05 \
  --profile-folder="$build/demo-profile" \
  --report-json="$build/demo-report.json"
echo "demo: per-epoch figures written to $build/demo-report.json"
