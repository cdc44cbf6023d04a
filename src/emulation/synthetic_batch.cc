#include "sophon/emulation/synthetic_batch.h"

#include <random>

namespace sophon {

Batch MakeSyntheticBatch(int n, int side, int num_classes, uint64_t seed, Stage stage) {
  Batch b;
  b.n = n;
  b.c = 3;
  b.h = side;
  b.w = side;
  b.stage = stage;
  const size_t values = static_cast<size_t>(n) * 3 * side * side;
  std::mt19937_64 rng(seed);
  if (stage == Stage::kFlipped || stage == Stage::kCropped) {
    b.pixels.resize(values);
    std::uniform_int_distribution<int> pixel(0, 255);
    for (uint8_t& v : b.pixels) v = static_cast<uint8_t>(pixel(rng));
    // Every other sample to be mirrored on the device, as a random flip
    // with probability 0.5 would on average.
    if (stage == Stage::kCropped) {
      for (int i = 0; i < n; ++i) b.flips.push_back(static_cast<uint8_t>(i % 2));
    }
  } else {
    b.images.resize(values);
    std::normal_distribution<float> pixel(0.0f, 1.0f);
    for (float& v : b.images) v = pixel(rng);
  }
  b.labels.reserve(n);
  b.ids.reserve(n);
  for (int i = 0; i < n; ++i) {
    b.labels.push_back(i % num_classes);
    b.ids.push_back(static_cast<uint64_t>(i));
  }
  return b;
}

}  // namespace sophon
