#include "client/torch/optimizer_state.h"

#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

// LibTorch keys a parameter's state by its TensorImpl: a pointer in 2.x, the
// pointer printed in 1.13.
template <typename Key>
Key StateKey(at::TensorImpl* impl);
template <>
[[maybe_unused]] std::string StateKey<std::string>(at::TensorImpl* impl) {
  std::ostringstream out;
  out << impl;
  return out.str();
}
template <>
[[maybe_unused]] void* StateKey<void*>(at::TensorImpl* impl) {
  return impl;
}

using StateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;

auto KeyOf(const torch::Tensor& param) {
  return StateKey<typename StateMap::key_type>(param.unsafeGetTensorImpl());
}

std::vector<torch::Tensor> Params(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const torch::Tensor& p : group.params()) params.push_back(p);
  }
  return params;
}

torch::Tensor Cpu(const torch::Tensor& t) { return t.detach().to(torch::kCPU).contiguous(); }

c10::impl::GenericDict NewDict() {
  return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
}

// One parameter's saved tensor `key`, checked against the parameter, on its
// device; an undefined tensor when absent and `optional`.
absl::StatusOr<torch::Tensor> ReadLike(const c10::impl::GenericDict& entry, const std::string& key,
                                       const torch::Tensor& param, size_t index, bool optional) {
  const auto found = entry.find(key);
  if (found == entry.end()) {
    if (optional) return torch::Tensor();
    return absl::InvalidArgumentError(
        absl::StrCat("the optimizer state of parameter ", index, " has no ", key));
  }
  if (!found->value().isTensor() || !found->value().toTensor().sizes().equals(param.sizes())) {
    return absl::InvalidArgumentError(absl::StrCat("the optimizer state's ", key, " of parameter ",
                                                   index, " does not match the parameter"));
  }
  return found->value().toTensor().to(param.device(), param.scalar_type());
}

}  // namespace

c10::impl::GenericDict SaveOptimizerState(const torch::optim::Optimizer& optimizer,
                                          OptimizerKind kind) {
  c10::impl::GenericList per_param(c10::AnyType::get());
  for (const torch::Tensor& p : Params(optimizer)) {
    c10::impl::GenericDict entry = NewDict();
    const auto found = optimizer.state().find(KeyOf(p));
    if (found != optimizer.state().end()) {
      if (kind == OptimizerKind::kSgd) {
        const auto& s = static_cast<const torch::optim::SGDParamState&>(*found->second);
        if (s.momentum_buffer().defined()) entry.insert("momentum_buffer", Cpu(s.momentum_buffer()));
      } else {
        const auto& s = static_cast<const torch::optim::AdamParamState&>(*found->second);
        entry.insert("step", s.step());
        entry.insert("exp_avg", Cpu(s.exp_avg()));
        entry.insert("exp_avg_sq", Cpu(s.exp_avg_sq()));
        if (s.max_exp_avg_sq().defined()) entry.insert("max_exp_avg_sq", Cpu(s.max_exp_avg_sq()));
      }
    }
    per_param.push_back(entry);
  }
  c10::impl::GenericDict state = NewDict();
  state.insert("kind", std::string(OptimizerName(kind)));
  state.insert("state", per_param);
  return state;
}

absl::Status LoadOptimizerState(const c10::impl::GenericDict& state,
                                torch::optim::Optimizer& optimizer, OptimizerKind kind) {
  const auto kind_entry = state.find("kind");
  if (kind_entry == state.end() || !kind_entry->value().isString() ||
      kind_entry->value().toStringRef() != OptimizerName(kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the optimizer state is not ", OptimizerName(kind), "'s"));
  }
  const auto list_entry = state.find("state");
  if (list_entry == state.end() || !list_entry->value().isList()) {
    return absl::InvalidArgumentError("the optimizer state has no per-parameter \"state\" list");
  }
  const c10::List<c10::IValue> saved = list_entry->value().toList();
  const std::vector<torch::Tensor> params = Params(optimizer);
  if (saved.size() != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the optimizer state holds ", saved.size(),
                                                   " parameters, this optimizer ",
                                                   params.size()));
  }
  // Everything is read and checked first, then it replaces the state.
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> restored(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const c10::IValue item = saved.get(i);
    if (!item.isGenericDict()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the optimizer state of parameter ", i, " is not a dict"));
    }
    const c10::impl::GenericDict entry = item.toGenericDict();
    if (entry.empty()) continue;  // no step taken yet
    if (kind == OptimizerKind::kSgd) {
      absl::StatusOr<torch::Tensor> buffer =
          ReadLike(entry, "momentum_buffer", params[i], i, /*optional=*/true);
      if (!buffer.ok()) return buffer.status();
      auto s = std::make_unique<torch::optim::SGDParamState>();
      if (buffer->defined()) s->momentum_buffer(*buffer);
      restored[i] = std::move(s);
      continue;
    }
    const auto step = entry.find("step");
    if (step == entry.end() || !step->value().isInt() || step->value().toInt() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the optimizer state of parameter ", i, " has no step count"));
    }
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->step(step->value().toInt());
    absl::StatusOr<torch::Tensor> t = ReadLike(entry, "exp_avg", params[i], i, false);
    if (!t.ok()) return t.status();
    s->exp_avg(*t);
    t = ReadLike(entry, "exp_avg_sq", params[i], i, false);
    if (!t.ok()) return t.status();
    s->exp_avg_sq(*t);
    t = ReadLike(entry, "max_exp_avg_sq", params[i], i, true);
    if (!t.ok()) return t.status();
    if (t->defined()) s->max_exp_avg_sq(*t);
    restored[i] = std::move(s);
  }
  optimizer.state().clear();
  for (size_t i = 0; i < params.size(); ++i) {
    if (restored[i] != nullptr) optimizer.state()[KeyOf(params[i])] = std::move(restored[i]);
  }
  return absl::OkStatus();
}

}  // namespace sophon
