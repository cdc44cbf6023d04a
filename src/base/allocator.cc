#include "sophon/base/allocator.h"

#include <malloc.h>

#include <atomic>

namespace sophon {
namespace {

constexpr int kLargeTrimThreshold = 1 << 30;
// While arena tops are let go: a heap's top above this goes back on a free.
constexpr int kTopTrimThreshold = 4 << 20;

std::atomic<bool> configured{false};  // ConfigureAllocatorForLargeBuffers ran
std::atomic<bool> tops_open{false};   // the threshold is kTopTrimThreshold

}  // namespace

void ConfigureAllocatorForLargeBuffers(int max_arenas) {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, kLargeTrimThreshold);
  if (max_arenas > 0) mallopt(M_ARENA_MAX, max_arenas);
  configured = true;
}

bool ReleaseFreeMemory() {
  const bool released = malloc_trim(0) != 0;
  // malloc_trim leaves the top of every arena but the main one: glibc trims
  // those only on a large free, and only once the top passes the trim
  // threshold (1 GB here, above the 64 MB such a heap can have). Until
  // KeepArenaTops(), the next large free in each arena gives its top back.
  if (configured && !tops_open.exchange(true)) mallopt(M_TRIM_THRESHOLD, kTopTrimThreshold);
  return released;
}

void KeepArenaTops() {
  if (tops_open.exchange(false)) mallopt(M_TRIM_THRESHOLD, kLargeTrimThreshold);
}

}  // namespace sophon
