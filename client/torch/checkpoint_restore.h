// What a training checkpoint restores, read and checked, whatever its format
// (training_checkpoint.cc: torch.save's; training_checkpoint_archive.cc: the
// LibTorch archives of earlier versions), and the one step that puts it in
// place. Private to client/torch/.
#ifndef SOPHON_CLIENT_TORCH_CHECKPOINT_RESTORE_H_
#define SOPHON_CLIENT_TORCH_CHECKPOINT_RESTORE_H_

#include <torch/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/torch/training_checkpoint.h"

namespace sophon {

struct CheckpointRestore {
  // (the module's tensor, the saved one), checked, in NamedTensors order.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> model;
  std::vector<double> learning_rates;  // checked: one a model
  torch::Tensor rng_cpu;
  std::vector<double> loss_scaler;  // checked; empty: none saved
  TrainingCursor cursor;
  // Restores the optimizer: an error leaves it unchanged; a throw may leave
  // it partly restored.
  std::function<absl::Status()> load_optimizer;
};

// LibTorch's CPU generator's state (dropout's).
torch::Tensor CpuRngState();

// The module's parameters, then its buffers, by name.
std::vector<std::pair<std::string, torch::Tensor>> NamedTensors(const torch::nn::Module& module);

// The optimizer a checkpoint names (ParseOptimizerKind); InvalidArgument
// naming `where` for another.
absl::StatusOr<OptimizerKind> ParseSavedOptimizer(const std::string& name,
                                                  const std::string& where);

// InvalidArgument naming `where` and both values when the checkpoint's
// identity differs from the trainer's.
absl::Status CheckIdentity(const CheckpointedState::Identity& saved,
                           const CheckpointedState::Identity& ours, const std::string& where);

// `saved` as the learning rates of `state` (one a model), and a loss
// scaler's state (empty when none), checked.
absl::StatusOr<std::vector<double>> CheckLearningRates(const torch::Tensor& saved,
                                                       const CheckpointedState& state,
                                                       const std::string& where);
absl::StatusOr<std::vector<double>> CheckLossScaler(const torch::Tensor& saved,
                                                    const std::string& where);

// Puts `restore` in place: the CPU generator, the optimizer, the model's
// tensors, the learning rates, the scaler; returns the cursor. An error
// before the optimizer changed leaves everything unchanged; after, it says
// the trainer's state is undefined.
absl::StatusOr<TrainingCursor> ApplyRestore(CheckpointRestore& restore, CheckpointedState& state,
                                            const std::string& where);

// Reads a checkpoint in the LibTorch archive format of earlier versions.
absl::StatusOr<TrainingCursor> ReadArchivedTrainingCheckpoint(const std::string& path,
                                                              CheckpointedState& state);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_CHECKPOINT_RESTORE_H_
