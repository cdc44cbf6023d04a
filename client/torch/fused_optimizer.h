// Optimizers for fused model arrays (fused_models.h): one update for all B
// models at once, each model with its own hyperparameters. Slice k follows exactly the update LibTorch's torch::optim::SGD
// (momentum, weight decay; no dampening, no Nesterov) or torch::optim::Adam
// (no amsgrad) would apply to model k alone, up to float rounding.
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_FUSED_OPTIMIZER_H_
#define SOPHON_CLIENT_TORCH_FUSED_OPTIMIZER_H_

#include <ATen/core/Dict.h>
#include <torch/types.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/train/trainer.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace sophon {

// How a step runs its arithmetic (the same update either way):
//   kForeach: a short sequence of LibTorch's multi-tensor `_foreach_` ops
//     over every model's slice of every parameter, each model's
//     hyperparameters a list of scalars: 6 ops for SGD with momentum and
//     weight decay, 12 for Adam, whatever the number of parameters and
//     models; on a GPU each launches one kernel per few dozen tensors.
//   kPerParameter: a few ops per fused parameter, each model's
//     hyperparameters a [B, 1, ..., 1] tensor that broadcasts over its
//     slice. Fewer passes over memory: faster on a CPU, where a `_foreach_`
//     op is a loop over its tensors (tools/bench/step_ops.cc).
//   kAuto: kForeach for parameters on a CUDA device, else kPerParameter
//     (PyTorch's optimizers choose the same way).
enum class FusedStepOps { kAuto, kForeach, kPerParameter };

class FusedOptimizer {
 public:
  virtual ~FusedOptimizer() = default;

  // `params`: the fused array's parameters, each [B, ...] with B =
  // models.size(). InvalidArgument when a parameter's first dimension is not B.
  static absl::StatusOr<std::unique_ptr<FusedOptimizer>> Create(
      OptimizerKind kind, std::vector<torch::Tensor> params,
      const std::vector<Hyperparameters>& models, FusedStepOps ops = FusedStepOps::kAuto);

  // One update from the parameters' gradients (a parameter without a
  // gradient is left as it is).
  void Step();
  void ZeroGrad();

  // Sets each model's learning rate (a per-model schedule). InvalidArgument
  // unless there is one rate per model.
  absl::Status SetLearningRates(const std::vector<double>& lrs);
  std::vector<double> LearningRates() const { return Field(&Hyperparameters::lr); }

  // The state a resumed run needs beside the parameters and the learning
  // rates: SGD's momentum buffers, or Adam's moments and step count.
  // A dict: "kind" ("sgd" | "adam"), SGD's "momentum_buffers" or Adam's
  // "step", "exp_avg" and "exp_avg_sq" (lists of CPU tensors, one a fused
  // parameter, each [B, ...]).
  virtual c10::impl::GenericDict State() const = 0;
  // Restores what State gave. InvalidArgument, changing nothing, when it
  // holds another optimizer's state or other shapes.
  virtual absl::Status LoadState(const c10::impl::GenericDict& state) = 0;
  // The same from the LibTorch archive of an earlier version's checkpoint.
  absl::Status LoadArchived(torch::serialize::InputArchive& archive);

 protected:
  FusedOptimizer(std::vector<torch::Tensor> params, std::vector<Hyperparameters> models,
                 bool foreach);

  // Step's two ways (FusedStepOps), called without gradient recording.
  virtual void StepPerParameter() = 0;
  virtual void StepForeach() = 0;

  // One hyperparameter's B values as a [B] tensor on the parameters' device
  // in their dtype, viewed as [B, 1, ..., 1] for a parameter of any rank.
  // Built once (a step copies nothing from the host: on a GPU that would wait
  // for the backward pass to finish).
  struct PerModelValues {
    torch::Tensor flat;                 // [B]
    std::vector<torch::Tensor> by_dim;  // [d]: B followed by d - 1 ones (views of flat)
    const torch::Tensor& For(const torch::Tensor& param) const { return by_dim[param.dim()]; }
  };
  PerModelValues PerModel(const std::vector<double>& values) const;
  // `flat` ([B], on the device) viewed for every parameter rank.
  PerModelValues Views(const torch::Tensor& flat) const;

  // kForeach works on every model's slice of every parameter as one list
  // (parameter i, model k at i * B + k), with each model's hyperparameters
  // as a list of scalars (kernel arguments: nothing is copied to the device).
  // The parameters that have a gradient.
  std::vector<size_t> WithGradients() const;
  // Slice k of tensors[i] for each i in `active` and every k.
  std::vector<torch::Tensor> Slices(const std::vector<torch::Tensor>& tensors,
                                    const std::vector<size_t>& active) const;
  // The same slices of the parameters' gradients.
  std::vector<torch::Tensor> GradientSlices(const std::vector<size_t>& active) const;
  // g + weight_decay_k * p for every slice, in new tensors (the gradients
  // are not changed).
  std::vector<torch::Tensor> WithWeightDecay(const std::vector<torch::Tensor>& p,
                                             const std::vector<torch::Tensor>& g,
                                             const std::vector<size_t>& active) const;
  // per_model[k] for slice (i, k).
  std::vector<c10::Scalar> PerSlice(const std::vector<double>& per_model,
                                    const std::vector<size_t>& active) const;
  std::vector<double> Field(double Hyperparameters::*field) const;
  bool AnyNonZero(double Hyperparameters::*field) const;

  const std::vector<torch::Tensor> params_;
  std::vector<Hyperparameters> models_;
  const bool foreach_;
  PerModelValues lr_;  // rebuilt by SetLearningRates
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_FUSED_OPTIMIZER_H_
