// Gives freed heap memory back to the system when a server goes idle, at most
// once per interval, and while it works when enough has been freed since the
// last release (an attack that ended while training went on).
#ifndef SOPHON_BASE_MEMORY_RELEASER_H_
#define SOPHON_BASE_MEMORY_RELEASER_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sophon {

struct MemoryReleaseOptions {
  // Idle this long before releasing: a pause between two requests of a busy
  // client costs nothing. InfiniteDuration() never releases.
  absl::Duration idle_delay = absl::Seconds(1);
  // At most one release per interval, however often the server goes idle.
  absl::Duration min_interval = absl::Seconds(10);
  // While the server works: every busy_interval, a release if the heap's free
  // bytes (FreeHeapBytes) grew by busy_slack_bytes or more since the last
  // release, so that memory freed while training never lets the server go
  // idle goes back within about this interval. InfiniteDuration(): only when
  // idle.
  absl::Duration busy_interval = absl::Seconds(3);
  int64_t busy_slack_bytes = int64_t{16} << 20;

  absl::Status Validate() const;
};

// The policy alone: no thread, no clock (the caller passes the time). A release
// is due once per idle period, idle_delay after it began, and no sooner than
// min_interval after the previous release.
class MemoryReleasePolicy {
 public:
  explicit MemoryReleasePolicy(const MemoryReleaseOptions& options) : options_(options) {}

  // Work started (in-flight work went from zero to more) at `now`: a pending
  // release is dropped, and the busy checks start.
  void OnBusy(absl::Time now);
  // In-flight work drained to zero at `now`. Repeated calls keep the first time.
  void OnIdle(absl::Time now);
  // When the pending release is due, or the next busy check; InfiniteFuture()
  // when neither is.
  absl::Time DueAt() const;
  // True if a release is due at `now` (idle: its delay passed; busy: a check
  // is due and the heap's free bytes, `free_bytes`, grew by the slack since
  // the last release): the caller releases, and it counts as done at `now`.
  bool TakeDue(absl::Time now, int64_t free_bytes = 0);
  // The heap's free bytes after the release (what the next busy check
  // compares with).
  void Released(int64_t free_bytes);
  int64_t releases() const { return releases_; }

 private:
  const MemoryReleaseOptions options_;
  bool pending_ = false;
  bool busy_ = false;
  bool checking_ = false;  // a busy check is scheduled at next_check_
  absl::Time idle_since_;
  absl::Time next_check_ = absl::InfiniteFuture();
  absl::Time last_check_ = absl::InfinitePast();
  absl::Time last_release_ = absl::InfinitePast();
  int64_t free_after_release_ = 0;
  int64_t releases_ = 0;
};

// Free bytes in the heap's arenas (mallinfo2's fordblks): memory malloc holds
// for reuse, resident or not.
int64_t FreeHeapBytes();

// The policy on its own thread, which sleeps until a release is due and calls
// `release` (ReleaseFreeMemory by default) outside any lock. OnBusy and OnIdle
// are cheap (a mutex and a signal), for the server's hot path.
class MemoryReleaser {
 public:
  using ReleaseFn = std::function<void()>;
  using FreeBytesFn = std::function<int64_t()>;
  // `free_bytes` (FreeHeapBytes by default) is read at each busy check.
  explicit MemoryReleaser(const MemoryReleaseOptions& options, ReleaseFn release = nullptr,
                          FreeBytesFn free_bytes = nullptr);
  // Joins the thread; releases nothing more.
  ~MemoryReleaser();
  MemoryReleaser(const MemoryReleaser&) = delete;
  MemoryReleaser& operator=(const MemoryReleaser&) = delete;

  void OnBusy();
  void OnIdle();
  int64_t releases() const;
  // Wall seconds spent in the releases (and the free-byte reads after them).
  double release_seconds() const;

 private:
  void Loop();

  const ReleaseFn release_;
  const FreeBytesFn free_bytes_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  MemoryReleasePolicy policy_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  double release_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace sophon

#endif  // SOPHON_BASE_MEMORY_RELEASER_H_
