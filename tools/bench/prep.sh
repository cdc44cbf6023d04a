#!/usr/bin/env bash
# Single-core throughput of the full training transform (decode +
# RandomResizedCrop + flip + to-tensor + normalize): Sophon's pipeline against
# the PyTorch reference (torchvision transforms on PIL) on the same real
# photographs in the same run, both pinned to one core.
#
# Usage: tools/bench/prep.sh [N_FILES] [CORE]
#   N_FILES  photographs to make (openimages profile), default 200
#   CORE     CPU core both runs are pinned to, default 1
# Environment: DATA=DIR to use an existing ImageFolder/JPEG directory;
#   ROUNDS (default 5) alternating rounds of both, REPEAT (default 3) passes per
#   torchvision run (Sophon's runs make 3x as many, to last about as long).
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-200}
core=${2:-1}
tools/install-deps.sh
tools/build.sh --target sophon-bench-prep >/dev/null

build=${BUILD_DIR:-build}
data=${DATA:-$build/bench-photos-openimages-$n}
if [[ ! -d "$data" ]]; then
  tools/make-dataset --source=photos --profile=openimages --n="$n" --classes=10 --seed=7 \
    --out="$data"
fi
repeat=${REPEAT:-3}
rounds=${ROUNDS:-5}

# The two pipelines alternate for $rounds rounds, so a burst of load from
# elsewhere on a shared machine hits both; the medians are compared.
sophon_wall=() sophon_cpu=() torch_wall=() torch_cpu=()
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r/$rounds: Sophon (libjpeg-turbo scaled region decode + area resize), core $core"
  # Sophon makes 3x the passes, so that both runs last about as long (each
  # pass is a new epoch: new crops of the same files).
  sophon_out=$(taskset -c "$core" "$build/sophon-bench-prep" --dir="$data" \
    --repeat="$((3 * repeat))")
  echo "$sophon_out"
  echo "== round $r/$rounds: PyTorch reference (torchvision on PIL), core $core"
  torch_out=$(taskset -c "$core" /usr/bin/python3 tools/bench/torchvision_prep.py --dir="$data" \
    --repeat="$repeat")
  echo "$torch_out"
  s_rate=$(sed -n 's/^RESULT images_per_s=\([0-9.]*\).*/\1/p' <<<"$sophon_out")
  t_rate=$(sed -n 's/^RESULT images_per_s=\([0-9.]*\).*/\1/p' <<<"$torch_out")
  # CPU-time rates are robust to other load on the core; wall rates are what a user sees.
  s_cpu_ms=$(sed -n 's/.*, \([0-9.]*\) ms CPU per image.*/\1/p' <<<"$sophon_out")
  t_cpu=$(sed -n 's/.*by CPU time \([0-9.]*\) images\/s.*/\1/p' <<<"$torch_out")
  if [[ -z "$s_rate" || -z "$t_rate" || -z "$s_cpu_ms" || -z "$t_cpu" ]]; then
    echo "prep.sh: could not read the results of one of the runs" >&2
    exit 1
  fi
  sophon_wall+=("$s_rate") sophon_cpu+=("$s_cpu_ms") torch_wall+=("$t_rate") torch_cpu+=("$t_cpu")
done
/usr/bin/python3 - "${sophon_wall[*]}" "${sophon_cpu[*]}" "${torch_wall[*]}" "${torch_cpu[*]}" <<'PY'
import statistics
import sys
s_wall, s_cpu_ms, t_wall, t_cpu = ([float(x) for x in a.split()] for a in sys.argv[1:])
s_cpu = [1e3 / ms for ms in s_cpu_ms]
for i, (a, b) in enumerate(zip(s_wall, t_wall), 1):
    print(f"round {i}: sophon {a:.1f} images/s, torchvision {b:.1f} images/s, ratio {a / b:.2f}x")
sw, tw = statistics.median(s_wall), statistics.median(t_wall)
sc, tc = statistics.median(s_cpu), statistics.median(t_cpu)
print(f"== single-core prep, wall (median of {len(s_wall)} rounds): sophon {sw:.1f} images/s, "
      f"torchvision {tw:.1f} images/s, ratio {sw / tw:.2f}x")
print(f"== single-core prep, CPU time (median of {len(s_cpu)} rounds): sophon {sc:.1f} images/s, "
      f"torchvision {tc:.1f} images/s, ratio {sc / tc:.2f}x (target >= 3x)")
PY
