#include "sophon/base/rate_limiter.h"

namespace sophon {

bool RateLimiter::Allow(absl::Time now, uint64_t* suppressed) {
  absl::MutexLock lock(&mu_);
  if (now - window_start_ >= period_) {
    window_start_ = now;
    allowed_in_window_ = 0;
  }
  if (allowed_in_window_ >= burst_) {
    ++suppressed_;
    return false;
  }
  ++allowed_in_window_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace sophon
