#include "sophon/base/allocator.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"

namespace sophon {
namespace {

constexpr int kLargeTrimThreshold = 1 << 30;
// While arena tops are let go: a heap's top above this goes back on a free.
constexpr int kTopTrimThreshold = 4 << 20;

std::atomic<bool> configured{false};  // ConfigureAllocatorForLargeBuffers ran
std::atomic<int> arenas{0};           // its arena cap (0: glibc's)
std::atomic<bool> tops_open{false};   // the threshold is kTopTrimThreshold

// A block large enough that its free makes glibc look at its arena's top
// (FASTBIN_CONSOLIDATION_THRESHOLD, 64 KiB), small enough to come from any
// arena's top or bins.
constexpr size_t kProbeBytes = 256 << 10;

// Frees a large block in every arena, so that glibc trims each non-main
// arena's top down to the (lowered) trim threshold: it does that only in a
// free of 64 KiB or more in that arena, never in malloc_trim. A thread's
// arena is glibc's choice: at the arena cap it hands each new thread an arena
// no thread uses, else the next one in turn, so `probes` threads alive at
// once (twice the cap) land on every arena.
void FreeInEveryArena(int probes) {
  absl::Barrier* attached = new absl::Barrier(probes);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(probes));
  for (int i = 0; i < probes; ++i) {
    threads.emplace_back([attached] {
      void* p = std::malloc(kProbeBytes);
      if (p != nullptr) static_cast<volatile char*>(p)[0] = 1;  // not optimized away
      // Every probe holds its arena until all have one, so that no two share
      // an arena that a finished probe left free.
      if (attached->Block()) delete attached;
      std::free(p);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace

void ConfigureAllocatorForLargeBuffers(int max_arenas) {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, kLargeTrimThreshold);
  if (max_arenas > 0) mallopt(M_ARENA_MAX, max_arenas);
  arenas = max_arenas;
  configured = true;
}

bool ReleaseFreeMemory() {
  const bool released = malloc_trim(0) != 0;
  // malloc_trim leaves the top of every arena but the main one: glibc trims
  // those only on a large free, and only once the top passes the trim
  // threshold (1 GB here, above the 64 MB such a heap can have). Until
  // KeepArenaTops(), the next large free in each arena gives its top back.
  if (configured && !tops_open.exchange(true)) mallopt(M_TRIM_THRESHOLD, kTopTrimThreshold);
  // And the tops of the arenas whose last large free came before this release
  // (an attack's buffers freed at once, then nothing more in their arenas).
  if (configured && arenas > 0) FreeInEveryArena(2 * arenas);
  return released;
}

void KeepArenaTops() {
  if (tops_open.exchange(false)) mallopt(M_TRIM_THRESHOLD, kLargeTrimThreshold);
}

}  // namespace sophon
