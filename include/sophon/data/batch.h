// A collated training batch: plain buffers, no LibTorch.
#ifndef SOPHON_DATA_BATCH_H_
#define SOPHON_DATA_BATCH_H_

#include <cstdint>
#include <vector>

#include "sophon/ops/stage.h"

namespace sophon {

// Images and int64 labels. Produced by the loader, consumed by the trainer
// (or the Python module), which wraps the buffers without copying.
struct Batch {
  int64_t index = 0;  // batch number within the epoch
  int n = 0;          // samples in this batch (may be < batch size at the end)
  int c = 3;
  int h = 0;
  int w = 0;
  // The stage the samples were taken to (the loader's target): TENSOR fills
  // `images`, float32 NCHW normalized; FEATURES fills `images` with float32
  // [n, F] feature vectors (c = F, h = w = 1); a uint8 HWC stage (CROPPED,
  // FLIPPED) fills `pixels`, uint8 NHWC, for a device that finishes the ops
  // itself.
  Stage stage = Stage::kTensor;
  std::vector<float> images;    // n * c * h * w, or empty
  std::vector<uint8_t> pixels;  // n * h * w * c, or empty
  // CROPPED: n flags, 1 where the device is to mirror sample i (the flip a
  // FLIPPED batch's pixels already have); empty at other stages.
  std::vector<uint8_t> flips;
  std::vector<int64_t> labels; // n
  std::vector<uint64_t> ids;   // sample ids, in batch order
  // The data cursor after this batch: samples of the epoch's global order
  // (all ranks) consumed once every rank has taken its batch of this step.
  int64_t cursor = 0;
};

}  // namespace sophon

#endif  // SOPHON_DATA_BATCH_H_
