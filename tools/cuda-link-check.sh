#!/usr/bin/env bash
# Compiles and links Sophon's LibTorch programs and tests against a CUDA build of LibTorch,
# on a machine without a GPU: configures BUILD (an existing build folder, whose targets that
# do not include LibTorch are reused) with the CUDA LibTorch that CMake finds, builds
# everything, and checks that the programs and the LibTorch tests link libtorch_cuda.so and
# that data-parallel ranks have NCCL. tools/debian13.sh cuda runs it in Debian 13's CUDA
# layer; it also runs on any machine with a CUDA LibTorch (a GPU machine, before running).
#
# Usage: tools/cuda-link-check.sh BUILD   (JOBS=N: parallel compile jobs, default nproc;
#        SOPHON_GLOO=OFF|AUTO|ON: Gloo for ranks, default OFF as in a pip CUDA wheel)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tools/cuda-link-check.sh BUILD_DIR}
jobs=${JOBS:-$(nproc)}
die() { echo "cuda-link-check: $*" >&2; exit 1; }

start=$SECONDS
# -U: the Gloo and NCCL files that an earlier configure found may belong to another LibTorch.
# SOPHON_GLOO=OFF by default: the shape of a pip CUDA wheel (no Gloo headers; ranks over NCCL),
# so that the Gloo-less branches are compiled here while the CPU builds compile Gloo's.
# SOPHON_GLOO=AUTO or ON: with Gloo where its headers are found.
gloo=${SOPHON_GLOO:-OFF}
cmake -S . -B "$build" -UGLOO_INCLUDE_DIR -UGLOO_LIBRARY -UNCCL_INCLUDE_DIR -DSOPHON_GLOO="$gloo" \
  >"$build/cuda-configure.log" 2>&1 ||
  { tail -30 "$build/cuda-configure.log" >&2; die "configure failed (log: $build/cuda-configure.log)"; }
cuda=$(grep -hE 'PyTorch: CUDA detected|c10d backends' "$build/cuda-configure.log" || true)
echo "$cuda" | sed 's/^/cuda-link-check: /' >&2
grep -q 'PyTorch: CUDA detected' <<<"$cuda" || die "the LibTorch CMake found is not a CUDA build"
grep -q 'nccl 1' <<<"$cuda" || die "no NCCL backend in this configuration"
if [[ $gloo == OFF ]]; then
  grep -q 'gloo 0' <<<"$cuda" || die "SOPHON_GLOO=OFF but the configuration has Gloo"
fi

# Everything: what includes LibTorch is rebuilt for CUDA, the rest is up to date.
make -C "$build" -j"$jobs" >"$build/cuda-build.log" 2>&1 ||
  { grep -E 'error|Error' "$build/cuda-build.log" | head -30 >&2
    die "build failed (log: $build/cuda-build.log)"; }
rebuilt=$(grep -c 'Building CXX object' "$build/cuda-build.log" || true)

# From CMake's own dependency information (link.txt): every program and test that links
# sophon_torch (the training node's LibTorch code, which runs on the GPU) must need
# libtorch_cuda.so; those that link only sophon_model (sophon-server --backbone runs on the
# storage node's CPU) must have been built against the CUDA LibTorch, libtorch_cuda.so or not.
checked=0
model_only=0
missing=()
for link in "$build"/CMakeFiles/*.dir/link.txt; do
  grep -qE 'libsophon_(model|torch)\.a' "$link" || continue
  target=$(basename "$(dirname "$link")" .dir)
  exe=$build/$target
  [[ -x $exe ]] || continue  # a library's link.txt
  [[ $exe -nt $build/cuda-configure.log ]] || missing+=("$target (not linked again)")
  if grep -q 'libsophon_torch\.a' "$link"; then
    readelf -d "$exe" | grep -q 'NEEDED.*libtorch_cuda\.so' ||
      missing+=("$target (no libtorch_cuda.so)")
    checked=$((checked + 1))
  else
    model_only=$((model_only + 1))
  fi
done
((checked > 0)) || die "no program links sophon_torch"
((${#missing[@]} == 0)) || die "not linked against the CUDA LibTorch: ${missing[*]}"
for prog in sophon-train sophon-infer sophon-profile-gpu; do
  [[ -x $build/$prog ]] || die "$prog was not built"
done
echo "cuda-link-check: $checked programs and tests of sophon_torch linking libtorch_cuda.so," \
  "$model_only of sophon_model linked again ($rebuilt files compiled) in $((SECONDS - start)) s" >&2
