#include "client/torch/checkpoint_restore.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include <exception>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "client/torch/grad_scaler.h"
#include "client/torch/torch_step.h"

namespace sophon {
namespace {

std::string DescribeModels(bool fused, int64_t num_models) {
  return absl::StrCat(num_models, fused ? " (fused)" : " (unfused)");
}

void SetCpuRngState(const torch::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

torch::Tensor CpuRngState() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

std::vector<std::pair<std::string, torch::Tensor>> NamedTensors(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : module.named_parameters()) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) tensors.emplace_back(item.key(), item.value());
  return tensors;
}

absl::StatusOr<OptimizerKind> ParseSavedOptimizer(const std::string& name,
                                                  const std::string& where) {
  absl::StatusOr<OptimizerKind> kind = ParseOptimizerKind(name);
  if (!kind.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " was written by a trainer with optimizer ", name));
  }
  return kind;
}

absl::Status CheckIdentity(const CheckpointedState::Identity& saved,
                           const CheckpointedState::Identity& ours, const std::string& where) {
  const auto differs = [&](const std::string& what, const std::string& theirs,
                           const std::string& mine) {
    return absl::InvalidArgumentError(absl::StrCat(where, " was written by a trainer with ", what,
                                                   " ", theirs, "; this trainer has ", what, " ",
                                                   mine));
  };
  if (saved.arch != ours.arch) return differs("arch", saved.arch, ours.arch);
  if (saved.num_classes != ours.num_classes) {
    return differs("num_classes", std::to_string(saved.num_classes),
                   std::to_string(ours.num_classes));
  }
  if (saved.optimizer != ours.optimizer) {
    return differs("optimizer", OptimizerName(saved.optimizer), OptimizerName(ours.optimizer));
  }
  if (saved.fused != ours.fused || saved.num_models != ours.num_models) {
    return differs("model count", DescribeModels(saved.fused, saved.num_models),
                   DescribeModels(ours.fused, ours.num_models));
  }
  if (saved.finetune != ours.finetune) {
    const auto describe = [](bool head) {
      return std::string(head ? "on (the head only)" : "off (the whole network)");
    };
    return differs("finetune", describe(saved.finetune), describe(ours.finetune));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> CheckLearningRates(const torch::Tensor& saved,
                                                       const CheckpointedState& state,
                                                       const std::string& where) {
  const size_t num_lrs = state.LearningRates().size();
  if (saved.dim() != 1 || static_cast<size_t>(saved.numel()) != num_lrs) {
    return absl::InvalidArgumentError(absl::StrCat(where, " holds ", saved.numel(),
                                                   " learning rates, this trainer has ",
                                                   num_lrs));
  }
  const torch::Tensor lrs = saved.to(torch::kDouble).contiguous();
  return std::vector<double>(lrs.data_ptr<double>(), lrs.data_ptr<double>() + num_lrs);
}

absl::StatusOr<std::vector<double>> CheckLossScaler(const torch::Tensor& saved,
                                                    const std::string& where) {
  const torch::Tensor values = saved.to(torch::kDouble).contiguous().view({-1});
  std::vector<double> scaler(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
  if (absl::Status s = GradScaler::CheckState(scaler); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  }
  return scaler;
}

absl::StatusOr<TrainingCursor> ApplyRestore(CheckpointRestore& restore, CheckpointedState& state,
                                            const std::string& where) {
  // The generator checks the state's size: nothing has changed if it throws.
  const torch::Tensor previous_rng = CpuRngState();
  try {
    SetCpuRngState(restore.rng_cpu);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": bad CPU generator state: ", ExceptionText(e)));
  }
  const auto half_way = [&](absl::string_view why) {
    return absl::InternalError(absl::StrCat(where, ": restoring failed half-way (", why,
                                            "); the trainer's state is undefined"));
  };
  absl::Status optimizer_loaded;
  try {
    optimizer_loaded = restore.load_optimizer();
  } catch (const std::exception& e) {
    return half_way(ExceptionText(e));
  }
  if (!optimizer_loaded.ok()) {  // the optimizer is unchanged: so is the rest
    SetCpuRngState(previous_rng);
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": optimizer state: ", optimizer_loaded.message()));
  }
  try {
    torch::NoGradGuard no_grad;
    for (auto& [live, saved] : restore.model) live.copy_(saved);
    state.SetLearningRates(restore.learning_rates);
  } catch (const std::exception& e) {
    return half_way(ExceptionText(e));
  }
  if (!restore.loss_scaler.empty()) {
    if (absl::Status s = state.RestoreLossScaler(restore.loss_scaler); !s.ok()) {
      return half_way(s.message());
    }
  }
  return restore.cursor;
}

}  // namespace sophon
