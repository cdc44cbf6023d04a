// Lets at most `burst` events through per `period` and counts the rest, so a
// flood of bad requests costs a few log lines, not a full disk.
#ifndef SOPHON_BASE_RATE_LIMITER_H_
#define SOPHON_BASE_RATE_LIMITER_H_

#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sophon {

class RateLimiter {
 public:
  // REQUIRES: burst >= 1, period > 0.
  RateLimiter(int burst, absl::Duration period) : burst_(burst), period_(period) {}

  // True if the event at `now` may be logged; then *suppressed holds how many
  // events were refused since the last one allowed (0 if none). Thread-safe.
  bool Allow(absl::Time now, uint64_t* suppressed);

 private:
  const int burst_;
  const absl::Duration period_;
  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int allowed_in_window_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sophon

#endif  // SOPHON_BASE_RATE_LIMITER_H_
