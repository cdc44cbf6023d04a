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
