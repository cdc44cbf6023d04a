#!/usr/bin/env bash
# A short libFuzzer run of one Sophon fuzz target (not part of CI).
# Usage: tools/fuzz.sh [target] [seconds]   (default: decode 60)
#   target: the suffix of a sophon-fuzz-TARGET program (fuzz/TARGET_fuzzer.cc),
#           seeded from fuzz/corpus/TARGET.
# Configures build-fuzz/ with clang (-DSOPHON_FUZZ=ON: AddressSanitizer,
# UBSan, coverage), builds the target, fuzzes a copy of the seed corpus for
# the given time and prints executions, coverage and findings. Findings
# (crash-*, leak-*, timeout-*, oom-*) are kept in build-fuzz/findings/TARGET/.
# Environment: JOBS (build jobs, default 2), FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-decode}"
seconds="${2:-60}"
build=build-fuzz
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is required (apt-get install clang)" >&2; exit 1; }
[ -d "fuzz/corpus/$target" ] || { echo "fuzz.sh: no seed corpus fuzz/corpus/$target" >&2; exit 1; }

mkdir -p "$build"
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$build" -DSOPHON_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
cmake --build "$build" --target "sophon-fuzz-$target" -j "${JOBS:-2}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "fuzz/corpus/$target" "$work/corpus"
findings="$build/findings/$target"
mkdir -p "$findings"
before=$(ls "$findings" | wc -l)
log="$build/fuzz-$target.log"
set +e
# shellcheck disable=SC2086
"$build/sophon-fuzz-$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 \
  -print_final_stats=1 -artifact_prefix="$findings/" ${FUZZ_ARGS:-} \
  "$work/corpus" >"$log" 2>&1
rc=$?
set -e
after=$(ls "$findings" | wc -l)
echo "fuzz.sh: sophon-fuzz-$target for ${seconds}s, exit $rc (log $log)"
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log" || true
grep -E '#[0-9]+.*(DONE|pulse|NEW|REDUCE).*cov:' "$log" | tail -1 || true
echo "corpus: $(ls "$work/corpus" | wc -l) inputs after the run ($(ls "fuzz/corpus/$target" | wc -l) seeds)"
echo "findings: $((after - before)) new in $findings"
if [ "$after" -gt "$before" ]; then
  ls -t "$findings" | head -n $((after - before))
  grep -E 'ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|runtime error|invariant violated' "$log" | head -5
  exit 1
fi
exit "$rc"
