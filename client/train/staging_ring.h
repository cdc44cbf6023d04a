// A ring of host staging buffers for asynchronous copies to a device: the
// batch after next is written into a buffer only once the copy that last read
// it has completed, so a non_blocking copy never reads a buffer being
// overwritten, while the next batch is written as the previous one crosses.
// LibTorch-free: the memory (pinned on CUDA) and the completion events come
// from the caller.
#ifndef SOPHON_CLIENT_TRAIN_STAGING_RING_H_
#define SOPHON_CLIENT_TRAIN_STAGING_RING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace sophon {

// Marks the end of one copy (a CUDA event recorded on the copy's stream).
class CopyEvent {
 public:
  virtual ~CopyEvent() = default;
  // Whether the copy has completed, without waiting.
  virtual bool Done() = 0;
  // Blocks until the copy has completed.
  virtual void Wait() = 0;
};

// Not thread-safe: the trainer's thread acquires, fills and releases.
class StagingRing {
 public:
  using Allocate = std::function<void*(size_t bytes)>;
  using Free = std::function<void(void* data, size_t bytes)>;

  // `slots` >= 1 buffers, each allocated on first use (and grown) with
  // `allocate`, given back with `release_memory`.
  StagingRing(int slots, Allocate allocate, Free release_memory);
  // Waits for every copy in flight, then frees the buffers.
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  struct Slot {
    void* data = nullptr;
    size_t bytes = 0;
    int index = 0;
  };
  // The next buffer in turn, with room for `bytes`: first waits for the copy
  // that last read it (if any).
  Slot Acquire(size_t bytes);
  // The copy that reads the buffer last acquired has been queued; `done`
  // completes when it has run. REQUIRES: a buffer acquired and not released.
  void Release(std::unique_ptr<CopyEvent> done);

  // Copies Acquire found still in flight and waited for.
  int64_t waits() const { return waits_; }
  int slots() const { return static_cast<int>(slots_.size()); }

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    std::unique_ptr<CopyEvent> in_flight;
  };
  std::vector<Buffer> slots_;
  Allocate allocate_;
  Free free_;
  int next_ = 0;
  int acquired_ = -1;  // the buffer handed out and not yet released
  int64_t waits_ = 0;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_STAGING_RING_H_
