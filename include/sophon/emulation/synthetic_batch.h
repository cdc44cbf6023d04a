// Synthetic training batches: random pixels and cycling labels, for measuring
// the training step without a data pipeline (sophon-train --synthetic-data,
// sophon-profile-gpu).
#ifndef SOPHON_EMULATION_SYNTHETIC_BATCH_H_
#define SOPHON_EMULATION_SYNTHETIC_BATCH_H_

#include <cstdint>

#include "sophon/data/batch.h"

namespace sophon {

// n images of 3 x side x side float32 drawn from N(0, 1) (the range of
// normalized pixels) with `seed`, labels i % num_classes, ids 0..n-1.
// REQUIRES: n, side, num_classes >= 1.
Batch MakeSyntheticBatch(int n, int side, int num_classes, uint64_t seed);

}  // namespace sophon

#endif  // SOPHON_EMULATION_SYNTHETIC_BATCH_H_
