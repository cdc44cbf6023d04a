// A test trainer: tinycnn on an emulated v100 whose steps sleep 1 ms of copy
// and 2 ms of compute for `batch_size` samples (no model runs).
#ifndef SOPHON_TESTS_CLIENT_TRAIN_TINY_EMULATED_TRAINER_H_
#define SOPHON_TESTS_CLIENT_TRAIN_TINY_EMULATED_TRAINER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/train/emulated_trainer.h"

namespace sophon::testing {

inline absl::StatusOr<std::unique_ptr<EmulatedTrainer>> TinyEmulatedTrainer(int batch_size) {
  absl::StatusOr<GpuProfile> profile = GpuProfile::Parse(
      absl::StrCat("gpu_type,model,batch_size,copy_seconds_per_batch,compute_seconds_per_batch,"
                   "source\nv100,tinycnn,",
                   batch_size, ",0.001,0.002,test\n"),
      "test.csv");
  if (!profile.ok()) return profile.status();
  EmulatedTrainerOptions options;
  options.arch = "tinycnn";
  return EmulatedTrainer::Create(*profile, options, batch_size);
}

}  // namespace sophon::testing

#endif  // SOPHON_TESTS_CLIENT_TRAIN_TINY_EMULATED_TRAINER_H_
