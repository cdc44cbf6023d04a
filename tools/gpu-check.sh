#!/usr/bin/env bash
# tools/gpu-check.sh — builds Sophon against the machine's pip PyTorch and checks it on the GPU,
# one step at a time, each with a time limit and one line in a summary:
#   configure, build,    against PY's LibTorch (tools/build.sh --torch-from), the other
#                        dependencies Debian's: from a bundle folder (tools/gpu-bundle.sh made it
#                        beforehand with apt-get download) unpacked into PREFIX, for a machine
#                        with no apt and no network; or the machine's own (--dry-run)
#   pymodule             the Python module sophon._sophon for PY
#   tests                the LibTorch tests (on the CPU: they check the build against that LibTorch)
#   synthetic            sophon-train --synthetic-data: the training step alone (images/s)
#   e2e                  a loopback sophon-server and sophon-train --mode=smartoff (images/s)
#   python               examples/train.py with sophon.Loader on DEVICE
#   ranks                two sophon-train ranks (--dist-backend=auto: NCCL on cuda; not run with
#                        one GPU and a build without Gloo, as NCCL wants a GPU per rank)
#
# Usage: tools/gpu-check.sh [--dry-run] [--bundle=DIR]
#   --dry-run   on this machine's Debian packages and LibTorch, DEVICE=cpu, tiny models and
#               data, the build folder build/ (CI runs it: it checks the script, not a GPU)
#   --bundle=DIR  the folder tools/gpu-bundle.sh made (default: the folder this script is in,
#               when it holds deps/)
# Environment: PY (the Python with torch; default python3), DEVICE (cuda; cpu), OUT (results:
#   summary.txt and the logs; default gpu-check-out), PREFIX (where the bundle's packages are
#   unpacked; default /opt/sophon-deps, never /), BUILD_DIR (default build-pytorch; build with
#   --dry-run), JOBS, STEP_TIMEOUT (seconds a step may take; default 300), STEPS (a comma list
#   of the steps above; default all), DATA (a folder of class folders of JPEGs for e2e,
#   python and ranks; default: made with tools/make-dataset, which needs PIL and numpy).
# Exit status: 0 when every step that ran passed. The summary has a line per step:
#   step  exit  seconds  what it measured
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dry=0 bundle=""
for a in "$@"; do
  case $a in
    --dry-run) dry=1 ;;
    --bundle=*) bundle=${a#--bundle=} ;;
    *) echo "gpu-check: unknown argument '$a' (--dry-run, --bundle=DIR)" >&2; exit 2 ;;
  esac
done
PY=${PY:-python3}
if ((dry)); then
  DEVICE=${DEVICE:-cpu}
  PY=${PY_DRY:-/usr/bin/python3}
  BUILD_DIR=${BUILD_DIR:-build}
else
  DEVICE=${DEVICE:-cuda}
  BUILD_DIR=${BUILD_DIR:-build-pytorch}
fi
OUT=$(mkdir -p "${OUT:-gpu-check-out}" && cd "${OUT:-gpu-check-out}" && pwd)
PREFIX=${PREFIX:-/opt/sophon-deps}
JOBS=${JOBS:-$(nproc)}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
STEPS=${STEPS:-configure,build,pymodule,tests,synthetic,e2e,python,ranks}
if [[ $BUILD_DIR == /* ]]; then build=$BUILD_DIR; else build=$root/$BUILD_DIR; fi
summary=$OUT/summary.txt
failed=0
if ((dry)); then
  arch=tinycnn crop=64 batch=16 n=96 steps=4 workers=1 prep=1
else
  arch=${ARCH:-resnet50} crop=224 batch=${BATCH:-128} n=${N:-2048} steps=20 workers=8 prep=8
fi

echo "# gpu-check $(git rev-parse --short HEAD 2>/dev/null || echo '?') device=$DEVICE dry-run=$dry" \
  "py=$PY build=$build $(date -u '+%Y-%m-%d %H:%M:%S UTC')" >"$summary"
# The machine: GPU, compiler, CMake and what PY has.
{
  echo "# gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    2>/dev/null | head -1 || true)"
  echo "# $(g++ --version 2>/dev/null | head -1); $(cmake --version 2>/dev/null | head -1);" \
    "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"
  echo "# $("$PY" - 2>&1 <<'EOF' | tail -1
import importlib.util, sys
import torch
have = [m for m in ("torchvision", "PIL", "numpy", "pybind11") if importlib.util.find_spec(m)]
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (cuda {torch.version.cuda}, "
      f"available {torch.cuda.is_available()}), has {' '.join(have) or 'none of torchvision PIL numpy'}")
EOF
)"
} >>"$summary"

has() { [[ ",$STEPS," == *",$1,"* ]]; }
# step NAME TIMEOUT CMD...: runs CMD with its output in OUT/NAME.log; the line in the summary
# gets "figure" (set by the caller afterwards through note_figure) or the log's last line.
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc=0
  echo "== $name: $*" >&2
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1 </dev/null || rc=$?
  last_rc=$rc last_secs=$((SECONDS - t0))
  ((rc == 0)) || failed=1
  ((rc != 124)) || echo "(killed after ${limit}s)" >>"$OUT/$name.log"
}
record() {  # record NAME FIGURE
  printf '%-10s exit %-3s %5ss  %s\n' "$1" "$last_rc" "$last_secs" "$2" | tee -a "$summary" >&2
}
last_line() { grep -v '^\s*$' "$OUT/$1.log" | tail -1 | cut -c1-160; }

# ---------------------------------------------------------------- dependencies
cmake_args=()
if ((!dry)); then
  if [[ -z $bundle && -d $(dirname "$0")/deps ]]; then bundle=$(dirname "$0"); fi
  if [[ -n $bundle ]]; then
    [[ $PREFIX != / && -n $PREFIX ]] || { echo "gpu-check: PREFIX must not be /" >&2; exit 2; }
    mkdir -p "$PREFIX"
    for deb in "$bundle"/deps/*.deb; do dpkg-deb -x "$deb" "$PREFIX"; done
    # Links to absolute paths (libz.so -> /lib/...) point into the prefix.
    find "$PREFIX" -type l -lname '/*' | while read -r link; do
      target=$(readlink "$link")
      [[ $target == "$PREFIX"/* || ! -e $PREFIX$target ]] || ln -sfn "$PREFIX$target" "$link"
    done
    # Their CMake and pkg-config files name /usr: point them at the prefix. "/usr" alone is
    # an install prefix (libjpeg-turbo's, and the "/usr move" checks of Abseil, spdlog, fmt).
    grep -rlsE '/usr(/(lib|include|bin|share)|")' "$PREFIX/usr/lib/x86_64-linux-gnu/cmake" \
      "$PREFIX/usr/lib/cmake" "$PREFIX/usr/share/cmake" |
      xargs -r sed -i -E "s#(^|[^A-Za-z0-9_/.])/usr(/(lib|include|bin|share)|\")#\1$PREFIX/usr\2#g"
    for pc in "$PREFIX"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$PREFIX"/usr/share/pkgconfig/*.pc; do
      [[ -f $pc ]] && sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\1=$PREFIX/usr#" "$pc"
    done
    # gRPC's Findre2 needs pkg-config, which such a machine may lack, and Debian's re2 has
    # no CMake files: find its header and library under the prefix instead.
    cat >"$PREFIX/usr/lib/x86_64-linux-gnu/cmake/grpc/modules/Findre2.cmake" <<'EOF'
if(TARGET re2::re2)
  set(re2_FOUND TRUE)
  return()
endif()
find_path(re2_INCLUDE_DIR NAMES re2/re2.h)
find_library(re2_LIBRARY NAMES re2)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(re2 REQUIRED_VARS re2_LIBRARY re2_INCLUDE_DIR)
if(re2_FOUND)
  add_library(re2::re2 UNKNOWN IMPORTED)
  set_target_properties(re2::re2 PROPERTIES IMPORTED_LOCATION "${re2_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${re2_INCLUDE_DIR}")
endif()
EOF
    # prometheus-cpp's push component needs libcurl; Sophon uses only its core.
    sed -i 's/find_dependency(CURL)/find_package(CURL QUIET)/' \
      "$PREFIX/usr/lib/x86_64-linux-gnu/cmake/prometheus-cpp/prometheus-cpp-config.cmake"
    export LD_LIBRARY_PATH=$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$PREFIX/usr/bin:$PATH
    # Debian's jconfig.h (the jpeg62 API of the bundle's libjpeg) is in the multiarch folder,
    # which must win over the machine's own (often jpeg8's); Abseil 20220623's headers miss
    # <cstdint>, which newer g++ no longer brings in through other headers.
    cmake_args+=("-DCMAKE_PREFIX_PATH=$PREFIX/usr;$PREFIX/usr/lib/x86_64-linux-gnu/cmake"
      "-DProtobuf_PROTOC_EXECUTABLE=$PREFIX/usr/bin/protoc" "-DOPENSSL_ROOT_DIR=$PREFIX/usr"
      "-DZLIB_ROOT=$PREFIX/usr")
    export CXXFLAGS="-isystem $PREFIX/usr/include/x86_64-linux-gnu -include cstdint ${CXXFLAGS:-}"
    echo "gpu-check: $(ls "$bundle"/deps/*.deb | wc -l) packages of $bundle unpacked into $PREFIX" >&2
  fi
fi

# ---------------------------------------------------------------- configure and build
# Ninja where it is installed: it builds the targets below side by side, where make builds
# one target after the other (each of them a LibTorch test of a single slow file).
if ((!dry)) && command -v ninja >/dev/null && [[ ! -f $build/CMakeCache.txt ]]; then
  export CMAKE_GENERATOR=Ninja
fi
if has configure; then
  if ((dry)); then
    step configure "$STEP_TIMEOUT" env BUILD_DIR="$BUILD_DIR" CMAKE_ARGS="${cmake_args[*]}" \
      CONFIGURE_LOG="$OUT/cmake.log" tools/build.sh --target help
  else
    step configure "$STEP_TIMEOUT" env BUILD_DIR="$BUILD_DIR" CMAKE_ARGS="${cmake_args[*]}" \
      CONFIGURE_LOG="$OUT/cmake.log" tools/build.sh --torch-from="$PY" --target help
  fi
  record configure "c10d backends: $(sed -n 's/^SOPHON_C10D_BACKENDS:INTERNAL=//p' \
    "$build/CMakeCache.txt" 2>/dev/null); torch: $(sed -n 's/^Torch_DIR:[A-Z]*=//p' \
    "$build/CMakeCache.txt" 2>/dev/null); $(grep -ohE 'needs C\+\+20|Python module sophon._sophon for [^ ]+|no Python module' \
    "$OUT/cmake.log" 2>/dev/null | tr '\n' ' ')"
fi
targets=(sophon-server sophon-train process_group_test torch_step_test device_ops_test
  batch_upload_test grad_scaler_test trainer_test training_checkpoint_test checkpoint_file_test
  fused_optimizer_test backbone_test finetune_test features_test distributed_trainer_test distributed_training_test
  fused_models_test rank_heartbeat_test sophon-test-rank-helper)
if has build; then
  # Past a target that fails to compile: the summary then counts every error.
  keep_going=(-- -k)
  grep -qs '^CMAKE_GENERATOR:INTERNAL=Ninja' "$build/CMakeCache.txt" && keep_going=(-- -k 0)
  step build $((STEP_TIMEOUT * 3)) cmake --build "$build" -j "$JOBS" --target "${targets[@]}" \
    "${keep_going[@]}"
  record build "$(grep -cE 'error:' "$OUT/build.log") compile errors$(grep -m1 -E 'error:' \
    "$OUT/build.log" | sed 's/^.*\/\([^/]*:[0-9]*:[0-9]*: error:\)/; first: \1/' | cut -c1-140)"
  # The Python module for PY, on its own: a missing Python.h or pybind11 leaves the rest.
  step pymodule "$STEP_TIMEOUT" cmake --build "$build" -j "$JOBS" --target _sophon
  record pymodule "$(grep -m1 -E 'error|No rule|unknown target' "$OUT/pymodule.log" | cut -c1-140)"
fi

# ---------------------------------------------------------------- tests
if has tests; then
  re=$(IFS='|'; echo "${targets[*]:2}" | sed 's/|sophon-test-rank-helper//')
  step tests $((STEP_TIMEOUT * 2)) \
    ctest --test-dir "$build" --output-on-failure -j "$(( JOBS < 8 ? 2 : JOBS / 2 ))" -R "^($re)\$"
  record tests "$(grep -E 'tests passed' "$OUT/tests.log" | tail -1)$(
    grep -oE '\*\*\*[A-Za-z: ]+' "$OUT/tests.log" | sort | uniq -c | tr '\n' ' ')"
fi

train=$build/sophon-train
figure() {  # images/s of the last epoch in a --report-json file
  "$PY" - "$1" <<'EOF' 2>/dev/null || echo "no report"
import json, sys
e = json.load(open(sys.argv[1]))["epochs"][-1]
print(f"{e['images_per_second']:.1f} images/s, data wait {e['data_wait_seconds']:.2f} s of "
      f"{e['wall_seconds']:.2f} s (last epoch)")
EOF
}

if has synthetic; then
  step synthetic "$STEP_TIMEOUT" "$train" --synthetic-data --device="$DEVICE" --arch="$arch" \
    --crop-size="$crop" --batch-size="$batch" --synthetic-samples=$((batch * steps)) \
    --epochs=2 --progress=false --report-json="$OUT/synthetic.json"
  record synthetic "$(figure "$OUT/synthetic.json")"
fi

# A dataset and a loopback server for e2e, python and ranks.
server_pid=""
address=""
stop_server() { [[ -z $server_pid ]] || { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; }; }
trap stop_server EXIT
if has e2e || has python || has ranks; then
  data=${DATA:-$OUT/data}
  [[ -d $data ]] || "$PY" tools/make-dataset --source=synthetic --profile=imagenet --n="$n" \
    --classes=4 --seed=1 --out="$data" >"$OUT/dataset.log" 2>&1 ||
    echo "gpu-check: $PY could not make the dataset (it needs PIL and numpy; DATA=DIR serves" \
      "a folder of class folders instead): $(tail -1 "$OUT/dataset.log")" >&2
  "$build/sophon-server" --data="$data" --host=127.0.0.1 --port=0 --prep-workers="$prep" \
    >"$OUT/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    address=$(sed -n 's/^listening on //p' "$OUT/server.log" | head -1)
    [[ -n $address ]] && break
    sleep 0.1
  done
  [[ -n $address ]] || echo "gpu-check: sophon-server did not start: $(tail -2 "$OUT/server.log")" >&2
fi
if has e2e; then
  step e2e "$STEP_TIMEOUT" "$train" --server="$address" --mode=smartoff --device="$DEVICE" \
    --arch="$arch" --crop-size="$crop" --batch-size="$batch" --epochs=2 --workers="$workers" \
    --profile-folder="$OUT/profile" --progress=false --report-json="$OUT/e2e.json"
  record e2e "$(figure "$OUT/e2e.json")"
fi
if has python; then
  step python "$STEP_TIMEOUT" env PYTHONPATH="$build/python" "$PY" examples/train.py \
    --servers="$address" --device="$DEVICE" --arch=resnet18 --crop-size="$crop" \
    --batch-size="$batch" --max-batches="$steps" --workers="$workers" --mode=nooff
  record python "$(last_line python)"
fi
# NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), and a pip wheel brings no Gloo
# headers: with one GPU and no Gloo in the build, two ranks cannot run here.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if has ranks && [[ $DEVICE == cuda ]] && ((gpus < 2)) &&
  grep -qs 'SOPHON_C10D_BACKENDS:INTERNAL=gloo 0' "$build/CMakeCache.txt"; then
  last_rc=skip last_secs=0
  record ranks "not run: NCCL needs one GPU per rank, this machine has $gpus, and the build has no Gloo"
  STEPS=${STEPS//ranks/}
fi
if has ranks; then
  port=$(( 29500 + RANDOM % 1000 ))
  ranks() {
    local r pids=() rc=0
    for r in 0 1; do
      "$train" --server="$address" --mode=nooff --device="$DEVICE" --arch="$arch" \
        --crop-size="$crop" --batch-size="$batch" --epochs=1 --workers="$workers" \
        --world-size=2 --rank=$r --master-addr=127.0.0.1 --master-port="$port" \
        --dist-backend=auto --progress=false --report-json="$OUT/rank$r.json" &
      pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=$?; done
    return "$rc"
  }
  step ranks "$STEP_TIMEOUT" bash -c "$(declare -f ranks); address=$address DEVICE=$DEVICE \
    train=$train arch=$arch crop=$crop batch=$batch workers=$workers port=$port OUT=$OUT; ranks"
  record ranks "$(grep -ohE 'NCCL over [a-z ]+|Gloo over [a-z ]+' "$OUT/ranks.log" | head -1)"
fi
stop_server
echo "gpu-check: $(grep -c ' exit 0 ' "$summary") of $(grep -vc '^#' "$summary") steps passed;" \
  "summary $summary" >&2
exit "$failed"
