#!/usr/bin/env bash
# tools/bench/infer.sh — offline inference images/s with the whole model on the storage node
# (sophon-infer --mode=predictionsoff), its backbone there and its head here (featuresoff),
# all of it on the inference node (nooff) and per sample (smartoff), over a rate-limited link
# (tools/netlink: network namespaces, tc tbf, one core per side). Needs root.
#
#   tools/bench/infer.sh                                   # after tools/bench/transfer.sh
#   MODEL=ckpt.pt DATA=DIR RATES=100,500 CROP=128 MODES=predictionsoff,nooff tools/bench/infer.sh
#
# Prints a Markdown table and checks that every mode wrote the same predictions.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
model=${MODEL:-build/bench-transfer/backbone.pt}
data=${DATA:-build/bench-transfer-b}
rates=${RATES:-100,500}
crop=${CROP:-128}
out=${OUT:-build/bench-infer}
modes=${MODES:-predictionsoff,featuresoff,nooff,smartoff}
[[ -f $model ]] || { echo "bench/infer: no $model (run tools/bench/transfer.sh first, or give MODEL)" >&2; exit 1; }
[[ -x $build/sophon-infer ]] || tools/build.sh --target sophon-server sophon-infer
mkdir -p "$out"
model=$(realpath "$model")
data=$(realpath "$data")
echo "| mode | Mbit/s | images | seconds | images/s | bytes/image | samples by stage |"
echo "|---|---:|---:|---:|---:|---:|---|"
for rate in ${rates//,/ }; do
  first=""
  for mode in ${modes//,/ }; do
    log="$out/$mode-$rate.log"
    # smartoff profiles the dataset once (its profile folder is kept across rates).
    tools/netlink run --rate="${rate}mbit" --measure=0 --train-bin="$build/sophon-infer" -- \
      --data="$data" --prep-workers=1 --backbone="$model" -- \
      --model="$model" --mode="$mode" --crop-size="$crop" --workers=1 --torch-threads=1 \
      --profile-folder="$out/profile" \
      --progress=false --out="$out/$mode-$rate.csv" >"$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
    line=$(grep -o '[0-9]* images in [0-9.]* s: [0-9.]* images/s, [0-9.]* MB received ([0-9]* bytes/image; [^)]*' "$log")
    read -r images _ _ seconds _ ips _ _ _ _ bytes _ <<<"${line//(/ }"
    echo "| $mode | $rate | $images | $seconds | $ips | $bytes | ${line#*bytes/image; } |"
    if [[ -z $first ]]; then
      first=$mode
    elif ! cmp -s "$out/$first-$rate.csv" "$out/$mode-$rate.csv"; then
      echo "FAIL: $mode and $first wrote different predictions at $rate Mbit/s" >&2
      exit 1
    fi
  done
  echo "PASS: the same predictions from every mode at $rate Mbit/s" >&2
done
