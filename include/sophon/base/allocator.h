// Process-wide allocator settings for programs that move large buffers, and
// giving freed memory back to the system.
#ifndef SOPHON_BASE_ALLOCATOR_H_
#define SOPHON_BASE_ALLOCATOR_H_

namespace sophon {

// Sophon allocates many large blocks (batches of 64 x 602 KB tensors, 100-600
// KB payloads). glibc serves blocks above its mmap threshold (at most 32 MB,
// lower at first) with a fresh mmap and returns them on free, so every batch
// pays page faults and zeroing in the kernel: in a 2,000-image nooff epoch
// that was over 3 s of system time on one core. This raises the threshold to
// 256 MB and the trim threshold to 1 GB so freed blocks are reused. Call
// once at the start of main(), before other threads start.
//
// Freed blocks then stay resident after a burst (a 2 GB burst over 8 threads
// kept 515 MB to 1.5 GB) until ReleaseFreeMemory(); MemoryReleaser
// (memory_releaser.h) calls it when a server goes idle. What even that keeps:
// glibc gives each allocating thread an arena of 64 MB heaps, and the top of an
// arena's first heap is returned only above the trim threshold, never by
// malloc_trim: up to 64 MB per thread that allocated large buffers (100 MB
// after a 2 GB burst over 4 threads, 350-515 MB over 8). A trim threshold low
// enough to return those (<= 32 MB) cost system time in every streaming
// benchmark run (heaps shrunk and grown again), so it stays at 1 GB;
// GLIBC_TUNABLES=glibc.malloc.arena_max=N caps the arenas, and with them that
// rest, for an operator who wants it (tools/bench/memory_return.sh).
void ConfigureAllocatorForLargeBuffers();

// Returns the free memory of every malloc arena to the system (malloc_trim(0):
// free pages inside the heaps are madvise(DONTNEED)ed, the main heap's top is
// unmapped). Takes each arena's lock in turn, so allocations wait meanwhile
// (about 60 ms for 1.5 GB free): call it when the process is idle. Returns
// true if any memory was released.
bool ReleaseFreeMemory();

}  // namespace sophon

#endif  // SOPHON_BASE_ALLOCATOR_H_
