#include "client/loader/sampler.h"

#include <algorithm>
#include <map>
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

// Ranks of `before` run `steps` global batches of `order`, then ranks of each
// `after` take the rest from that cursor: every sample seen exactly once.
void ExpectResumeSeesEverySampleOnce(const std::vector<uint64_t>& order, int64_t global_batch,
                                     int64_t steps,
                                     const std::vector<std::pair<int, int>>& world_sizes) {
  const size_t n = order.size();
  for (const auto& [before, after] : world_sizes) {
    const int64_t cursor = steps * global_batch;
    std::multiset<uint64_t> seen;
    for (int r = 0; r < before; ++r) {
      const std::vector<uint64_t> mine = RankSlice(order, r, before, 0);
      seen.insert(mine.begin(), mine.begin() + cursor / before);
    }
    for (int r = 0; r < after; ++r) {
      const std::vector<uint64_t> mine = RankSlice(order, r, after, cursor);
      seen.insert(mine.begin(), mine.end());
    }
    EXPECT_EQ(seen.size(), n) << before << " -> " << after;
    EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), n) << before << " -> " << after;
  }
}

TEST(RankSliceTest, ResumingAtACursorWithAnotherWorldSizeSeesTheRestExactlyOnce) {
  const std::vector<uint64_t> order = EpochOrder(2, 1, 40);
  ExpectResumeSeesEverySampleOnce(order, 8, 2, {{2, 1}, {1, 2}, {4, 2}});
  EXPECT_TRUE(RankSlice(order, 0, 2, 40).empty());
}

std::vector<SampleGroup> Groups(uint64_t n, uint64_t g) {
  Shard shard;
  shard.size = n;
  shard.group_size = static_cast<uint32_t>(g);
  return ShardGroups({shard});
}

TEST(ShardGroupsTest, CutsEachShardFromItsBaseKeepingShortLastGroups) {
  Shard a, b;
  a.base = 0;
  a.size = 10;
  a.group_size = 4;
  b.base = 10;
  b.size = 3;
  b.group_size = 1;
  const std::vector<SampleGroup> groups = ShardGroups({a, b});
  ASSERT_EQ(groups.size(), 6u);
  EXPECT_EQ(groups[2].first, 8u);
  EXPECT_EQ(groups[2].count, 2u);  // the short last group of shard a
  EXPECT_EQ(groups[3].first, 10u);
  EXPECT_EQ(groups[5].count, 1u);
}

TEST(GroupedEpochOrderTest, EverySampleOnceDeterministicAndPerEpoch) {
  const std::vector<SampleGroup> groups = Groups(1003, 32);
  for (int window : {1, 4, 100}) {
    const std::vector<uint64_t> order = GroupedEpochOrder(7, 0, groups, window);
    ASSERT_EQ(order.size(), 1003u);
    EXPECT_EQ(std::set<uint64_t>(order.begin(), order.end()).size(), 1003u) << window;
    EXPECT_EQ(order, GroupedEpochOrder(7, 0, groups, window));
    EXPECT_NE(order, GroupedEpochOrder(7, 1, groups, window));
    EXPECT_NE(order, GroupedEpochOrder(8, 0, groups, window));
  }
}

// At any point at most `window` groups have been started and not finished:
// the storage reads each group once with that many group buffers.
TEST(GroupedEpochOrderTest, AtMostWindowGroupsAreOpenAtOnce) {
  const uint64_t g = 16;
  const std::vector<SampleGroup> groups = Groups(640, g);
  for (int window : {1, 3, 8}) {
    const std::vector<uint64_t> order = GroupedEpochOrder(1, 2, groups, window);
    std::map<uint64_t, uint64_t> seen;  // group -> samples drawn
    size_t open = 0, most = 0;
    for (uint64_t id : order) {
      const uint64_t k = id / g;
      if (seen[k]++ == 0) ++open;
      if (seen[k] == g) --open;
      most = std::max(most, open);
    }
    EXPECT_EQ(most, static_cast<size_t>(window));
  }
  // A window of 1 visits each group's samples consecutively.
  const std::vector<uint64_t> order = GroupedEpochOrder(1, 2, groups, 1);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i] / g, order[i / g * g] / g) << i;
}

// Ranks and resumption take slices of the global order as for a full shuffle:
// each sample once per epoch over the ranks, and once after a resume.
TEST(GroupedEpochOrderTest, RanksAndResumeSeeEverySampleOnce) {
  ExpectResumeSeesEverySampleOnce(GroupedEpochOrder(3, 5, Groups(96, 8), 4), 12, 3,
                                  {{1, 1}, {2, 3}, {4, 1}});
}

}  // namespace
}  // namespace sophon
