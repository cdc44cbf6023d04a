// Gives freed heap memory back to the system when a server goes idle, at most
// once per interval, without slowing it down while it works.
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

  absl::Status Validate() const;
};

// The policy alone: no thread, no clock (the caller passes the time). A release
// is due once per idle period, idle_delay after it began, and no sooner than
// min_interval after the previous release.
class MemoryReleasePolicy {
 public:
  explicit MemoryReleasePolicy(const MemoryReleaseOptions& options) : options_(options) {}

  // Work started (in-flight work went from zero to more): a pending release is dropped.
  void OnBusy() { pending_ = false; }
  // In-flight work drained to zero at `now`. Repeated calls keep the first time.
  void OnIdle(absl::Time now);
  // When the pending release is due; InfiniteFuture() when none is.
  absl::Time DueAt() const;
  // True if a release is due at `now`: the caller releases, and it counts as
  // done at `now` (the next one needs another idle period).
  bool TakeDue(absl::Time now);
  int64_t releases() const { return releases_; }

 private:
  const MemoryReleaseOptions options_;
  bool pending_ = false;
  absl::Time idle_since_;
  absl::Time last_release_ = absl::InfinitePast();
  int64_t releases_ = 0;
};

// The policy on its own thread, which sleeps until a release is due and calls
// `release` (ReleaseFreeMemory by default) outside any lock. OnBusy and OnIdle
// are cheap (a mutex and a signal), for the server's hot path.
class MemoryReleaser {
 public:
  using ReleaseFn = std::function<void()>;
  explicit MemoryReleaser(const MemoryReleaseOptions& options, ReleaseFn release = nullptr);
  // Joins the thread; releases nothing more.
  ~MemoryReleaser();
  MemoryReleaser(const MemoryReleaser&) = delete;
  MemoryReleaser& operator=(const MemoryReleaser&) = delete;

  void OnBusy();
  void OnIdle();
  int64_t releases() const;

 private:
  void Loop();

  const ReleaseFn release_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  MemoryReleasePolicy policy_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sophon

#endif  // SOPHON_BASE_MEMORY_RELEASER_H_
