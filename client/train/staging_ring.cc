#include "client/train/staging_ring.h"

#include <utility>

namespace sophon {

StagingRing::StagingRing(int slots, Allocate allocate, Free release_memory)
    : slots_(static_cast<size_t>(slots < 1 ? 1 : slots)),
      allocate_(std::move(allocate)),
      free_(std::move(release_memory)) {}

StagingRing::~StagingRing() {
  for (Buffer& b : slots_) {
    if (b.in_flight != nullptr) b.in_flight->Wait();
    if (b.data != nullptr) free_(b.data, b.bytes);
  }
}

StagingRing::Slot StagingRing::Acquire(size_t bytes) {
  const int index = next_;
  next_ = (next_ + 1) % static_cast<int>(slots_.size());
  Buffer& b = slots_[index];
  if (b.in_flight != nullptr) {
    if (!b.in_flight->Done()) {
      b.in_flight->Wait();
      ++waits_;
    }
    b.in_flight.reset();
  }
  if (b.bytes < bytes) {
    if (b.data != nullptr) free_(b.data, b.bytes);
    b.data = allocate_(bytes);
    b.bytes = bytes;
  }
  acquired_ = index;
  return Slot{b.data, b.bytes, index};
}

void StagingRing::Release(std::unique_ptr<CopyEvent> done) {
  if (acquired_ < 0) return;
  slots_[acquired_].in_flight = std::move(done);
  acquired_ = -1;
}

}  // namespace sophon
