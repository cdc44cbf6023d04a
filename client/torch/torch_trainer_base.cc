#include "client/torch/torch_trainer_base.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/torch/state_snapshot.h"
#include "client/torch/stream_event.h"
#include "sophon/base/status_macros.h"
#include "spdlog/spdlog.h"

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
      uploader_(device, options.staging_buffers),
      queued_(device.is_cuda() ? options.steps_in_flight : 0),
      scaler_(options.amp == "fp16" ? std::make_unique<GradScaler>() : nullptr) {}

void TorchTrainerBase::Backward(const torch::Tensor& loss) const {
  (scaler_ != nullptr ? scaler_->Scale(loss) : loss).backward();
}

std::vector<double> TorchTrainerBase::LossScalerState() const {
  return scaler_ != nullptr ? scaler_->State() : std::vector<double>{};
}

absl::Status TorchTrainerBase::RestoreLossScaler(const std::vector<double>& state) {
  return scaler_ != nullptr ? scaler_->Restore(state) : absl::OkStatus();
}

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

absl::Status TorchTrainerBase::NothingQueued(const char* what) const {
  if (queued_.in_flight() == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      what, " while ", queued_.in_flight(), " submitted training steps are queued: Drain first"));
}

absl::StatusOr<torch::Tensor> TorchTrainerBase::RunStep(const Batch& batch) {
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
      summary = Forward(uploader_.Upload(batch, options_.channels_last), batch.n, /*train=*/true);
    }
    if (data_parallel_ != nullptr) {
      RETURN_IF_ERROR(
          InStep(batch, data_parallel_->AllReduceGradients(TrainedParameters())));
    }
    // Under fp16, a step whose gradients overflowed is skipped, on every
    // rank alike (they all see the averaged gradients).
    const bool finite = scaler_ == nullptr || scaler_->Unscale(TrainedParameters());
    if (finite) OptimizerStep();
    if (scaler_ != nullptr) {
      scaler_->Update(finite);
      if (!finite) {
        spdlog::debug("fp16: gradients of batch {} overflowed: step skipped, loss scale now {}",
                      batch.index, scaler_->scale());
      }
    }
    return summary;
  } catch (const std::exception& e) {  // c10::Error derives from std::exception.
    return StepError(/*train=*/true, batch, e);
  }
}

absl::StatusOr<StepResult> TorchTrainerBase::Step(const Batch& batch) {
  RETURN_IF_ERROR(NothingQueued("a training step"));
  ASSIGN_OR_RETURN(const torch::Tensor summary, RunStep(batch));
  try {
    return summary.defined() ? ReadResult(summary, batch.n) : EmptyResult();
  } catch (const std::exception& e) {
    return StepError(/*train=*/true, batch, e);
  }
}

absl::StatusOr<std::vector<StepResult>> TorchTrainerBase::Submit(const Batch& batch) {
  ASSIGN_OR_RETURN(const torch::Tensor summary, RunStep(batch));
  const int64_t n = batch.n;
  try {
    if (!summary.defined()) {
      return queued_.Push(nullptr, [this] { return EmptyResult(); });
    }
    if (!device_.is_cuda()) {  // the step is done: its summary is on the host
      return queued_.Push(nullptr, [this, summary, n] { return ReadResult(summary, n); });
    }
    // The copy to pinned memory queues behind the step on the compute
    // stream; the event after it tells when the result can be read.
    const torch::Tensor host = torch::empty(
        summary.sizes(), summary.options().device(torch::kCPU).pinned_memory(true));
    host.copy_(summary, /*non_blocking=*/true);
    c10::Event copied(device_.type());
    copied.record(c10::impl::VirtualGuardImpl(device_.type()).getStream(device_));
    return queued_.Push(std::make_unique<StreamEvent>(std::move(copied)),
                        [this, host, n] { return ReadResult(host, n); });
  } catch (const std::exception& e) {
    // A device error of this step or of one queued before it.
    return absl::InternalError(absl::StrCat("training on ", device_.str(), ", at batch ",
                                            batch.index, " or a step queued before it: ",
                                            ExceptionText(e)));
  }
}

absl::StatusOr<std::vector<StepResult>> TorchTrainerBase::Drain() {
  try {
    return queued_.Drain();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("waiting for the training steps queued on ",
                                            device_.str(), ": ", ExceptionText(e)));
  }
}

absl::StatusOr<std::vector<double>> TorchTrainerBase::TrialSteps(const Batch& batch, int steps) {
  if (steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("trial steps must be >= 1, got ", steps));
  }
  RETURN_IF_ERROR(NothingQueued("trial steps"));
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
      const torch::Tensor summary =
          Forward(uploader_.Upload(batch, options_.channels_last), batch.n, /*train=*/true);
      // Under fp16 the gradients are unscaled and the step always taken
      // (even where the first scale overflows): the time is a real step's,
      // the scale is left as it is, and the snapshot puts the rest back.
      if (scaler_ != nullptr) scaler_->Unscale(TrainedParameters());
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
