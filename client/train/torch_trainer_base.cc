#include "client/train/torch_trainer_base.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/train/state_snapshot.h"
#include "sophon/base/status_macros.h"

namespace sophon {
namespace {

// What the loader hands a rank whose every sample failed: it must still take
// part in the step's collectives.
bool IsEmptyBatch(const Batch& batch) {
  return batch.n == 0 && batch.images.empty() && batch.labels.empty();
}

}  // namespace

TorchTrainerBase::TorchTrainerBase(const TrainerOptions& options, torch::Device device,
                                   std::unique_ptr<DataParallel> data_parallel)
    : options_(options),
      device_(device),
      data_parallel_(std::move(data_parallel)),
      uploader_(device, options.staging_buffers) {}

CheckpointedState::Identity TorchTrainerBase::identity() const {
  Identity id;
  id.arch = options_.arch;
  id.num_classes = options_.num_classes;
  id.optimizer = options_.optimizer;
  id.fused = options_.fused;
  id.num_models = options_.num_models();
  id.finetune = options_.finetune;
  return id;
}

absl::Status TorchTrainerBase::InStep(const Batch& batch, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("training step on batch ", batch.index, ": ",
                                                  status.message()));
}

absl::Status TorchTrainerBase::BroadcastInitialState() {
  if (data_parallel_ == nullptr) return absl::OkStatus();
  try {
    RETURN_IF_ERROR(data_parallel_->Broadcast(module().parameters(), "parameters"));
    return data_parallel_->Broadcast(module().buffers(), "buffers");
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("broadcasting rank 0's model failed: ", ExceptionText(e)));
  }
}

absl::StatusOr<StepResult> TorchTrainerBase::Step(const Batch& batch) {
  const bool empty = data_parallel_ != nullptr && IsEmptyBatch(batch);
  if (!empty) RETURN_IF_ERROR(ValidateBatch(batch, options_.arch, options_.num_classes, options_.finetune));
  try {
    if (data_parallel_ != nullptr) {
      // DDP's broadcast_buffers=True: every rank's forward starts from rank
      // 0's BatchNorm statistics.
      RETURN_IF_ERROR(InStep(batch, data_parallel_->Broadcast(module().buffers(), "buffers")));
    }
    ZeroGrad();
    torch::Tensor summary;
    if (!empty) {
      const AutocastScope autocast(options_.amp == "bf16", device_);
      summary = Forward(uploader_.Upload(batch, options_.channels_last), batch.n, /*train=*/true);
    }
    if (data_parallel_ != nullptr) {
      RETURN_IF_ERROR(
          InStep(batch, data_parallel_->AllReduceGradients(TrainedParameters())));
    }
    OptimizerStep();
    return empty ? EmptyResult() : ReadResult(summary, batch.n);
  } catch (const std::exception& e) {  // c10::Error derives from std::exception.
    return StepError(/*train=*/true, batch, e);
  }
}

absl::StatusOr<std::vector<double>> TorchTrainerBase::TrialSteps(const Batch& batch, int steps) {
  if (steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("trial steps must be >= 1, got ", steps));
  }
  RETURN_IF_ERROR(ValidateBatch(batch, options_.arch, options_.num_classes, options_.finetune));
  std::function<void()> optimizer_step;
  try {
    ASSIGN_OR_RETURN(optimizer_step, NewTrialOptimizer());
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("making the trial steps' optimizer failed: ", ExceptionText(e)));
  }
  ASSIGN_OR_RETURN(const ModelStateSnapshot snapshot, ModelStateSnapshot::Take(module(), device_));
  std::vector<double> seconds;
  absl::Status stepped;
  try {
    for (int i = 0; i < steps; ++i) {
      // As Step without a process group: the same copy, forward, backward
      // and optimizer arithmetic.
      const absl::Time start = absl::Now();
      ZeroGrad();
      const AutocastScope autocast(options_.amp == "bf16", device_);
      const torch::Tensor summary =
          Forward(uploader_.Upload(batch, options_.channels_last), batch.n, /*train=*/true);
      optimizer_step();
      // Read back as Step does: the time includes the device's work.
      ReadResult(summary, batch.n);
      seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
  } catch (const std::exception& e) {
    stepped = StepError(/*train=*/true, batch, e);
  }
  // Whatever the steps did, and whether they ended or threw.
  if (absl::Status restored = snapshot.Restore(module()); !restored.ok()) {
    return absl::InternalError(absl::StrCat(
        "after trial steps the model could not be put back (do not train on): ",
        restored.message()));
  }
  RETURN_IF_ERROR(stepped);
  return seconds;
}

absl::StatusOr<StepResult> TorchTrainerBase::Evaluate(const Batch& batch) {
  if (data_parallel_ != nullptr && IsEmptyBatch(batch)) return EmptyResult();
  RETURN_IF_ERROR(ValidateBatch(batch, options_.arch, options_.num_classes, options_.finetune));
  try {
    const AutocastScope autocast(options_.amp == "bf16", device_);
    return ReadResult(
        Forward(uploader_.Upload(batch, options_.channels_last), batch.n, /*train=*/false),
        batch.n);
  } catch (const std::exception& e) {
    return StepError(/*train=*/false, batch, e);
  }
}

StepResult TorchTrainerBase::ReadResult(const torch::Tensor& summary, int64_t n) const {
  const torch::Tensor host = summary.to(torch::kCPU).contiguous();
  const auto values = host.accessor<double, 2>();
  const int64_t models = host.size(1);
  StepResult result;
  result.count = n;
  if (!options_.fused) {
    result.loss = values[0][0];
    result.correct = static_cast<int64_t>(values[1][0]);
    return result;
  }
  for (int64_t k = 0; k < models; ++k) {
    ModelStepResult model;
    model.loss = values[0][k];
    model.correct = static_cast<int64_t>(values[1][k]);
    result.loss += model.loss / static_cast<double>(models);
    result.models.push_back(model);
  }
  return result;
}

absl::Status TorchTrainerBase::SaveCheckpoint(const std::string& path,
                                              const TrainingCursor& cursor) {
  return WriteTrainingCheckpoint(path, *this, cursor);
}

absl::StatusOr<TrainingCursor> TorchTrainerBase::LoadCheckpoint(const std::string& path) {
  return ReadTrainingCheckpoint(path, *this);
}

}  // namespace sophon
