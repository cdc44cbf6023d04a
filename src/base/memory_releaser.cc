#include "sophon/base/memory_releaser.h"

#include <malloc.h>

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
  if (busy_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MemoryReleaseOptions.busy_interval must be > 0 (inf: only when idle), got ",
                     absl::FormatDuration(busy_interval)));
  }
  if (busy_slack_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MemoryReleaseOptions.busy_slack_bytes must be >= 0, got ", busy_slack_bytes));
  }
  return absl::OkStatus();
}

void MemoryReleasePolicy::OnBusy(absl::Time now) {
  pending_ = false;
  busy_ = true;
  // The checks keep their own schedule: a server that goes busy and idle
  // between every two batches is checked every busy_interval all the same.
  if (!checking_ && options_.busy_interval != absl::InfiniteDuration()) {
    checking_ = true;
    next_check_ = std::max(now, last_check_ + options_.busy_interval);
  }
}

void MemoryReleasePolicy::OnIdle(absl::Time now) {
  busy_ = false;
  if (pending_) return;
  pending_ = true;
  idle_since_ = now;
}

absl::Time MemoryReleasePolicy::DueAt() const {
  absl::Time due = checking_ ? next_check_ : absl::InfiniteFuture();
  if (pending_ && options_.idle_delay != absl::InfiniteDuration()) {
    due = std::min(due, std::max(idle_since_ + options_.idle_delay,
                                 last_release_ + options_.min_interval));
  }
  return due;
}

bool MemoryReleasePolicy::TakeDue(absl::Time now, int64_t free_bytes) {
  if (now < DueAt()) return false;
  const bool idle_due = pending_ && options_.idle_delay != absl::InfiniteDuration() &&
                        now >= std::max(idle_since_ + options_.idle_delay,
                                        last_release_ + options_.min_interval);
  if (!idle_due) {
    // A check: the next one only while the server still works (idle, the
    // idle release takes over).
    last_check_ = now;
    next_check_ = now + options_.busy_interval;
    checking_ = busy_;
    if (free_bytes < free_after_release_ + options_.busy_slack_bytes) {
      // Less freed than the slack since the last release (what it left free
      // may have been reused since: the reference follows it down).
      free_after_release_ = std::min(free_after_release_, free_bytes);
      return false;
    }
  }
  pending_ = false;
  last_release_ = now;
  free_after_release_ = free_bytes;
  ++releases_;
  return true;
}

void MemoryReleasePolicy::Released(int64_t free_bytes) { free_after_release_ = free_bytes; }

int64_t FreeHeapBytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.fordblks);
}

MemoryReleaser::MemoryReleaser(const MemoryReleaseOptions& options, ReleaseFn release,
                               FreeBytesFn free_bytes)
    : release_(release ? std::move(release) : [] { ReleaseFreeMemory(); }),
      free_bytes_(free_bytes ? std::move(free_bytes) : [] { return FreeHeapBytes(); }),
      policy_(options) {
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
  policy_.OnBusy(absl::Now());
  changed_.Signal();
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

double MemoryReleaser::release_seconds() const {
  absl::MutexLock lock(&mu_);
  return release_seconds_;
}

void MemoryReleaser::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (absl::Now() >= policy_.DueAt()) {
      mu_.Unlock();
      // The arenas' tops were let go until this check (ReleaseFreeMemory).
      KeepArenaTops();
      const int64_t free_before = free_bytes_();  // takes the arenas' locks: not under ours
      mu_.Lock();
      if (stop_) break;
      if (!policy_.TakeDue(absl::Now(), free_before)) continue;
      mu_.Unlock();
      const absl::Time start = absl::Now();
      release_();
      const int64_t free_after = free_bytes_();
      const absl::Duration took = absl::Now() - start;
      mu_.Lock();
      policy_.Released(free_after);
      release_seconds_ += absl::ToDoubleSeconds(took);
      continue;
    }
    // Woken by OnIdle, OnBusy, the stop, or when a release or check falls due.
    changed_.WaitWithDeadline(&mu_, policy_.DueAt());
  }
}

}  // namespace sophon
