// A copy of what a training step changes in a model, taken before steps that
// must leave no trace (Trainer::TrialSteps: timing the step before training)
// and put back after them: the parameters, their gradients (or their
// absence), the buffers (BatchNorm statistics), and the random generators
// (the CPU one, and the model's device's when it is a GPU: dropout draws from
// them). The optimizer is not copied: trial steps step an optimizer of their
// own (TorchTrainerBase::NewTrialOptimizer), never the trainer's.
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_STATE_SNAPSHOT_H_
#define SOPHON_CLIENT_TORCH_STATE_SNAPSHOT_H_

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sophon {

class ModelStateSnapshot {
 public:
  // Copies `module` (on `device`), on the device its tensors live on.
  // Internal when LibTorch throws.
  static absl::StatusOr<ModelStateSnapshot> Take(const torch::nn::Module& module,
                                                 const torch::Device& device);

  // Puts the copy back into `module` (REQUIRES: the module it was taken from,
  // its tensors not replaced since): every parameter and buffer holds the
  // bytes it held at Take, a gradient undefined then is undefined again, and
  // the generators are where they were. Internal when LibTorch throws; the
  // module may then be partly restored.
  absl::Status Restore(torch::nn::Module& module) const;

  // Bytes of the tensors held.
  int64_t bytes() const { return bytes_; }

 private:
  ModelStateSnapshot() = default;

  torch::Device device_ = torch::kCPU;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> gradients_;  // undefined where a parameter had none
  std::vector<torch::Tensor> buffers_;
  torch::Tensor cpu_rng_;
  torch::Tensor device_rng_;  // undefined unless device_ is a GPU
  int64_t bytes_ = 0;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_STATE_SNAPSHOT_H_
