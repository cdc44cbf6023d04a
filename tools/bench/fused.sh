#!/usr/bin/env bash
# fused.sh: fused model arrays (sophon-train --fused-models=B, the HFTA design) against the same
# B models trained one after the other, on CPU, on the same data stream and settings.
# For each B in --models:
#   (a) one fused run: sophon-train --fused-models=B --lr=L0,...,L(B-1), model k initialised
#       with --model-seed=SEED+k;
#   (b) B separate ordinary runs one after another, run k with --model-seed=SEED+k --lr=Lk.
# Every run uses the same --seed (shuffle and augmentation: the same batches in the same order)
# and every other setting, from one local sophon-server on 127.0.0.1 (the dataset is read once
# first so that every run finds it in the page cache). Learning rates: Lk = BASE_LR / 2^k.
# Prints a markdown table per B: wall seconds, models x images per second, the speed-up
# fused / separate, the share of wall time spent waiting for data, and as a cross-check the
# largest difference between a fused model's final-epoch mean loss and its separate run's
# (same start, same batches: close, not bit-identical); then each model's losses.
# Writes OUT/fused.csv, each run's --report-json (OUT/fused-B.json, OUT/separate-B-k.json)
# and log (.log), and the server's log (OUT/server.log).
#
# Usage:
#   tools/bench/fused.sh --data=DIR [--arch=tinycnn] [--models=1,2,4,8] [--batch-size=32]
#       [--crop-size=64] [--epochs=1] [--max-batches=0] [--warmup-batches=2] [--workers=1]
#       [--prep-workers=1] [--mode=nooff] [--torch-threads=1] [--optimizer=sgd]
#       [--base-lr=0.1 for sgd, 0.001 for adam] [--seed=0] [--out=out/fused]
#       [-- MORE_SOPHON_TRAIN_FLAGS...]
# Every option has the default shown. --data (an ImageFolder) is required; --max-batches=0 is
# the whole epoch; --workers are sophon-train's local prep threads, --prep-workers the server's.
# Run from anywhere; binaries come from $BUILD_DIR (build/). On a shared machine run it under
# nice and expect noise: each run is measured once.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
py=/usr/bin/python3

data="" arch="tinycnn" models="1,2,4,8" batch_size=32 crop_size=64 epochs=1 max_batches=0
warmup_batches=2 workers=1 prep_workers=1 mode="nooff" torch_threads=1 optimizer="sgd"
base_lr="" seed=0 out="out/fused"
extra=()
while (( $# )); do
  case "$1" in
    --data=*) data=${1#*=} ;;
    --arch=*) arch=${1#*=} ;;
    --models=*) models=${1#*=} ;;
    --batch-size=*) batch_size=${1#*=} ;;
    --crop-size=*) crop_size=${1#*=} ;;
    --epochs=*) epochs=${1#*=} ;;
    --max-batches=*) max_batches=${1#*=} ;;
    --warmup-batches=*) warmup_batches=${1#*=} ;;
    --workers=*) workers=${1#*=} ;;
    --prep-workers=*) prep_workers=${1#*=} ;;
    --mode=*) mode=${1#*=} ;;
    --torch-threads=*) torch_threads=${1#*=} ;;
    --optimizer=*) optimizer=${1#*=} ;;
    --base-lr=*) base_lr=${1#*=} ;;
    --seed=*) seed=${1#*=} ;;
    --out=*) out=${1#*=} ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fused.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$data" && -d "$data" ]] || { echo "fused.sh: --data=DIR (an ImageFolder) is required" >&2; exit 2; }
[[ "$models" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || {
  echo "fused.sh: --models must be a comma-separated list of model counts >= 1, not '$models'" >&2
  exit 2
}
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "fused.sh: --seed must be an integer >= 0, not '$seed'" >&2; exit 2; }
case "$optimizer" in
  sgd) base_lr=${base_lr:-0.1} ;;
  adam) base_lr=${base_lr:-0.001} ;;
  *) echo "fused.sh: --optimizer must be sgd or adam, not '$optimizer'" >&2; exit 2 ;;
esac
for bin in sophon-server sophon-train; do
  [[ -x "$build/$bin" ]] || {
    echo "fused.sh: $build/$bin is missing; build it: cmake --build $build --target $bin" >&2
    exit 1
  }
done
mkdir -p "$out"
rm -f "$out"/fused-*.json "$out"/fused-*.log "$out"/separate-*.json "$out"/separate-*.log \
  "$out/fused.csv"

# learning_rates B: the B per-model learning rates, comma-separated (BASE_LR / 2^k).
learning_rates() {
  "$py" -c 'import sys
b, base = int(sys.argv[1]), float(sys.argv[2])
print(",".join("%.6g" % (base / 2 ** k) for k in range(b)))' "$1" "$base_lr"
}

# One local storage server for every run.
log="$out/server.log"
"$build/sophon-server" --data="$data" --host=127.0.0.1 --port=0 --prep-workers="$prep_workers" \
  --stats-interval=0 >"$log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true' EXIT
address=""
for _ in $(seq 200); do
  address=$(sed -n 's/^listening on //p' "$log" | head -1)
  [[ -n "$address" ]] && break
  kill -0 "$server_pid" 2>/dev/null || { echo "fused.sh: sophon-server exited:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$address" ]] || { echo "fused.sh: sophon-server did not start" >&2; exit 1; }
echo "fused.sh: serving $data on $address (log $log)"
# Read the dataset once so that no run pays for a cold page cache.
find "$data" -type f -exec cat {} + >/dev/null

common=(--server="$address" --arch="$arch" --mode="$mode" --batch-size="$batch_size"
  --crop-size="$crop_size" --epochs="$epochs" --max-batches="$max_batches"
  --warmup-batches="$warmup_batches" --workers="$workers" --torch-threads="$torch_threads"
  --optimizer="$optimizer" --seed="$seed" --device=cpu --progress=false "${extra[@]}")

# train NAME ARGS...: one sophon-train run with the common flags; OUT/NAME.json and OUT/NAME.log.
train() {
  local name=$1; shift
  "$build/sophon-train" "$@" "${common[@]}" --report-json="$out/$name.json" \
    >"$out/$name.log" 2>&1 || {
    echo "fused.sh: sophon-train failed; the end of its log ($out/$name.log):" >&2
    tail -20 "$out/$name.log" >&2
    exit 1
  }
  grep -hE "epoch $((epochs - 1))[ :]" "$out/$name.log" | tail -1 | sed 's/^.*\] /    /; s/; local prep.*//'
}

echo "fused.sh: $arch, mode $mode, optimizer $optimizer, batch $batch_size, crop $crop_size," \
  "$epochs epoch(s) of $( (( max_batches > 0 )) && echo "$max_batches batches" || echo "the whole dataset")," \
  "$warmup_batches warm-up batches, $workers local workers, $prep_workers server prep workers," \
  "$torch_threads torch threads, seed $seed${extra[*]:+, extra flags: ${extra[*]}}"
IFS=, read -r -a model_counts <<<"$models"
for b in "${model_counts[@]}"; do
  lrs=$(learning_rates "$b")
  IFS=, read -r -a lr_list <<<"$lrs"
  echo "fused.sh: B=$b, learning rates $lrs"
  echo "  fused run (--fused-models=$b)"
  train "fused-$b" --fused-models="$b" --model-seed="$seed" --lr="$lrs"
  for (( k = 0; k < b; k++ )); do
    echo "  separate run $((k + 1))/$b (--model-seed=$((seed + k)) --lr=${lr_list[k]})"
    train "separate-$b-$k" --model-seed="$((seed + k))" --lr="${lr_list[k]}"
  done
done

echo
"$py" tools/bench/fused_report.py --out="$out" --models="$models"
