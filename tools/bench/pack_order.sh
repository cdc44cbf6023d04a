#!/usr/bin/env bash
# tools/bench/pack_order.sh — how random the group-aware order is, and what it does to training:
#   1. sophon-order-stats on a shuffled pack and on a pack in class order (sophon-pack
#      --shuffle=false): label mix per batch, displacement, pairs of samples that share a batch
#      again the next epoch, for the full shuffle and windows of 1 to 32 groups;
#   2. sophon-train from scratch (--arch, default resnet18 at crop 64) for --epochs with the full
#      shuffle over the files and with windows over both packs, on loopback: training top-1 and
#      loss per epoch.
#
#   tools/bench/pack_order.sh
#   DATA=DIR G=32 WINDOWS=1,8 EPOCHS=4 ARCH=resnet18 CROP=64 tools/bench/pack_order.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${BUILD_DIR:-build}")
data=$(realpath "${DATA:-build/bench-photos-openimages-1000}")
g=${G:-32}
windows=${WINDOWS:-1,8}
epochs=${EPOCHS:-4}
arch=${ARCH:-resnet18}
crop=${CROP:-64}
batch=${BATCH:-32}
out=$(realpath -m "${OUT:-build/bench-pack-order}")
py=/usr/bin/python3
for bin in sophon-server sophon-train sophon-pack sophon-order-stats; do
  [[ -x $build/$bin ]] || tools/build.sh --target sophon-server sophon-train sophon-pack sophon-order-stats
done
mkdir -p "$out"
for kind in shuffled classorder; do
  pack="$out/pack-$kind"
  [[ -f $pack/sophon-pack.idx ]] && continue
  rm -rf "$pack"
  "$build/sophon-pack" --data="$data" --out="$pack" --group-size="$g" --progress=false \
    --shuffle=$([[ $kind == shuffled ]] && echo true || echo false) >/dev/null
done
echo "## Order statistics: shuffled pack (groups of $g)"
"$build/sophon-order-stats" --pack="$out/pack-shuffled" --windows="0,1,4,8,32"
echo
echo "## Order statistics: pack in class order (sophon-pack --shuffle=false)"
"$build/sophon-order-stats" --pack="$out/pack-classorder" --windows="0,1,4,8,32"
echo
server_pid=""
stop_server() { [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=""; }
trap stop_server EXIT
train() {  # NAME DIR WINDOW
  local name=$1 dir=$2 window=$3
  "$build/sophon-server" --data="$dir" --host=127.0.0.1 --port=0 --prep-workers=1 \
    >"$out/$name.server.log" 2>&1 &
  server_pid=$!
  local address=""
  for _ in $(seq 300); do
    address=$(grep -o 'listening on [0-9.:]*' "$out/$name.server.log" | awk '{print $3}' || true)
    [[ -n $address ]] && break
    sleep 0.1
  done
  [[ -n $address ]] || { cat "$out/$name.server.log" >&2; exit 1; }
  "$build/sophon-train" --server="$address" --mode=nooff --arch="$arch" --crop-size="$crop" \
    --batch-size="$batch" --epochs="$epochs" --workers=1 --shuffle-window="$window" --lr=0.05 \
    --report-json="$out/$name.json" >"$out/$name.log" 2>&1 || { tail -20 "$out/$name.log" >&2; exit 1; }
  stop_server
}
train files "$data" 0
runs=(files)
for w in ${windows//,/ }; do
  train "shuffled-w$w" "$out/pack-shuffled" "$w"
  train "classorder-w$w" "$out/pack-classorder" "$w"
  runs+=("shuffled-w$w" "classorder-w$w")
done
echo "## Training $arch at crop $crop from scratch, $epochs epochs, batch $batch (training top-1 / mean loss per epoch)"
$py - "$out" "${runs[@]}" <<'PY'
import json, sys
out, runs = sys.argv[1], sys.argv[2:]
print("| run | " + " | ".join(f"epoch {e}" for e in range(len(json.load(open(f"{out}/{runs[0]}.json"))["epochs"]))) + " |")
print("|---|" + "---:|" * len(json.load(open(f"{out}/{runs[0]}.json"))["epochs"]))
names = {"files": "files, full shuffle"}
for r in runs:
    label = names.get(r) or r.replace("shuffled-w", "shuffled pack, window ").replace("classorder-w", "class-order pack, window ")
    eps = json.load(open(f"{out}/{r}.json"))["epochs"]
    print(f"| {label} | " + " | ".join(f"{e['top1']:.3f} / {e['mean_loss']:.3f}" for e in eps) + " |")
PY
