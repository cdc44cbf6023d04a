#!/usr/bin/env bash
# tools/bench/transfer.sh — a transfer-learning run on the CPU, end to end.
#
#   1. pretrains a backbone (--arch, default resnet18 at crop 64) on dataset A with sophon-train;
#   2. serves dataset B with sophon-server --backbone=<that checkpoint>;
#   3. fine-tunes a new head for B's classes with the storage node extracting the features
#      (--mode=featuresoff) and with this node extracting them from the files (--mode=nooff),
#      and, as a baseline, a head on an untrained backbone of the same architecture;
#   4. prints each run's last-epoch loss and top-1, bytes per image and epoch time as a
#      Markdown table, and checks that the two extraction sides gave the same loss curve.
#
#   tools/bench/transfer.sh                      # A: build/bench-photos-openimages-1000, B: made
#   EPOCHS=8 FT_EPOCHS=6 tools/bench/transfer.sh
#
# Environment: DATA_A, DATA_B (made with tools/make-dataset when absent), ARCH, CROP, EPOCHS
# (pretraining), FT_EPOCHS, BATCH, OUT (default build/bench-transfer), BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
out=${OUT:-build/bench-transfer}
data_a=${DATA_A:-build/bench-photos-openimages-1000}
data_b=${DATA_B:-build/bench-transfer-b}
arch=${ARCH:-resnet18}
crop=${CROP:-64}
epochs=${EPOCHS:-6}
ft_epochs=${FT_EPOCHS:-5}
batch=${BATCH:-32}
mkdir -p "$out"
log() { echo "bench/transfer: $*" >&2; }

[[ -x $build/sophon-server && -x $build/sophon-train ]] ||
  tools/build.sh --target sophon-server sophon-train
if [[ ! -d $data_a ]]; then
  log "making dataset A in $data_a"
  tools/make-dataset --source=photos --profile=openimages --n=1000 --classes=10 --out="$data_a"
fi
if [[ ! -d $data_b ]]; then
  log "making dataset B in $data_b"
  tools/make-dataset --source=photos --profile=imagenet --n=600 --classes=4 --seed=3 \
    --out="$data_b"
fi

server_pid=""
stop_server() { [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=""; }
trap stop_server EXIT
start_server() {  # DATA LOG [flags...]
  local data=$1 logf=$2
  shift 2
  "$build/sophon-server" --data="$data" --host=127.0.0.1 --port=0 --prep-workers=1 \
    --stats-interval=0 "$@" >"$logf" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    address=$(grep -o 'listening on [^ ]*' "$logf" | awk '{print $3}' || true)
    [[ -n $address ]] && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$logf" >&2; return 1; }
    sleep 0.1
  done
  log "sophon-server did not start"; cat "$logf" >&2; return 1
}
train() {  # NAME [flags...]: one sophon-train run, its JSON report in $out/NAME.json
  local name=$1
  shift
  log "run $name: sophon-train $*"
  "$build/sophon-train" --server="$address" --crop-size="$crop" --batch-size="$batch" \
    --workers=2 --progress=false --report-json="$out/$name.json" "$@" >"$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log" >&2; return 1; }
}

# 1. Pretrain on A; and an untrained backbone of the same architecture.
start_server "$data_a" "$out/server-a.log"
train pretrain --arch="$arch" --mode=nooff --epochs="$epochs" --lr=0.05 --save="$out/backbone.pt"
train untrained --arch="$arch" --mode=nooff --epochs=1 --max-batches=1 --lr=1e-9 \
  --save="$out/untrained.pt"
stop_server

# 2-3. Fine-tune a head for B on features from the storage node, from this node, and on the
# untrained backbone's features.
ft=(--finetune --augment=none --epochs="$ft_epochs" --lr=0.05 --feature-cache-bytes=100000000)
start_server "$data_b" "$out/server-b.log" --backbone="$out/backbone.pt"
train featuresoff "${ft[@]}" --init-checkpoint="$out/backbone.pt" --mode=featuresoff
train nooff "${ft[@]}" --init-checkpoint="$out/backbone.pt" --mode=nooff
stop_server
start_server "$data_b" "$out/server-b0.log" --backbone="$out/untrained.pt"
train untrained-featuresoff "${ft[@]}" --init-checkpoint="$out/untrained.pt" --mode=featuresoff
stop_server

/usr/bin/python3 - "$out" "$data_a" "$data_b" "$arch" "$crop" "$epochs" "$ft_epochs" <<'EOF'
import json, os, sys
out, data_a, data_b, arch, crop, epochs, ft_epochs = sys.argv[1:]
def load(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)
rows = [("pretrain on A", "pretrain"), ("head on B, features from the storage node", "featuresoff"),
        ("head on B, features extracted here", "nooff"),
        ("head on B, untrained backbone", "untrained-featuresoff")]
print(f"Backbone {arch} at crop {crop}: pretrained {epochs} epochs on {data_a}; "
      f"heads fine-tuned {ft_epochs} epochs on {data_b}.\n")
print("| run | epochs | last epoch loss | last epoch top-1 | epoch 0 KB/image | epoch 0 s | last epoch s | samples from the feature cache (last epoch) |")
print("|---|---|---|---|---|---|---|---|")
for label, name in rows:
    e = load(name)["epochs"]
    first, last = e[0], e[-1]
    print(f"| {label} | {len(e)} | {last['mean_loss']:.4f} | {last['top1']:.3f} | "
          f"{first['bytes_per_image'] / 1e3:.1f} | {first['wall_seconds']:.2f} | {last['wall_seconds']:.2f} | "
          f"{last.get('feature_cache_hits', 0)} |")
a = [x["mean_loss"] for x in load("featuresoff")["epochs"]]
b = [x["mean_loss"] for x in load("nooff")["epochs"]]
same = all(abs(x - y) <= 1e-3 * max(1.0, abs(y)) for x, y in zip(a, b)) and len(a) == len(b)
print(f"\n{'PASS' if same else 'FAIL'}: the storage node's and this node's features give the same "
      f"loss curve (per epoch: {', '.join(f'{x:.4f}' for x in a)} against "
      f"{', '.join(f'{y:.4f}' for y in b)})")
sys.exit(0 if same else 1)
EOF
