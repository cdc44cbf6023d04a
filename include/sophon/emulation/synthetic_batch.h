// Synthetic training batches: random pixels and cycling labels, for measuring
// the training step without a data pipeline (sophon-train --synthetic-data,
// sophon-profile-gpu).
#ifndef SOPHON_EMULATION_SYNTHETIC_BATCH_H_
#define SOPHON_EMULATION_SYNTHETIC_BATCH_H_

#include <cstdint>

#include "sophon/data/batch.h"
#include "sophon/ops/stage.h"

namespace sophon {

// n images of 3 x side x side with `seed`, labels i % num_classes, ids
// 0..n-1. `stage` kTensor: float32 NCHW drawn from N(0, 1) (the range of
// normalized pixels); kFlipped: uint8 NHWC drawn uniformly from 0..255 (what
// a device that normalises receives); kCropped: the same with a flip flag
// per sample, set for every other one (what sophon-train --transfer=uint8
// sends, for the device to flip and normalise).
// REQUIRES: n, side, num_classes >= 1; stage kTensor, kCropped or kFlipped.
Batch MakeSyntheticBatch(int n, int side, int num_classes, uint64_t seed,
                         Stage stage = Stage::kTensor);

}  // namespace sophon

#endif  // SOPHON_EMULATION_SYNTHETIC_BATCH_H_
