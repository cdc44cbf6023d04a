#!/usr/bin/env bash
# Installs the Debian packages Sophon builds and runs with, if any is missing.
# Usage: tools/install-deps.sh
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  clang  # the thread-safety analysis test (tools/thread_safety.sh)
  lld  # links the programs and tests several times faster than GNU ld
  iproute2  # the netlink tests: network namespaces, veth pairs, tbf (tools/netlink)
  valgrind  # the memcheck_* tests (tools/memcheck.sh); skipped without it
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev libssl-dev openssl
  zlib1g-dev libjpeg62-turbo-dev libturbojpeg0-dev libabsl-dev libspdlog-dev libgtest-dev libgmock-dev
  libtorch-dev libopenblas0-pthread prometheus-cpp-dev
  libgloo-dev  # the headers of LibTorch's c10d Gloo backend (data-parallel ranks)
  python3 python3-pil python3-numpy python3-matplotlib
  python3-torchvision  # PyTorch reference benchmark; the test that loads checkpoints into torchvision
  pybind11-dev python3-dev python3-pytest  # the Python module sophon and its tests
  python3-venv python3-pip python3-setuptools python3-wheel  # pip install . (offline, in a venv)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if (( ${#missing[@]} == 0 )); then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then sudo_cmd=(sudo); else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2
