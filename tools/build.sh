#!/usr/bin/env bash
# Configures and builds Sophon into build/ (BUILD_DIR overrides).
#
# Usage: tools/build.sh [--torch-from=PYTHON] [cmake --build arguments...]
#   --torch-from=PYTHON  build against the LibTorch of the PyTorch that PYTHON imports (a pip
#                        wheel in a virtual environment: torch.utils.cmake_prefix_path), and
#                        the Python module for PYTHON; the build goes to build-pytorch/ unless
#                        BUILD_DIR is set. Gloo is used where its headers are found (a wheel has
#                        none: ranks then need --device=cuda and NCCL), NCCL where that LibTorch
#                        is a CUDA build. The other dependencies are still Debian's.
# Environment: BUILD_DIR, JOBS (default nproc), BUILD_TYPE (default RelWithDebInfo),
#   CMAKE_ARGS (more cmake configure arguments), CONFIGURE_LOG (a file for cmake's configure
#   output; default none).
set -euo pipefail
cd "$(dirname "$0")/.."
torch_python=""
if [[ ${1:-} == --torch-from=* ]]; then
  torch_python=${1#--torch-from=}
  shift
fi
build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
args=(-DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}")
if [[ -n $torch_python ]]; then
  build_dir=${BUILD_DIR:-build-pytorch}
  command -v "$torch_python" >/dev/null ||
    { echo "build.sh: --torch-from=$torch_python: no such interpreter" >&2; exit 2; }
  prefix=$("$torch_python" -c 'import torch, torch.utils; print(torch.utils.cmake_prefix_path)') ||
    { echo "build.sh: --torch-from=$torch_python: that Python cannot import torch" >&2; exit 2; }
  if [[ ! -f $prefix/Torch/TorchConfig.cmake ]]; then
    echo "build.sh: --torch-from=$torch_python: its torch has no LibTorch CMake files" \
      "($prefix/Torch/TorchConfig.cmake is missing; pip's torch wheels have them," \
      "Debian's python3-torch does not: use Debian's libtorch-dev without --torch-from)" >&2
    exit 2
  fi
  python_path=$(command -v "$torch_python")
  echo "build.sh: LibTorch of $python_path ($prefix) into $build_dir" >&2
  args+=("-DTorch_DIR=$prefix/Torch" "-DSOPHON_PYTHON=$python_path"
    # pybind11 adds -flto to the module otherwise, which ld.lld cannot read from GCC's objects.
    -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF)
  # A CUDA wheel's LibTorch configuration looks for the CUDA toolkit and cuDNN: nvcc where
  # it is installed, cuDNN from the wheel's nvidia-cudnn package beside torch.
  nvcc=$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; } || true)
  if [[ -n $nvcc ]]; then
    args+=("-DCMAKE_CUDA_COMPILER=$nvcc" "-DCUDAToolkit_ROOT=$(dirname "$(dirname "$nvcc")")")
  fi
  nvidia=$("$torch_python" -c 'import os, torch; print(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia"))')
  cudnn_h=$(find "$nvidia" -maxdepth 4 -name cudnn.h 2>/dev/null | head -1 || true)
  cudnn_so=$(find "$nvidia" -maxdepth 4 -name 'libcudnn.so*' 2>/dev/null | sort | head -1 || true)
  if [[ -n $cudnn_h && -n $cudnn_so ]]; then
    args+=("-DCUDNN_INCLUDE_PATH=$(dirname "$cudnn_h")" "-DCUDNN_LIBRARY_PATH=$cudnn_so")
  fi
fi
# shellcheck disable=SC2206  # CMAKE_ARGS is split on purpose
args+=(${CMAKE_ARGS:-})
cmake -S . -B "$build_dir" "${args[@]}" >"${CONFIGURE_LOG:-/dev/null}"
cmake --build "$build_dir" -j "$jobs" "$@"
