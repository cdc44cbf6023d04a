#include "client/loader/sampler.h"

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
