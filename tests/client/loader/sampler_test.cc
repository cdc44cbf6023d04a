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

TEST(RankSliceTest, RanksGetEqualSharesPaddedByWrappingAsDistributedSampler) {
  const std::vector<uint64_t> order = EpochOrder(5, 0, 10);
  EXPECT_EQ(PaddedEpochLength(10, 1), 10);
  EXPECT_EQ(PaddedEpochLength(10, 3), 12);
  EXPECT_EQ(PaddedEpochLength(10, 4), 12);
  EXPECT_EQ(PaddedEpochLength(0, 3), 0);
  std::multiset<uint64_t> all;
  for (int r = 0; r < 3; ++r) {
    const std::vector<uint64_t> mine = RankSlice(order, r, 3, 0);
    EXPECT_EQ(mine.size(), 4u) << "rank " << r;
    all.insert(mine.begin(), mine.end());
  }
  // Every sample once, and the first two of the order once more (the padding).
  EXPECT_EQ(all.size(), 12u);
  for (uint64_t id = 0; id < 10; ++id) {
    const size_t expected = id == order[0] || id == order[1] ? 2u : 1u;
    EXPECT_EQ(all.count(id), expected) << "id " << id;
  }
  // One rank: the order itself.
  EXPECT_EQ(RankSlice(order, 0, 1, 0), order);
}

TEST(RankSliceTest, StepsCoverTheSameGlobalBatchesWhateverTheWorldSize) {
  const std::vector<uint64_t> order = EpochOrder(9, 3, 48);
  const int global_batch = 12;
  for (int world : {1, 2, 3, 4}) {
    const int b = global_batch / world;
    std::vector<std::vector<uint64_t>> slices;
    for (int r = 0; r < world; ++r) slices.push_back(RankSlice(order, r, world, 0));
    for (int step = 0; step < 4; ++step) {
      std::set<uint64_t> ranks_union;
      for (int r = 0; r < world; ++r) {
        ranks_union.insert(slices[r].begin() + step * b, slices[r].begin() + (step + 1) * b);
      }
      const std::set<uint64_t> global(order.begin() + step * global_batch,
                                      order.begin() + (step + 1) * global_batch);
      EXPECT_EQ(ranks_union, global) << "world " << world << " step " << step;
    }
  }
}

TEST(RankSliceTest, ResumingAtACursorWithAnotherWorldSizeSeesTheRestExactlyOnce) {
  const std::vector<uint64_t> order = EpochOrder(2, 1, 40);
  const int64_t global_batch = 8;
  for (const auto& [before, after] : std::vector<std::pair<int, int>>{{2, 1}, {1, 2}, {4, 2}}) {
    const int64_t cursor = 2 * global_batch;  // two steps done
    std::multiset<uint64_t> seen;
    for (int r = 0; r < before; ++r) {
      const std::vector<uint64_t> mine = RankSlice(order, r, before, 0);
      seen.insert(mine.begin(), mine.begin() + cursor / before);
    }
    for (int r = 0; r < after; ++r) {
      const std::vector<uint64_t> mine = RankSlice(order, r, after, cursor);
      seen.insert(mine.begin(), mine.end());
    }
    EXPECT_EQ(seen.size(), 40u) << before << " -> " << after;
    EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), 40u) << before << " -> " << after;
  }
  EXPECT_TRUE(RankSlice(order, 0, 2, 40).empty());
}

}  // namespace
}  // namespace sophon
