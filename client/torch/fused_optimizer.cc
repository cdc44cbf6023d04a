#include "client/torch/fused_optimizer.h"

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

// `tensors` as a list of detached CPU copies.
c10::impl::GenericList TensorList(const std::vector<torch::Tensor>& tensors) {
  c10::impl::GenericList list(c10::TensorType::get());
  for (const torch::Tensor& t : tensors) list.push_back(t.detach().to(torch::kCPU).contiguous());
  return list;
}

// The list `state[key]`, checked against the shapes and dtypes of `like`
// (copy them in with CopyInto once everything is checked).
absl::StatusOr<std::vector<torch::Tensor>> ReadTensors(const c10::impl::GenericDict& state,
                                                       const std::string& key,
                                                       const std::vector<torch::Tensor>& like) {
  const auto found = state.find(key);
  if (found == state.end() || !found->value().isList()) {
    return absl::InvalidArgumentError(absl::StrCat("the optimizer state has no ", key));
  }
  const c10::List<c10::IValue> list = found->value().toList();
  if (list.size() != like.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the optimizer state holds ", list.size(),
                                                   " ", key, ", this optimizer ", like.size()));
  }
  std::vector<torch::Tensor> tensors(like.size());
  for (size_t i = 0; i < like.size(); ++i) {
    const c10::IValue item = list.get(i);
    if (!item.isTensor() || !item.toTensor().sizes().equals(like[i].sizes()) ||
        item.toTensor().scalar_type() != like[i].scalar_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the optimizer state's ", key, " ", i, " does not match parameter ", i));
    }
    tensors[i] = item.toTensor();
  }
  return tensors;
}

// An int entry >= 0 of `state`, or -1.
int64_t ReadCount(const c10::impl::GenericDict& state, const std::string& key) {
  const auto found = state.find(key);
  return found != state.end() && found->value().isInt() && found->value().toInt() >= 0
             ? found->value().toInt()
             : -1;
}

bool KindIs(const c10::impl::GenericDict& state, const std::string& kind) {
  const auto found = state.find("kind");
  return found != state.end() && found->value().isString() &&
         found->value().toStringRef() == kind;
}

void CopyInto(const std::vector<torch::Tensor>& from, std::vector<torch::Tensor>& to) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
}

// SGD, per model k:  d = g + wd_k * p;  buf = momentum_k * buf + d;  p -= lr_k * buf.
// (torch::optim::SGD starts the buffer as a copy of d: the same as a zero
// buffer here. A model with momentum 0 gets buf = d, plain SGD; with every
// momentum 0 there are no buffers, as in LibTorch.)
class FusedSgd final : public FusedOptimizer {
 public:
  FusedSgd(std::vector<torch::Tensor> params, std::vector<Hyperparameters> models, bool foreach)
      : FusedOptimizer(std::move(params), std::move(models), foreach),
        decay_(AnyNonZero(&Hyperparameters::weight_decay)),
        momentum_(AnyNonZero(&Hyperparameters::momentum)),
        wd_(PerModel(Field(&Hyperparameters::weight_decay))),
        mu_(PerModel(Field(&Hyperparameters::momentum))) {
    if (momentum_) {
      for (const torch::Tensor& p : params_) buffers_.push_back(torch::zeros_like(p));
    }
  }

  void StepPerParameter() override {
    const torch::Tensor neg_lr_flat = -lr_.flat;
    const PerModelValues neg_lr = Views(neg_lr_flat);
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor p = params_[i];
      if (!p.grad().defined()) continue;
      torch::Tensor d = p.grad();
      if (decay_) d = d.addcmul(p, wd_.For(p));
      if (momentum_) {
        buffers_[i].mul_(mu_.For(p)).add_(d);
        d = buffers_[i];
      }
      p.addcmul_(d, neg_lr.For(p));
    }
  }

  void StepForeach() override {
    const std::vector<size_t> active = WithGradients();
    if (active.empty()) return;
    const std::vector<torch::Tensor> p = Slices(params_, active);
    std::vector<torch::Tensor> d = GradientSlices(active);
    if (decay_) d = WithWeightDecay(p, d, active);
    if (momentum_) {
      const std::vector<torch::Tensor> buffers = Slices(buffers_, active);
      at::_foreach_mul_(buffers, PerSlice(Field(&Hyperparameters::momentum), active));
      at::_foreach_add_(buffers, d);
      d = buffers;
    }
    std::vector<double> neg_lr = Field(&Hyperparameters::lr);
    for (double& lr : neg_lr) lr = -lr;
    at::_foreach_add_(p, at::_foreach_mul(d, PerSlice(neg_lr, active)));
  }

  c10::impl::GenericDict State() const override {
    c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
    state.insert("kind", std::string("sgd"));
    state.insert("momentum_buffers", TensorList(buffers_));
    return state;
  }

  absl::Status LoadState(const c10::impl::GenericDict& state) override {
    if (!KindIs(state, "sgd")) return absl::InvalidArgumentError("the optimizer state is not SGD's");
    absl::StatusOr<std::vector<torch::Tensor>> buffers =
        ReadTensors(state, "momentum_buffers", buffers_);
    if (!buffers.ok()) return buffers.status();
    CopyInto(*buffers, buffers_);
    return absl::OkStatus();
  }

 private:
  const bool decay_, momentum_;
  const PerModelValues wd_, mu_;
  std::vector<torch::Tensor> buffers_;
};

// Adam, per model k (t = steps taken, the same for every model):
//   g = g + wd_k * p;  m = b1_k m + (1 - b1_k) g;  v = b2_k v + (1 - b2_k) g^2;
//   p -= lr_k / (1 - b1_k^t) * m / (sqrt(v) / sqrt(1 - b2_k^t) + eps_k).
class FusedAdam final : public FusedOptimizer {
 public:
  FusedAdam(std::vector<torch::Tensor> params, std::vector<Hyperparameters> models,
            bool foreach)
      : FusedOptimizer(std::move(params), std::move(models), foreach),
        decay_(AnyNonZero(&Hyperparameters::weight_decay)),
        wd_(PerModel(Field(&Hyperparameters::weight_decay))),
        b1_(PerModel(Field(&Hyperparameters::beta1))),
        b2_(PerModel(Field(&Hyperparameters::beta2))),
        eps_(PerModel(Field(&Hyperparameters::eps))),
        one_minus_b1_(Views(1 - b1_.flat)),
        one_minus_b2_(Views(1 - b2_.flat)) {
    for (const torch::Tensor& p : params_) {
      exp_avg_.push_back(torch::zeros_like(p));
      exp_avg_sq_.push_back(torch::zeros_like(p));
    }
  }

  // The bias corrections on the device (in the parameters' dtype) from the
  // per-model betas.
  void StepPerParameter() override {
    ++step_;
    const double t = static_cast<double>(step_);
    const torch::Tensor neg_step_flat = -lr_.flat / (1 - b1_.flat.pow(t));
    const torch::Tensor sqrt_bc2_flat = (1 - b2_.flat.pow(t)).sqrt();
    const PerModelValues neg_step = Views(neg_step_flat);
    const PerModelValues sqrt_bc2 = Views(sqrt_bc2_flat);
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor p = params_[i];
      if (!p.grad().defined()) continue;
      torch::Tensor g = p.grad();
      if (decay_) g = g.addcmul(p, wd_.For(p));
      exp_avg_[i].mul_(b1_.For(p)).addcmul_(g, one_minus_b1_.For(p));
      exp_avg_sq_[i].mul_(b2_.For(p)).addcmul_(g * one_minus_b2_.For(p), g);
      // denom = sqrt(v) / sqrt(1 - b2^t) + eps, then m / denom, in one buffer.
      torch::Tensor denom = exp_avg_sq_[i].sqrt();
      denom.div_(sqrt_bc2.For(p)).add_(eps_.For(p));
      torch::div_out(denom, exp_avg_[i], denom);
      p.addcmul_(denom, neg_step.For(p));
    }
  }

  // The bias corrections in double on the host, as torch::optim::Adam
  // computes them.
  void StepForeach() override {
    ++step_;  // as StepPerParameter: every step counts, with gradients or not
    const std::vector<size_t> active = WithGradients();
    if (active.empty()) return;
    const double t = static_cast<double>(step_);
    std::vector<double> one_minus_b1, one_minus_b2, neg_step, sqrt_bc2;
    for (const Hyperparameters& h : models_) {
      one_minus_b1.push_back(1 - h.beta1);
      one_minus_b2.push_back(1 - h.beta2);
      neg_step.push_back(-h.lr / (1 - std::pow(h.beta1, t)));
      sqrt_bc2.push_back(std::sqrt(1 - std::pow(h.beta2, t)));
    }
    const std::vector<torch::Tensor> p = Slices(params_, active);
    std::vector<torch::Tensor> g = GradientSlices(active);
    if (decay_) g = WithWeightDecay(p, g, active);
    const std::vector<torch::Tensor> m = Slices(exp_avg_, active);
    const std::vector<torch::Tensor> v = Slices(exp_avg_sq_, active);
    at::_foreach_mul_(m, PerSlice(Field(&Hyperparameters::beta1), active));
    at::_foreach_add_(m, at::_foreach_mul(g, PerSlice(one_minus_b1, active)));
    at::_foreach_mul_(v, PerSlice(Field(&Hyperparameters::beta2), active));
    at::_foreach_addcmul_(v, at::_foreach_mul(g, PerSlice(one_minus_b2, active)), g);
    const std::vector<torch::Tensor> denom = at::_foreach_sqrt(v);
    at::_foreach_div_(denom, PerSlice(sqrt_bc2, active));
    at::_foreach_add_(denom, PerSlice(Field(&Hyperparameters::eps), active));
    at::_foreach_addcdiv_(p, m, denom, PerSlice(neg_step, active));
  }

  c10::impl::GenericDict State() const override {
    c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
    state.insert("kind", std::string("adam"));
    state.insert("step", step_);
    state.insert("exp_avg", TensorList(exp_avg_));
    state.insert("exp_avg_sq", TensorList(exp_avg_sq_));
    return state;
  }

  absl::Status LoadState(const c10::impl::GenericDict& state) override {
    if (!KindIs(state, "adam")) {
      return absl::InvalidArgumentError("the optimizer state is not Adam's");
    }
    const int64_t step = ReadCount(state, "step");
    if (step < 0) return absl::InvalidArgumentError("the optimizer state has no step count");
    absl::StatusOr<std::vector<torch::Tensor>> exp_avg = ReadTensors(state, "exp_avg", exp_avg_);
    if (!exp_avg.ok()) return exp_avg.status();
    absl::StatusOr<std::vector<torch::Tensor>> exp_avg_sq =
        ReadTensors(state, "exp_avg_sq", exp_avg_sq_);
    if (!exp_avg_sq.ok()) return exp_avg_sq.status();
    CopyInto(*exp_avg, exp_avg_);
    CopyInto(*exp_avg_sq, exp_avg_sq_);
    step_ = step;
    return absl::OkStatus();
  }

 private:
  const bool decay_;
  const PerModelValues wd_, b1_, b2_, eps_, one_minus_b1_, one_minus_b2_;
  int64_t step_ = 0;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
};

}  // namespace

FusedOptimizer::FusedOptimizer(std::vector<torch::Tensor> params,
                               std::vector<Hyperparameters> models, bool foreach)
    : params_(std::move(params)), models_(std::move(models)), foreach_(foreach) {
  lr_ = PerModel(Field(&Hyperparameters::lr));
}

absl::StatusOr<std::unique_ptr<FusedOptimizer>> FusedOptimizer::Create(
    OptimizerKind kind, std::vector<torch::Tensor> params,
    const std::vector<Hyperparameters>& models, FusedStepOps ops) {
  const int64_t b = static_cast<int64_t>(models.size());
  if (b < 1) return absl::InvalidArgumentError("a fused optimizer needs at least 1 model");
  if (params.empty()) return absl::InvalidArgumentError("a fused optimizer needs parameters");
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].dim() < 1 || params[i].size(0) != b) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fused parameter ", i, " has ", params[i].dim() < 1 ? 0 : params[i].size(0),
          " models in its first dimension, the optimizer has ", b));
    }
  }
  const bool foreach = ops == FusedStepOps::kForeach ||
                       (ops == FusedStepOps::kAuto && params.front().is_cuda());
  if (kind == OptimizerKind::kAdam) {
    return std::unique_ptr<FusedOptimizer>(new FusedAdam(std::move(params), models, foreach));
  }
  return std::unique_ptr<FusedOptimizer>(new FusedSgd(std::move(params), models, foreach));
}

void FusedOptimizer::ZeroGrad() {
  // Dropped, not zeroed (zero_grad(set_to_none=True)): backward allocates
  // them afresh, and Step skips a parameter without one.
  for (const torch::Tensor& p : params_) {
    if (p.grad().defined()) p.mutable_grad().reset();
  }
}

absl::Status FusedOptimizer::SetLearningRates(const std::vector<double>& lrs) {
  if (lrs.size() != models_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("got ", lrs.size(), " learning rates for ",
                                                   models_.size(), " fused models"));
  }
  for (size_t k = 0; k < models_.size(); ++k) models_[k].lr = lrs[k];
  lr_ = PerModel(Field(&Hyperparameters::lr));
  return absl::OkStatus();
}

void FusedOptimizer::Step() {
  torch::NoGradGuard no_grad;
  if (foreach_) {
    StepForeach();
  } else {
    StepPerParameter();
  }
}

FusedOptimizer::PerModelValues FusedOptimizer::PerModel(const std::vector<double>& values) const {
  return Views(torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble))
                   .to(params_.front().options()));
}

FusedOptimizer::PerModelValues FusedOptimizer::Views(const torch::Tensor& flat) const {
  PerModelValues result;
  result.flat = flat;
  int64_t max_dim = 1;
  for (const torch::Tensor& p : params_) max_dim = std::max<int64_t>(max_dim, p.dim());
  result.by_dim.resize(static_cast<size_t>(max_dim) + 1);
  for (int64_t dim = 1; dim <= max_dim; ++dim) {
    std::vector<int64_t> shape(static_cast<size_t>(dim), 1);
    shape[0] = flat.size(0);
    result.by_dim[dim] = flat.view(shape);
  }
  return result;
}

std::vector<size_t> FusedOptimizer::WithGradients() const {
  std::vector<size_t> active;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].grad().defined()) active.push_back(i);
  }
  return active;
}

std::vector<torch::Tensor> FusedOptimizer::Slices(const std::vector<torch::Tensor>& tensors,
                                                  const std::vector<size_t>& active) const {
  std::vector<torch::Tensor> slices;
  slices.reserve(active.size() * models_.size());
  for (size_t i : active) {
    for (int64_t k = 0; k < static_cast<int64_t>(models_.size()); ++k) {
      slices.push_back(tensors[i].select(0, k));
    }
  }
  return slices;
}

std::vector<torch::Tensor> FusedOptimizer::GradientSlices(const std::vector<size_t>& active) const {
  std::vector<torch::Tensor> grads;
  grads.reserve(active.size());
  for (size_t i : active) {
    const torch::Tensor& p = params_[i];
    torch::Tensor g = p.grad();
    if (!g.strides().equals(p.strides())) {
      // The `_foreach_` fast path needs every list's tensors laid out alike.
      // A gradient may differ from its parameter only in the strides of
      // size-1 dimensions (LibTorch's gradient layout contract ignores
      // them; a channels-last 1x1 convolution's weight): the same memory,
      // viewed with the parameter's strides. Otherwise it is copied.
      bool same_memory = g.sizes().equals(p.sizes()) && g.is_non_overlapping_and_dense();
      for (int64_t d = 0; same_memory && d < p.dim(); ++d) {
        same_memory = p.size(d) == 1 || g.stride(d) == p.stride(d);
      }
      g = same_memory ? g.as_strided(p.sizes(), p.strides(), g.storage_offset())
                      : torch::empty_like(p).copy_(g);
    }
    grads.push_back(std::move(g));
  }
  std::vector<torch::Tensor> slices;
  slices.reserve(active.size() * models_.size());
  for (const torch::Tensor& g : grads) {
    for (int64_t k = 0; k < static_cast<int64_t>(models_.size()); ++k) {
      slices.push_back(g.select(0, k));
    }
  }
  return slices;
}

std::vector<torch::Tensor> FusedOptimizer::WithWeightDecay(const std::vector<torch::Tensor>& p,
                                                          const std::vector<torch::Tensor>& g,
                                                          const std::vector<size_t>& active) const {
  std::vector<torch::Tensor> decayed =
      at::_foreach_mul(p, PerSlice(Field(&Hyperparameters::weight_decay), active));
  at::_foreach_add_(decayed, g);
  return decayed;
}

std::vector<c10::Scalar> FusedOptimizer::PerSlice(const std::vector<double>& per_model,
                                                  const std::vector<size_t>& active) const {
  std::vector<c10::Scalar> scalars;
  scalars.reserve(active.size() * per_model.size());
  for (size_t n = 0; n < active.size(); ++n) {
    for (double value : per_model) scalars.emplace_back(value);
  }
  return scalars;
}

std::vector<double> FusedOptimizer::Field(double Hyperparameters::*field) const {
  std::vector<double> values;
  for (const Hyperparameters& h : models_) values.push_back(h.*field);
  return values;
}

bool FusedOptimizer::AnyNonZero(double Hyperparameters::*field) const {
  for (const Hyperparameters& h : models_) {
    if (h.*field != 0) return true;
  }
  return false;
}

absl::Status FusedOptimizer::LoadArchived(torch::serialize::InputArchive& archive) {
  // Earlier versions wrote State()'s entries into the archive, each list of
  // tensors as "<key>/size" and "<key>/<i>".
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  for (const char* key : {"kind", "step"}) {
    if (c10::IValue value; archive.try_read(key, value)) state.insert(key, value);
  }
  for (const char* key : {"momentum_buffers", "exp_avg", "exp_avg_sq"}) {
    c10::IValue size;
    if (!archive.try_read(absl::StrCat(key, "/size"), size) || !size.isInt()) continue;
    c10::impl::GenericList list(c10::TensorType::get());
    for (int64_t i = 0; i < size.toInt(); ++i) {
      torch::Tensor t;
      archive.read(absl::StrCat(key, "/", i), t, /*is_buffer=*/true);
      list.push_back(t);
    }
    state.insert(key, list);
  }
  return LoadState(state);
}

}  // namespace sophon
