#!/usr/bin/env bash
# The server and cluster tests under ThreadSanitizer (not part of CI: the
# instrumented build takes long on 2 cores).
# Usage: tools/tsan.sh [test ...]   (default: the server and cluster tests below)
# Configures build-tsan/ with clang and -fsanitize=thread (every Sophon
# library instrumented; LibTorch targets are not built), builds the tests,
# runs each one and prints a summary: pass/fail and the ThreadSanitizer
# reports (SUMMARY lines, counted). Full logs: build-tsan/tsan-logs/TEST.log.
#
# The system gRPC, protobuf and Abseil are Debian's uninstrumented builds, so
# TSan cannot see the synchronisation inside them. absl::Mutex matters most
# (our code and gRPC lock with it): without an instrumented Abseil every
# absl::Mutex hand-over looks like a race. TSAN_LIBDIR may name a folder of
# TSan-instrumented libabsl_*.so built elsewhere under the installed sonames;
# it is put first on LD_LIBRARY_PATH. tools/tsan.supp silences what is left
# inside uninstrumented library code (each entry says why).
# Environment: JOBS (build jobs, default 2), TSAN_LIBDIR (above), BUILD_LOCK (a
# file to flock while building, e.g. /tmp/sophon-build.lock), TSAN_EXTRA
# (appended to TSAN_OPTIONS).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-tsan
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(server_limits_test stream_registry_test byte_budget_test prep_pool_test
         fetch_request_test hostile_files_test cluster_test metrics_cluster_test
         secure_transport_test load_run_test)
fi
command -v clang++ >/dev/null || { echo "tsan.sh: clang++ is required (apt-get install clang)" >&2; exit 1; }
locked() { if [ -n "${BUILD_LOCK:-}" ]; then flock "$BUILD_LOCK" "$@"; else "$@"; fi; }
mkdir -p "$build/tsan-logs"
start=$(date +%s)

libdir=${TSAN_LIBDIR:-}
if [ -z "$libdir" ]; then
  echo "tsan.sh: no TSAN_LIBDIR: absl::Mutex is not instrumented, expect false reports" >&2
fi

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
locked cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" "${launcher[@]}" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
locked cmake --build "$build" -j "${JOBS:-2}" --target "${tests[@]}"
built=$(date +%s)

summary=()
failed=0
for t in "${tests[@]}"; do
  log="$build/tsan-logs/$t.log"
  set +e
  LD_LIBRARY_PATH="${libdir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  TSAN_OPTIONS="suppressions=$PWD/tools/tsan.supp halt_on_error=0 second_deadlock_stack=1 exitcode=66 ${TSAN_EXTRA:-}" \
    "$build/$t" >"$log" 2>&1
  rc=$?
  set -e
  reports=$(grep -c '^WARNING: ThreadSanitizer' "$log" || true)
  passed=$(grep -q '^\[  PASSED  \]' "$log" && ! grep -q '^\[  FAILED  \]' "$log" && echo yes || echo no)
  [ "$passed" = yes ] && [ "$reports" -eq 0 ] || failed=1
  summary+=("$(printf '%-24s tests %-4s tsan reports %-3s exit %s' "$t" \
    "$([ "$passed" = yes ] && echo pass || echo FAIL)" "$reports" "$rc")")
done
echo "tsan.sh: built in $((built - start))s, ran in $(( $(date +%s) - built ))s" \
  "(absl::Mutex $([ -n "$libdir" ] && echo instrumented || echo NOT instrumented))"
for line in "${summary[@]}"; do echo "$line"; done
for t in "${tests[@]}"; do
  log="$build/tsan-logs/$t.log"
  grep -q '^SUMMARY: ThreadSanitizer' "$log" || continue
  echo "--- $t ($log)"
  grep '^SUMMARY: ThreadSanitizer' "$log" | sort | uniq -c | sort -rn
done
exit "$failed"
