#include "client/loader/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "sophon/ops/augment.h"

namespace sophon {

std::vector<uint64_t> EpochOrder(uint64_t seed, uint64_t epoch, uint64_t num_samples,
                                 bool shuffle, int rank, int world) {
  std::vector<uint64_t> order(num_samples);
  std::iota(order.begin(), order.end(), 0);
  if (shuffle && num_samples > 1) {
    // Stream 2 keeps the shuffle independent of any sample's augmentation.
    CounterRng rng(SampleKey{seed, epoch, ~0ULL}, /*stream=*/2);
    for (uint64_t i = num_samples - 1; i > 0; --i) {
      const uint64_t j = static_cast<uint64_t>(rng.RandInt(0, static_cast<int64_t>(i) + 1));
      std::swap(order[i], order[j]);
    }
  }
  if (world <= 1) return order;
  std::vector<uint64_t> mine;
  mine.reserve(num_samples / world + 1);
  for (uint64_t i = rank; i < num_samples; i += world) mine.push_back(order[i]);
  return mine;
}

std::vector<SampleGroup> ShardGroups(const std::vector<Shard>& shards) {
  std::vector<SampleGroup> groups;
  for (const Shard& shard : shards) {
    const uint64_t g = std::max<uint32_t>(1, shard.group_size);
    for (uint64_t at = 0; at < shard.size; at += g) {
      groups.push_back(SampleGroup{shard.base + at, std::min(g, shard.size - at)});
    }
  }
  return groups;
}

std::vector<uint64_t> GroupedEpochOrder(uint64_t seed, uint64_t epoch,
                                        const std::vector<SampleGroup>& groups, int window) {
  // Stream 3: independent of the full shuffle's (2) and every augmentation.
  CounterRng rng(SampleKey{seed, epoch, ~0ULL}, /*stream=*/3);
  std::vector<uint32_t> group_order(groups.size());
  std::iota(group_order.begin(), group_order.end(), 0);
  for (size_t i = group_order.size(); i > 1; --i) {
    std::swap(group_order[i - 1],
              group_order[static_cast<size_t>(rng.RandInt(0, static_cast<int64_t>(i)))]);
  }
  uint64_t total = 0;
  for (const SampleGroup& g : groups) total += g.count;
  std::vector<uint64_t> order;
  order.reserve(total);
  // The unvisited samples of the open groups, and how many each group has left.
  struct Open {
    uint64_t id;
    uint32_t group;
  };
  std::vector<Open> pool;
  std::vector<uint64_t> left(groups.size());
  size_t next = 0;
  const auto open_next = [&] {
    const uint32_t k = group_order[next++];
    for (uint64_t i = 0; i < groups[k].count; ++i) pool.push_back(Open{groups[k].first + i, k});
    left[k] = groups[k].count;
  };
  while (next < group_order.size() && next < static_cast<size_t>(window)) open_next();
  while (!pool.empty()) {
    const size_t j = static_cast<size_t>(rng.RandInt(0, static_cast<int64_t>(pool.size())));
    const Open drawn = pool[j];
    pool[j] = pool.back();
    pool.pop_back();
    order.push_back(drawn.id);
    if (--left[drawn.group] == 0 && next < group_order.size()) open_next();
  }
  return order;
}

}  // namespace sophon

namespace sophon {

int64_t PaddedEpochLength(uint64_t num_samples, int world) {
  const int64_t n = static_cast<int64_t>(num_samples);
  if (n == 0) return 0;
  return (n + world - 1) / world * world;
}

std::vector<uint64_t> RankSlice(const std::vector<uint64_t>& order, int rank, int world,
                                int64_t start) {
  std::vector<uint64_t> mine;
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t total = PaddedEpochLength(order.size(), world);
  if (start >= total) return mine;
  mine.reserve(static_cast<size_t>((total - start) / world + 1));
  for (int64_t p = start + rank; p < total; p += world) mine.push_back(order[p % n]);
  return mine;
}

}  // namespace sophon
