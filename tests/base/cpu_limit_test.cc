#include "sophon/base/cpu_limit.h"

#include <cmath>
#include <thread>

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(CpuLimitTest, ParsesCgroupV2CpuMax) {
  EXPECT_DOUBLE_EQ(internal::CpuMaxQuota("50000 100000\n"), 0.5);
  EXPECT_DOUBLE_EQ(internal::CpuMaxQuota("250000 100000"), 2.5);
  EXPECT_TRUE(std::isinf(internal::CpuMaxQuota("max 100000\n")));
  EXPECT_TRUE(std::isinf(internal::CpuMaxQuota("")));  // no such file
  EXPECT_TRUE(std::isinf(internal::CpuMaxQuota("garbage")));
}

TEST(CpuLimitTest, ParsesCgroupV1CfsQuota) {
  EXPECT_DOUBLE_EQ(internal::CfsQuota(50000, 100000), 0.5);
  EXPECT_TRUE(std::isinf(internal::CfsQuota(-1, 100000)));  // no quota
  EXPECT_TRUE(std::isinf(internal::CfsQuota(50000, -1)));   // unreadable period
}

TEST(CpuLimitTest, ThisProcessHasSomeCpuAndNoMoreThanTheMachine) {
  const double limit = ProcessCpuLimit();
  EXPECT_GE(limit, 0.01);
  EXPECT_LE(limit, std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace sophon
