#include "client/loader/sampler.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(EpochOrderTest, IsADeterministicPermutationThatChangesPerEpoch) {
  const std::vector<uint64_t> a = EpochOrder(3, 0, 1000);
  EXPECT_EQ(a, EpochOrder(3, 0, 1000));
  EXPECT_NE(a, EpochOrder(3, 1, 1000));
  EXPECT_NE(a, EpochOrder(4, 0, 1000));
  std::vector<uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(sorted, expected);
  EXPECT_EQ(EpochOrder(3, 0, 5, /*shuffle=*/false), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
}

TEST(EpochOrderTest, RanksPartitionTheEpoch) {
  std::multiset<uint64_t> all;
  for (int r = 0; r < 3; ++r) {
    for (uint64_t id : EpochOrder(1, 2, 100, true, r, 3)) all.insert(id);
  }
  EXPECT_EQ(all.size(), 100u);
  EXPECT_EQ(std::set<uint64_t>(all.begin(), all.end()).size(), 100u);
}

}  // namespace
}  // namespace sophon
