// The order in which an epoch visits the samples.
#ifndef SOPHON_CLIENT_LOADER_SAMPLER_H_
#define SOPHON_CLIENT_LOADER_SAMPLER_H_

#include <cstdint>
#include <vector>

namespace sophon {

// A seeded permutation of [0, num_samples) for `epoch` (Fisher-Yates driven by
// the counter-based generator), the same on every machine. With world > 1,
// rank r takes every world-th entry starting at r (DistributedSampler-style).
// REQUIRES: 0 <= rank < world.
std::vector<uint64_t> EpochOrder(uint64_t seed, uint64_t epoch, uint64_t num_samples,
                                 bool shuffle = true, int rank = 0, int world = 1);

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_SAMPLER_H_
