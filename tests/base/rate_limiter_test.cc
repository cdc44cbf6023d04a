#include "sophon/base/rate_limiter.h"

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(RateLimiterTest, AllowsABurstPerPeriodAndCountsTheRest) {
  RateLimiter limiter(2, absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Allow(t0, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_TRUE(limiter.Allow(t0 + absl::Seconds(1), &suppressed));
  EXPECT_FALSE(limiter.Allow(t0 + absl::Seconds(2), &suppressed));
  EXPECT_FALSE(limiter.Allow(t0 + absl::Seconds(3), &suppressed));
  EXPECT_TRUE(limiter.Allow(t0 + absl::Seconds(10), &suppressed));
  EXPECT_EQ(suppressed, 2u);
  EXPECT_TRUE(limiter.Allow(t0 + absl::Seconds(11), &suppressed));
  EXPECT_EQ(suppressed, 0u);
}

}  // namespace
}  // namespace sophon
