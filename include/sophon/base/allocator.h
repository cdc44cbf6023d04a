// Process-wide allocator settings for programs that move large buffers.
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
void ConfigureAllocatorForLargeBuffers();

}  // namespace sophon

#endif  // SOPHON_BASE_ALLOCATOR_H_
