#!/usr/bin/env bash
# The server and cluster tests under ThreadSanitizer (not part of CI: the
# instrumented build takes long on 2 cores).
# Usage: tools/tsan.sh [test ...]   (default: the server and cluster tests below)
# Configures build-tsan/ with clang and -fsanitize=thread (every Sophon
# library instrumented; LibTorch targets are not built), builds the tests,
# runs each one and prints a summary: pass/fail and the ThreadSanitizer
# reports (SUMMARY lines, counted). Full logs: build-tsan/tsan-logs/TEST.log.
#
# The system gRPC, protobuf and Abseil are not instrumented, so TSan cannot
# see the synchronisation inside them. absl::Mutex matters most (our code and
# gRPC lock with it): with ABSL_SOURCE set to an abseil-cpp checkout of the
# installed version (20220623: `git clone -b 20220623.1
# https://github.com/abseil/abseil-cpp`), the script compiles Abseil's
# synchronization library (absl::Mutex, CondVar, Notification) and the base
# libraries under it from that checkout against the installed headers,
# instrumented, and runs the tests with them ahead of the system ones on
# LD_LIBRARY_PATH. Without it every absl::Mutex hand-over looks
# like a race. tools/tsan.supp silences what is left inside uninstrumented
# library code (each entry says why).
# Environment: JOBS (build jobs, default 2), ABSL_SOURCE (above), BUILD_LOCK (a
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

# Instrumented Abseil synchronisation (see above), each library under the
# installed one's soname: absl::Mutex and what it stands on (SpinLock, the
# per-thread identities and the arena they are allocated from), and absl::Now
# (an inline SpinLock user: TSan aborts when an instrumented SpinLock meets
# an uninstrumented caller).
libdir=""
absl_lib() {  # name sources...: builds $libdir/libabsl_NAME.so.VERSION
  local name=$1 so soname objs=() src obj
  shift
  so=$(basename "$(readlink -f "/usr/lib/x86_64-linux-gnu/libabsl_$name.so")")
  soname=${so%.*.*}  # libabsl_NAME.so.20220623
  for src in "$@"; do
    obj="$libdir/obj/${src//\//_}.o"
    # The installed headers (not the checkout's): the same options and inline namespace.
    locked clang++ -std=c++17 -O1 -g -fPIC -fsanitize=thread -c "$ABSL_SOURCE/absl/$src.cc" -o "$obj"
    objs+=("$obj")
  done
  locked clang++ -shared -fsanitize=thread -Wl,-soname,"$soname" -o "$libdir/$soname" "${objs[@]}" \
    -L"$libdir" -Wl,--as-needed -labsl_base -labsl_spinlock_wait -labsl_raw_logging_internal -labsl_malloc_internal \
    -labsl_graphcycles_internal -labsl_stacktrace -labsl_symbolize -labsl_time -labsl_time_zone \
    -labsl_int128 -labsl_strings -lpthread
  ln -sf "$soname" "$libdir/libabsl_$name.so"
}
if [ -n "${ABSL_SOURCE:-}" ]; then
  libdir="$build/absl-tsan"
  mkdir -p "$libdir/obj"
  absl_lib spinlock_wait base/internal/spinlock_wait
  absl_lib base base/internal/cycleclock base/internal/spinlock base/internal/sysinfo \
    base/internal/thread_identity base/internal/unscaledcycleclock
  absl_lib malloc_internal base/internal/low_level_alloc
  # absl::Now takes a SpinLock inline: its callers must be annotated as SpinLock is.
  absl_lib time time/civil_time time/clock time/duration time/format time/time
  absl_lib graphcycles_internal synchronization/internal/graphcycles
  absl_lib synchronization synchronization/barrier synchronization/blocking_counter \
    synchronization/internal/create_thread_identity synchronization/internal/per_thread_sem \
    synchronization/internal/waiter synchronization/notification synchronization/mutex
  libdir=$(readlink -f "$libdir")
else
  echo "tsan.sh: ABSL_SOURCE not set: absl::Mutex is not instrumented, expect false reports" >&2
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
