// Process-wide allocator settings for programs that move large buffers, and
// giving freed memory back to the system.
#ifndef SOPHON_BASE_ALLOCATOR_H_
#define SOPHON_BASE_ALLOCATOR_H_

namespace sophon {

// The storage server's cap on malloc arenas (see below). glibc gives each
// thread that allocates an arena (up to 8 per core) of 64 MB heaps, and keeps
// the top of an arena's first heap (up to 64 MB) until a free there leaves more
// than the trim threshold, which malloc_trim does not change: so a server keeps
// up to 64 MB per arena after a burst even once ReleaseFreeMemory() ran. With 4
// arenas that rest is at most 3 x 64 MB (the main arena's top is released).
// tools/bench/memory_return.sh, 2 GB bursts on a 2-core machine: over 32
// threads glibc's 16 arenas kept 1344 MB after the free and 817 MB after the
// release, 4 arenas 24 MB; over 4 or 8 threads, 260 / 515 MB (none of it
// released) against 196 MB. The cost (4 threads, 3 runs, noisy shared cores):
// CPU per 602 KB buffer 29-38 us against 34-40 while streaming, 80-82 us
// against 65-71 in bursts (lock waits).
inline constexpr int kServerMaxArenas = 4;

// Sophon allocates many large blocks (batches of 64 x 602 KB tensors, 100-600
// KB payloads). glibc serves blocks above its mmap threshold (at most 32 MB,
// lower at first) with a fresh mmap and returns them on free, so every batch
// pays page faults and zeroing in the kernel: in a 2,000-image nooff epoch
// that was over 3 s of system time on one core. This raises the threshold to
// 256 MB and the trim threshold to 1 GB so freed blocks are reused, and caps
// the arenas at `max_arenas` when it is above 0 (0: glibc's 8 per core). Call
// once at the start of main(), before other threads start.
//
// Freed blocks then stay resident after a burst until ReleaseFreeMemory(),
// which MemoryReleaser (memory_releaser.h) calls when a server goes idle. A
// trim threshold low enough to return the arenas' tops at each free (32 MB or
// less) returns nearly everything at once, but cost 95-110 us of CPU per
// buffer in bursts against 65-71 (heaps shrunk and faulted in again; system
// time 49-68 us against 1-7), so it stays at 1 GB and the arena cap bounds
// the rest instead (sophon-bench-memory --trim-threshold-mb=32).
void ConfigureAllocatorForLargeBuffers(int max_arenas = 0);

// Returns the free memory of every malloc arena to the system (malloc_trim(0):
// free pages inside the heaps are madvise(DONTNEED)ed, the main heap's top is
// unmapped). Takes each arena's lock in turn, so allocations wait meanwhile
// (about 60 ms for 1.5 GB free): call it when the process is idle. Returns
// true if any memory was released. After ConfigureAllocatorForLargeBuffers,
// it also lowers the trim threshold to 4 MB until KeepArenaTops(), so that
// the next large free in each of the other arenas gives that arena's top
// back too (malloc_trim does not), and with an arena cap it makes that free
// happen at once: short-lived threads, twice the cap, alive together so that
// glibc gives them every arena, each free a 256 KiB block (a few hundred
// microseconds in all).
bool ReleaseFreeMemory();

// Ends what ReleaseFreeMemory started: the trim threshold back at 1 GB, so
// that a burst does not trim and fault in its heaps at every free. Cheap when
// there is nothing to end.
void KeepArenaTops();

}  // namespace sophon

#endif  // SOPHON_BASE_ALLOCATOR_H_
