#include "sophon/base/allocator.h"

#include <malloc.h>

namespace sophon {

void ConfigureAllocatorForLargeBuffers(int max_arenas) {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (max_arenas > 0) mallopt(M_ARENA_MAX, max_arenas);
}

bool ReleaseFreeMemory() { return malloc_trim(0) != 0; }

}  // namespace sophon
