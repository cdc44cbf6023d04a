// The state of LibTorch's SGD and Adam optimizers as a checkpoint dict
// (model/checkpoint_file.h), one entry a parameter in the order of their
// parameter groups, as PyTorch's optimizer.state_dict()["state"] numbers them:
//   "kind":  "sgd" | "adam"
//   "state": a list, one dict a parameter: {} before its first step, SGD's
//            {"momentum_buffer"}, Adam's {"step", "exp_avg", "exp_avg_sq"[,
//            "max_exp_avg_sq"]} (CPU tensors; "step" an int)
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_OPTIMIZER_STATE_H_
#define SOPHON_CLIENT_TORCH_OPTIMIZER_STATE_H_

#include <ATen/core/Dict.h>
#include <torch/optim/optimizer.h>

#include "absl/status/status.h"
#include "client/train/trainer.h"

namespace sophon {

c10::impl::GenericDict SaveOptimizerState(const torch::optim::Optimizer& optimizer,
                                          OptimizerKind kind);

// Replaces the optimizer's per-parameter state by `state`'s, each tensor on
// its parameter's device. InvalidArgument, changing nothing, when `state` is
// another kind's, or its count or shapes differ from the parameters'.
absl::Status LoadOptimizerState(const c10::impl::GenericDict& state,
                                torch::optim::Optimizer& optimizer, OptimizerKind kind);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_OPTIMIZER_STATE_H_
