#!/usr/bin/env bash
# Single-core throughput of the full training transform (decode +
# RandomResizedCrop + flip + to-tensor + normalize): Sophon's pipeline against
# the PyTorch reference (torchvision transforms on PIL) on the same real
# photographs in the same run, both pinned to one core.
#
# Usage: tools/bench/prep.sh [N_FILES] [CORE]
#   N_FILES  photographs to make (openimages profile), default 200
#   CORE     CPU core both runs are pinned to, default 1
# Environment: DATA=DIR to use an existing ImageFolder/JPEG directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-200}
core=${2:-1}
tools/install-deps.sh --bench
tools/build.sh --target sophon-bench-prep >/dev/null

build=${BUILD_DIR:-build}
data=${DATA:-$build/bench-photos-openimages-$n}
if [[ ! -d "$data" ]]; then
  tools/make-dataset --source=photos --profile=openimages --n="$n" --classes=10 --seed=7 \
    --out="$data"
fi
repeat=${REPEAT:-3}

echo "== Sophon (libjpeg-turbo scaled region decode + area resize), core $core"
sophon_out=$(taskset -c "$core" "$build/sophon-bench-prep" --dir="$data" --repeat="$repeat")
echo "$sophon_out"
echo "== PyTorch reference (torchvision 0.14 on PIL), core $core"
torch_out=$(taskset -c "$core" /usr/bin/python3 tools/bench/torchvision_prep.py --dir="$data" \
  --repeat="$repeat")
echo "$torch_out"

sophon_rate=$(sed -n 's/^RESULT images_per_s=\([0-9.]*\).*/\1/p' <<<"$sophon_out")
torch_rate=$(sed -n 's/^RESULT images_per_s=\([0-9.]*\).*/\1/p' <<<"$torch_out")
# CPU-time rates are robust to other load on the core; wall rates are what a user sees.
sophon_cpu_ms=$(sed -n 's/.*, \([0-9.]*\) ms CPU per image.*/\1/p' <<<"$sophon_out")
torch_cpu_rate=$(sed -n 's/.*by CPU time \([0-9.]*\) images\/s.*/\1/p' <<<"$torch_out")
if [[ -z "$sophon_rate" || -z "$torch_rate" || -z "$sophon_cpu_ms" || -z "$torch_cpu_rate" ]]; then
  echo "prep.sh: could not read the results of one of the runs" >&2
  exit 1
fi
/usr/bin/python3 - "$sophon_rate" "$torch_rate" "$sophon_cpu_ms" "$torch_cpu_rate" <<'PY'
import sys
s, t, s_ms, t_cpu = map(float, sys.argv[1:])
s_cpu = 1e3 / s_ms
print(f"== single-core prep, wall: sophon {s:.1f} images/s, torchvision {t:.1f} images/s, "
      f"ratio {s / t:.2f}x")
print(f"== single-core prep, CPU time: sophon {s_cpu:.1f} images/s, torchvision {t_cpu:.1f} "
      f"images/s, ratio {s_cpu / t_cpu:.2f}x (target >= 3x)")
PY
