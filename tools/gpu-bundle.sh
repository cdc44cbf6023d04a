#!/usr/bin/env bash
# tools/gpu-bundle.sh OUTDIR — makes the folder tools/gpu-check.sh needs on a GPU machine that
# has a pip PyTorch, g++, CMake and a Python, but no apt and no network:
#   OUTDIR/deps/*.deb   Sophon's Debian dependencies but LibTorch (apt-get download: fetched,
#                       never installed), which gpu-check.sh unpacks into a private prefix
#   OUTDIR/sophon/      this checkout at HEAD (git archive), with tools/gpu-check.sh in it
# Then, on the GPU machine: `bash OUTDIR/sophon/tools/gpu-check.sh --bundle=OUTDIR` (with
# PY=the Python that has torch). Run here, on Debian 12, with network access to Debian's archive.
set -euo pipefail
out=${1:?usage: tools/gpu-bundle.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$out/deps" "$out/sophon"
out=$(cd "$out" && pwd)
# Headers and libraries (with their runtime packages: the machine has none of them).
pkgs=(
  libabsl-dev libabsl20220623 libc-ares-dev libc-ares2 libgrpc++-dev libgrpc++1.51 libgrpc-dev
  libgrpc29 protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libprotobuf32 libprotoc32
  libprotobuf-lite32 libre2-dev libre2-9 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libgtest-dev libgmock-dev libjpeg62-turbo-dev libjpeg62-turbo libturbojpeg0-dev libturbojpeg0
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcivetweb-dev libcivetweb1 civetweb libssl-dev libssl3 zlib1g-dev zlib1g pybind11-dev
)
# No libgloo-dev: its headers are another gloo than the one compiled into a wheel's
# libtorch_cpu.so. Without them the build has no Gloo backend: ranks use NCCL on CUDA.
(cd "$out/deps" && apt-get download "${pkgs[@]}")
git archive --format=tar HEAD | tar -x -C "$out/sophon"
git rev-parse HEAD >"$out/sophon/COMMIT"
echo "gpu-bundle: $(ls "$out/deps" | wc -l) packages and the source of $(git rev-parse --short HEAD)" \
  "in $out ($(du -sh "$out" | cut -f1))"
