#include "client/train/torch_trainer_base.h"

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
    : options_(options), device_(device), data_parallel_(std::move(data_parallel)) {}

CheckpointedState::Identity TorchTrainerBase::identity() const {
  Identity id;
  id.arch = options_.arch;
  id.num_classes = options_.num_classes;
  id.optimizer = options_.optimizer;
  id.fused = options_.fused;
  id.num_models = options_.num_models();
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
  if (!empty) RETURN_IF_ERROR(ValidateBatch(batch, options_.arch, options_.num_classes));
  try {
    if (data_parallel_ != nullptr) {
      // DDP's broadcast_buffers=True: every rank's forward starts from rank
      // 0's BatchNorm statistics.
      RETURN_IF_ERROR(InStep(batch, data_parallel_->Broadcast(module().buffers(), "buffers")));
    }
    ZeroGrad();
    StepResult result;
    if (empty) {
      result = EmptyResult();
    } else {
      result = Forward(ToTensors(batch, device_), batch.n, /*train=*/true);
    }
    if (data_parallel_ != nullptr) {
      RETURN_IF_ERROR(
          InStep(batch, data_parallel_->AllReduceGradients(module().parameters())));
    }
    OptimizerStep();
    return result;
  } catch (const std::exception& e) {  // c10::Error derives from std::exception.
    return StepError(/*train=*/true, batch, e);
  }
}

absl::StatusOr<StepResult> TorchTrainerBase::Evaluate(const Batch& batch) {
  if (data_parallel_ != nullptr && IsEmptyBatch(batch)) return EmptyResult();
  RETURN_IF_ERROR(ValidateBatch(batch, options_.arch, options_.num_classes));
  try {
    return Forward(ToTensors(batch, device_), batch.n, /*train=*/false);
  } catch (const std::exception& e) {
    return StepError(/*train=*/false, batch, e);
  }
}

absl::Status TorchTrainerBase::SaveCheckpoint(const std::string& path,
                                              const TrainingCursor& cursor) {
  return WriteTrainingCheckpoint(path, *this, cursor);
}

absl::StatusOr<TrainingCursor> TorchTrainerBase::LoadCheckpoint(const std::string& path) {
  return ReadTrainingCheckpoint(path, *this);
}

}  // namespace sophon
