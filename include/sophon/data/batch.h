// A collated training batch: plain buffers, no LibTorch.
#ifndef SOPHON_DATA_BATCH_H_
#define SOPHON_DATA_BATCH_H_

#include <cstdint>
#include <vector>

namespace sophon {

// float32 NCHW images (normalized) and int64 labels. Produced by the loader,
// consumed by the trainer, which wraps the buffers as tensors without copying.
struct Batch {
  int64_t index = 0;  // batch number within the epoch
  int n = 0;          // samples in this batch (may be < batch size at the end)
  int c = 3;
  int h = 0;
  int w = 0;
  std::vector<float> images;   // n * c * h * w
  std::vector<int64_t> labels; // n
  std::vector<uint64_t> ids;   // sample ids, in batch order
  // The data cursor after this batch: samples of the epoch's global order
  // (all ranks) consumed once every rank has taken its batch of this step.
  int64_t cursor = 0;
};

}  // namespace sophon

#endif  // SOPHON_DATA_BATCH_H_
