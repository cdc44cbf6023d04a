// The step both LibTorch trainers (torch_trainer.cc, fused_trainer.cc) share:
// batch checks, and under data-parallel ranks (process_group.h) the
// collectives around the trainer's own forward, backward and optimizer step;
// and their training checkpoints (training_checkpoint.h).
//
// A training step under world_size > 1, on every rank:
//   1. rank 0's buffers are broadcast (PyTorch DDP's default,
//      broadcast_buffers=True: BatchNorm running statistics follow rank 0);
//   2. forward and backward on this rank's batch (skipped for an empty batch:
//      its gradients are zeros);
//   3. gradients are averaged over the ranks, in buckets;
//   4. the optimizer steps, identically on every rank.
// Evaluation runs no collective.
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_TORCH_TRAINER_BASE_H_
#define SOPHON_CLIENT_TORCH_TORCH_TRAINER_BASE_H_

#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/torch/batch_upload.h"
#include "client/torch/grad_scaler.h"
#include "client/torch/process_group.h"
#include "client/torch/torch_step.h"
#include "client/torch/training_checkpoint.h"
#include "client/train/step_queue.h"
#include "client/train/trainer.h"
#include "sophon/data/batch.h"

namespace sophon {

class TorchTrainerBase : public Trainer, protected CheckpointedState {
 public:
  // `data_parallel`: this rank's process group, or null without ranks.
  TorchTrainerBase(const TrainerOptions& options, torch::Device device,
                   std::unique_ptr<DataParallel> data_parallel);

  absl::StatusOr<StepResult> Step(const Batch& batch) final;
  // On CUDA each step's result is copied to pinned host memory at its end,
  // asynchronously, and queued (StepQueue) behind an event; elsewhere the
  // step is done when Submit returns, with its result.
  absl::StatusOr<std::vector<StepResult>> Submit(const Batch& batch) final;
  absl::StatusOr<std::vector<StepResult>> Drain() final;
  absl::StatusOr<StepResult> Evaluate(const Batch& batch) final;
  // The step without its collectives, timed `steps` times between a
  // ModelStateSnapshot and its restore (state_snapshot.h), with an optimizer
  // of its own (NewTrialOptimizer): the trainer's is never stepped.
  absl::StatusOr<std::vector<double>> TrialSteps(const Batch& batch, int steps) final;
  std::string DeviceName() const final { return device_.str(); }
  absl::Status SaveCheckpoint(const std::string& path, const TrainingCursor& cursor) final;
  absl::StatusOr<TrainingCursor> LoadCheckpoint(const std::string& path) final;
  int rank() const final { return data_parallel_ ? data_parallel_->rank() : 0; }
  int world_size() const final { return data_parallel_ ? data_parallel_->world_size() : 1; }

  // Copies rank 0's parameters and buffers to every rank (Trainer::Create
  // calls it once the model is built). OK at once without ranks.
  absl::Status BroadcastInitialState();

 protected:
  // The parameters the optimizer changes (their gradients are averaged over
  // the ranks): all of the module's, or a fine-tuned model's head.
  virtual std::vector<torch::Tensor> TrainedParameters() const { return module().parameters(); }
  // Zeroes the gradients (kept defined, as LibTorch's zero_grad).
  virtual void ZeroGrad() = 0;
  // Forward on the batch, and with `train` backward of the loss: the
  // module's train/eval mode and the gradient mode are set here, and the
  // forward pass (not the loss or the backward pass) runs under
  // ForwardAutocast. May throw.
  // Returns what the host reads of the step, left on the device so that
  // the step waits for the device once, after its optimizer step: per model
  // (one, or a fused array's B) its mean loss and its correct count, as a
  // [2, models] float64 tensor (ReadResult turns it into a StepResult).
  virtual torch::Tensor Forward(const BatchTensors& batch, int64_t n, bool train) = 0;
  // One optimizer step from the gradients. May throw.
  virtual void OptimizerStep() = 0;
  // Forward's backward pass: of `loss` times the loss scale under fp16
  // (grad_scaler.h), else of `loss`.
  void Backward(const torch::Tensor& loss) const;
  // Autocast for TrainerOptions.amp while it lives (off: none).
  AutocastScope ForwardAutocast() const { return AutocastScope(options_.amp, device_); }
  // A new optimizer of the trainer's kind and hyperparameters over the same
  // parameters, with no state of its own yet, as a function that steps it
  // (and may throw): trial steps do the work of OptimizerStep on it, and it
  // goes when the function does.
  virtual absl::StatusOr<std::function<void()>> NewTrialOptimizer() = 0;
  // The result of a training step on an empty batch (count 0).
  virtual StepResult EmptyResult() const = 0;

  Identity identity() const final;
  std::vector<double> LossScalerState() const final;
  absl::Status RestoreLossScaler(const std::vector<double>& state) final;

  // Constant after construction.
  const TrainerOptions options_;
  const torch::Device device_;

 private:
  // `summary` (from Forward) copied to the host in one copy, which waits
  // for the work queued before it: a fused array's models one by one (with
  // their mean as the loss), or the one model's loss and count.
  StepResult ReadResult(const torch::Tensor& summary, int64_t n) const;

  // Step's work up to its optimizer step, without waiting for the device:
  // the step's summary (Forward), left on the device, or an undefined
  // tensor for a rank's empty batch.
  absl::StatusOr<torch::Tensor> RunStep(const Batch& batch);
  // FailedPrecondition naming `what` while submitted steps are queued.
  absl::Status NothingQueued(const char* what) const;

  // The collectives' errors name the batch.
  static absl::Status InStep(const Batch& batch, const absl::Status& status);

  const std::unique_ptr<DataParallel> data_parallel_;
  // Moves each batch to device_ (pinned buffers and a side stream on CUDA).
  BatchUploader uploader_;
  // Steps submitted and not yet read back.
  StepQueue queued_;
  // Under amp fp16 only.
  std::unique_ptr<GradScaler> scaler_;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_TORCH_TRAINER_BASE_H_
