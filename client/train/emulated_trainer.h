// A Trainer that emulates GPUs in time: each step sleeps for the profiled
// host-to-device copy time and then the profiled compute time of the model,
// batch size and GPU type (from a GpuProfile), divided by the number of
// emulated data-parallel GPUs, as the original emulator did. No model runs and
// no LibTorch is involved: the data pipeline in front of it runs for real.
#ifndef SOPHON_CLIENT_TRAIN_EMULATED_TRAINER_H_
#define SOPHON_CLIENT_TRAIN_EMULATED_TRAINER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sophon/emulation/gpu_profile.h"
#include "client/train/trainer.h"

namespace sophon {

struct EmulatedTrainerOptions {
  std::string arch;               // model name as in the profile (case-insensitive)
  std::string gpu_type = "v100";  // GPU type as in the profile (case-insensitive)
  int gpu_count = 1;              // emulated data-parallel GPUs; step times are divided by it
  // A fused array of this many models of `arch` (0: one ordinary model). Its
  // step time comes from the profile's row for model "<arch>x<B>" when there
  // is one (sophon-profile-gpu --fused-models writes them); otherwise it is
  // derived: the copy of one model's batch of N images (the batch is copied
  // once for all B models) plus the compute of one model at batch B*N (the
  // fused array runs the same kernels on B times the channels, the same
  // arithmetic as one model on B times the images).
  int fused_models = 0;
  // Evaluate() sleeps the copy time plus this fraction of the compute time
  // (forward only; forward is commonly taken as about 1/3 of a training step).
  double evaluate_compute_fraction = 1.0 / 3;
};

// Not thread-safe: one thread calls Step() / Evaluate().
class EmulatedTrainer final : public Trainer {
 public:
  // Looks up `batch_size` right away so that a model, GPU or batch size the
  // profile lacks fails before training starts (NotFound / FailedPrecondition
  // from GpuProfile::Lookup; InvalidArgument for gpu_count < 1).
  static absl::StatusOr<std::unique_ptr<EmulatedTrainer>> Create(
      const GpuProfile& profile, const EmulatedTrainerOptions& options, int batch_size);

  // Sleeps copy / gpu_count, then compute / gpu_count. The result has loss 0
  // and no correct predictions (no model runs; a fused array reports B such
  // models), count = batch.n and the copy time actually slept.
  absl::StatusOr<StepResult> Step(const Batch& batch) override;
  absl::StatusOr<StepResult> Evaluate(const Batch& batch) override;
  // `steps` Steps, timed: there is no state to put back.
  absl::StatusOr<std::vector<double>> TrialSteps(const Batch& batch, int steps) override;
  // "emulated v100 x1".
  std::string DeviceName() const override;
  // FailedPrecondition: no model is trained.
  absl::StatusOr<std::vector<std::string>> Save(const std::string& path) override;

  // Per-step times for a batch of n samples (already divided by gpu_count).
  absl::StatusOr<GpuStepTime> StepTimeFor(int n);

 private:
  EmulatedTrainer(const GpuProfile& profile, const EmulatedTrainerOptions& options)
      : profile_(profile), options_(options) {}
  absl::StatusOr<StepResult> Sleep(const Batch& batch, double compute_fraction);
  // The profile's time for a batch of n, fused as the options say (not
  // divided by gpu_count).
  absl::StatusOr<GpuStepTime> LookupFused(int n) const;

  // Constant after construction.
  const GpuProfile profile_;
  const EmulatedTrainerOptions options_;
  // Looked-up times by batch size (the last batch of an epoch may be short).
  std::map<int, GpuStepTime> times_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_EMULATED_TRAINER_H_
