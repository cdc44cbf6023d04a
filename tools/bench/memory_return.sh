#!/usr/bin/env bash
# Memory kept after a burst of large buffers, and what ReleaseFreeMemory()
# returns: glibc's defaults against ConfigureAllocatorForLargeBuffers() with
# glibc's arenas (sophon-train, and sophon-server before issue 11), 4 arenas
# (sophon-server now) and 2, in one run (sophon-bench-memory,
# tools/bench/memory_return.cc).
#
# Usage: tools/bench/memory_return.sh [THREADS] [BURST_MB]
#   THREADS   threads allocating buffers (the server's prep workers), default 8
#   BURST_MB  MB held at the peak of the burst, default 2048
# The server kept "after free" of the arenas=0 row before issue 11; it now keeps
# "after release" of the arenas=4 row once idle (MemoryReleaser calls
# ReleaseFreeMemory()). The
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
for arenas in 0 4 2; do  # 0: the client's setting (glibc's arenas); 4: sophon-server's
  "$bench" --allocator=large-buffers --max-arenas="$arenas" "${args[@]}"
done
