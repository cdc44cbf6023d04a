#!/usr/bin/env bash
# Memory kept after a burst of large buffers, and what ReleaseFreeMemory()
# returns: glibc's defaults against ConfigureAllocatorForLargeBuffers() (what
# sophon-server and sophon-train use), and the latter with capped arenas, in
# one run (sophon-bench-memory, tools/bench/memory_return.cc).
#
# Usage: tools/bench/memory_return.sh [THREADS] [BURST_MB]
#   THREADS   threads allocating buffers (the server's prep workers), default 8
#   BURST_MB  MB held at the peak of the burst, default 2048
# "after free" is what the server kept before this change; "after release" is
# what it keeps once idle now (MemoryReleaser calls ReleaseFreeMemory()). The
# "us per buffer" columns are the CPU cost of allocating, filling and freeing
# one 602 KB tensor while streaming (and in bursts of --window-mb).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-8}
burst=${2:-2048}
tools/build.sh --target sophon-bench-memory >/dev/null
bench=${BUILD_DIR:-build}/sophon-bench-memory
args=(--threads="$threads" --burst-mb="$burst" --steady-mb=2048)
"$bench" --allocator=glibc "${args[@]}"
"$bench" --allocator=large-buffers "${args[@]}"
for n in 2 1; do
  printf 'arena_max=%s: ' "$n"
  GLIBC_TUNABLES=glibc.malloc.arena_max=$n "$bench" --allocator=large-buffers "${args[@]}"
done
