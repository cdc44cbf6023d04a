// `sophon-train --synthetic-data`: the training step alone, fed one in-memory
// batch over and over, with no server, loader or preprocessing. Its images/s
// is the maximum ingestion rate of the model on the device (run (1) of the
// differential stall analysis, see sophon/emulation/stall.h).
#ifndef SOPHON_CLIENT_TRAIN_SYNTHETIC_RUN_H_
#define SOPHON_CLIENT_TRAIN_SYNTHETIC_RUN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/train/train_loop.h"
#include "client/train/trainer.h"
#include "sophon/ops/stage.h"

namespace sophon {

struct SyntheticRunOptions {
  int batch_size = 256;
  int crop_size = 224;     // images are 3 x crop x crop
  // kTensor: float32 images; kCropped (with flip flags) or kFlipped: uint8
  // crops the device flips and normalises.
  Stage stage = Stage::kTensor;
  int num_classes = 1000;  // labels cycle through [0, num_classes)
  int64_t samples = 0;     // per epoch; the last batch may be short
  int warmup_steps = 1;    // untimed steps before the first epoch (allocation, autotuning)
  uint64_t seed = 0;       // of the synthetic pixel values

  absl::Status Validate() const;
};

// Runs options.epochs epochs of `synthetic.samples` samples (at most
// loop.max_batches batches each when that is set) and reports them like
// RunTraining does, with no data wait. Writes loop.report_json and
// loop.batch_timings when set.
absl::StatusOr<std::vector<EpochReport>> RunSyntheticTraining(Trainer* trainer,
                                                              const SyntheticRunOptions& synthetic,
                                                              const TrainLoopOptions& loop);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_SYNTHETIC_RUN_H_
