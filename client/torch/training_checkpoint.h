// Training checkpoints (Trainer::SaveCheckpoint / LoadCheckpoint): all that
// a run needs to continue exactly where it stopped, in one file written
// atomically, so that the data cursor can never disagree with the weights.
//
// Format: torch.save's (model/checkpoint_file.h), a dict that Python opens
// with torch.load(path):
//   "kind": "training"
//   "arch", "num_classes", "optimizer_kind" ("sgd" | "adam"), "fused",
//   "num_models", "finetune"
//   "model"          the state_dict, under torchvision's names; for a fused
//                    array a list of them, one a model
//   "optimizer"      the optimizer's state (optimizer_state.h; a fused
//                    array's: FusedOptimizer::State)
//   "learning_rates" float64 [num_models], the rates in use
//   "rng_cpu"        LibTorch's CPU generator state (dropout)
//   "loss_scaler"    float64 {scale, finite steps in a row}, under amp fp16
//                    only (optional: without it a scaler starts afresh)
//   "steps"          optimizer steps taken in the whole run
//   "cursor"         the data cursor with the keys of the Python loader's
//                    state_dict(): epoch, position, seed, world_size,
//                    batch_size (per rank), shuffle_window,
//                    dataset_fingerprint (seed and fingerprint are unsigned
//                    64-bit values stored as their signed two's complement)
// Checkpoints of earlier versions (a LibTorch archive) are read too.
// A model checkpoint (Trainer::Save, models.h) is another kind: it loads
// with TrainerOptions.init_checkpoint.
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_TRAINING_CHECKPOINT_H_
#define SOPHON_CLIENT_TORCH_TRAINING_CHECKPOINT_H_

#include <ATen/core/Dict.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/train/trainer.h"

namespace torch::serialize {
class InputArchive;
}  // namespace torch::serialize

namespace sophon {

// What a training checkpoint is written from and restored into (a LibTorch
// trainer).
class CheckpointedState {
 public:
  // What a checkpoint must match to be loaded.
  struct Identity {
    std::string arch;
    int num_classes = 0;
    OptimizerKind optimizer = OptimizerKind::kSgd;
    bool fused = false;
    int num_models = 1;
    bool finetune = false;  // only the head trains (TrainerOptions.finetune)
  };

  virtual ~CheckpointedState() = default;
  virtual Identity identity() const = 0;
  // The model (one module; a fused array's module holds every model).
  virtual torch::nn::Module& module() const = 0;
  // The optimizer's state, as a checkpoint dict.
  virtual c10::impl::GenericDict OptimizerState() const = 0;
  // Restores what OptimizerState gave. A state that does not fit gives an
  // error, the optimizer unchanged, or a throw (c10::Error) after which it
  // may be partly restored.
  virtual absl::Status LoadOptimizerState(const c10::impl::GenericDict& state) = 0;
  // The same from the optimizer archive of an earlier version's checkpoint.
  virtual absl::Status LoadArchivedOptimizer(torch::serialize::InputArchive& archive) = 0;
  // One learning rate per model.
  virtual std::vector<double> LearningRates() const = 0;
  virtual void SetLearningRates(const std::vector<double>& lrs) = 0;
  // The fp16 loss scaler's state (GradScaler::State); empty without one.
  virtual std::vector<double> LossScalerState() const { return {}; }
  // Restores it; OK without a scaler.
  virtual absl::Status RestoreLossScaler(const std::vector<double>& state) {
    (void)state;
    return absl::OkStatus();
  }
};

// Writes `state` and `cursor` to `path` through AtomicFileWriter: `path`
// holds the old file or the whole new one. Errors name the file.
absl::Status WriteTrainingCheckpoint(const std::string& path, const CheckpointedState& state,
                                     const TrainingCursor& cursor);

// Restores `state` (model tensors, optimizer, learning rates, the CPU RNG)
// from `path` (this format or an earlier version's) and returns its cursor. NotFound for a missing file;
// InvalidArgument naming the file for a file that is not a training
// checkpoint, and naming both values when its identity differs from
// state.identity() (checked, like every tensor's name and shape, before
// anything is changed).
absl::StatusOr<TrainingCursor> ReadTrainingCheckpoint(const std::string& path,
                                                      CheckpointedState& state);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_TRAINING_CHECKPOINT_H_
