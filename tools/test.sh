#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
start=$(date +%s)
tools/build.sh
echo "test.sh: build took $(( $(date +%s) - start ))s" >&2
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${JOBS:-$(nproc)}"
