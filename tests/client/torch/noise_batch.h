// A batch of Gaussian noise images for trainer tests.
#ifndef SOPHON_TESTS_CLIENT_TORCH_NOISE_BATCH_H_
#define SOPHON_TESTS_CLIENT_TORCH_NOISE_BATCH_H_

#include <cstdint>
#include <random>

#include "sophon/data/batch.h"

namespace sophon::testing {

// n images of 3 x side x side standard-normal floats drawn from `seed`, ids
// 0..n-1, labels (i + seed) mod num_classes.
inline Batch NoiseBatch(int n, int side, int num_classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch batch;
  batch.n = n;
  batch.h = side;
  batch.w = side;
  batch.images.resize(static_cast<size_t>(n) * 3 * side * side);
  for (float& v : batch.images) v = normal(rng);
  for (int i = 0; i < n; ++i) {
    batch.labels.push_back(static_cast<int64_t>((i + seed) % num_classes));
    batch.ids.push_back(i);
  }
  return batch;
}

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_CLIENT_TORCH_NOISE_BATCH_H_
