#include "sophon/base/allocator.h"

#include <malloc.h>

namespace sophon {

void ConfigureAllocatorForLargeBuffers() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

bool ReleaseFreeMemory() { return malloc_trim(0) != 0; }

}  // namespace sophon
