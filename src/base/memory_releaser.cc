#include "sophon/base/memory_releaser.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sophon/base/allocator.h"

namespace sophon {

absl::Status MemoryReleaseOptions::Validate() const {
  if (idle_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MemoryReleaseOptions.idle_delay must be >= 0, got ", absl::FormatDuration(idle_delay)));
  }
  if (min_interval < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MemoryReleaseOptions.min_interval must be >= 0, got ",
                     absl::FormatDuration(min_interval)));
  }
  return absl::OkStatus();
}

void MemoryReleasePolicy::OnIdle(absl::Time now) {
  if (pending_) return;
  pending_ = true;
  idle_since_ = now;
}

absl::Time MemoryReleasePolicy::DueAt() const {
  if (!pending_ || options_.idle_delay == absl::InfiniteDuration()) {
    return absl::InfiniteFuture();
  }
  return std::max(idle_since_ + options_.idle_delay, last_release_ + options_.min_interval);
}

bool MemoryReleasePolicy::TakeDue(absl::Time now) {
  if (now < DueAt()) return false;
  pending_ = false;
  last_release_ = now;
  ++releases_;
  return true;
}

MemoryReleaser::MemoryReleaser(const MemoryReleaseOptions& options, ReleaseFn release)
    : release_(release ? std::move(release) : [] { ReleaseFreeMemory(); }), policy_(options) {
  thread_ = std::thread([this] { Loop(); });
}

MemoryReleaser::~MemoryReleaser() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.Signal();
  }
  thread_.join();
}

void MemoryReleaser::OnBusy() {
  absl::MutexLock lock(&mu_);
  policy_.OnBusy();
}

void MemoryReleaser::OnIdle() {
  absl::MutexLock lock(&mu_);
  policy_.OnIdle(absl::Now());
  changed_.Signal();
}

int64_t MemoryReleaser::releases() const {
  absl::MutexLock lock(&mu_);
  return policy_.releases();
}

void MemoryReleaser::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (policy_.TakeDue(absl::Now())) {
      mu_.Unlock();
      release_();
      mu_.Lock();
      continue;
    }
    // Woken by OnIdle, by the stop, or when the pending release falls due.
    changed_.WaitWithDeadline(&mu_, policy_.DueAt());
  }
}

}  // namespace sophon
