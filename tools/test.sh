#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
start=$(date +%s)
tools/build.sh
echo "test.sh: build took $(( $(date +%s) - start ))s" >&2
cd "${BUILD_DIR:-build}"
start=$(date +%s)
# CTEST_ARGS: more ctest arguments (-R REGEX, -E REGEX, -L LABEL, ...).
rc=0
ctest --output-on-failure -j "${JOBS:-$(nproc)}" ${CTEST_ARGS:-} || rc=$?
echo "test.sh: tests took $(( $(date +%s) - start ))s" >&2
exit "$rc"
