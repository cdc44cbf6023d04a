#include "client/train/fused_optimizer.h"

#include <torch/serialize/archive.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

// `tensors` as "<key>/size" and "<key>/<i>".
void WriteTensors(OutputArchive& archive, const std::string& key,
                  const std::vector<torch::Tensor>& tensors) {
  archive.write(key + "/size", c10::IValue(static_cast<int64_t>(tensors.size())));
  for (size_t i = 0; i < tensors.size(); ++i) {
    archive.write(absl::StrCat(key, "/", i), tensors[i].detach().to(torch::kCPU),
                  /*is_buffer=*/true);
  }
}

// Reads what WriteTensors wrote, checking it against the shapes and dtypes of
// `like` (copy them in with CopyInto once everything is checked).
absl::StatusOr<std::vector<torch::Tensor>> ReadTensors(InputArchive& archive,
                                                       const std::string& key,
                                                       const std::vector<torch::Tensor>& like) {
  c10::IValue size;
  if (!archive.try_read(key + "/size", size) || !size.isInt()) {
    return absl::InvalidArgumentError(absl::StrCat("the optimizer state has no ", key));
  }
  if (size.toInt() != static_cast<int64_t>(like.size())) {
    return absl::InvalidArgumentError(absl::StrCat("the optimizer state holds ", size.toInt(),
                                                   " ", key, ", this optimizer ", like.size()));
  }
  std::vector<torch::Tensor> tensors(like.size());
  for (size_t i = 0; i < like.size(); ++i) {
    archive.read(absl::StrCat(key, "/", i), tensors[i], /*is_buffer=*/true);
    if (!tensors[i].sizes().equals(like[i].sizes()) ||
        tensors[i].scalar_type() != like[i].scalar_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the optimizer state's ", key, " ", i, " does not match parameter ", i));
    }
  }
  return tensors;
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
  FusedSgd(std::vector<torch::Tensor> params, std::vector<Hyperparameters> models)
      : FusedOptimizer(std::move(params), std::move(models)),
        decay_(AnyNonZero(&Hyperparameters::weight_decay)),
        momentum_(AnyNonZero(&Hyperparameters::momentum)),
        wd_(PerModel(Field(&Hyperparameters::weight_decay))),
        mu_(PerModel(Field(&Hyperparameters::momentum))) {
    if (momentum_) {
      for (const torch::Tensor& p : params_) buffers_.push_back(torch::zeros_like(p));
    }
  }

  void Step() override {
    torch::NoGradGuard no_grad;
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

  void Save(OutputArchive& archive) const override {
    archive.write("kind", c10::IValue(std::string("sgd")));
    WriteTensors(archive, "momentum_buffers", buffers_);
  }

  absl::Status Load(InputArchive& archive) override {
    c10::IValue kind;
    if (!archive.try_read("kind", kind) || !kind.isString() || kind.toStringRef() != "sgd") {
      return absl::InvalidArgumentError("the optimizer state is not SGD's");
    }
    absl::StatusOr<std::vector<torch::Tensor>> buffers =
        ReadTensors(archive, "momentum_buffers", buffers_);
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
// The bias corrections are computed on the device from the per-model betas.
class FusedAdam final : public FusedOptimizer {
 public:
  FusedAdam(std::vector<torch::Tensor> params, std::vector<Hyperparameters> models)
      : FusedOptimizer(std::move(params), std::move(models)),
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

  void Step() override {
    torch::NoGradGuard no_grad;
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

  void Save(OutputArchive& archive) const override {
    archive.write("kind", c10::IValue(std::string("adam")));
    archive.write("step", c10::IValue(step_));
    WriteTensors(archive, "exp_avg", exp_avg_);
    WriteTensors(archive, "exp_avg_sq", exp_avg_sq_);
  }

  absl::Status Load(InputArchive& archive) override {
    c10::IValue kind, step;
    if (!archive.try_read("kind", kind) || !kind.isString() || kind.toStringRef() != "adam") {
      return absl::InvalidArgumentError("the optimizer state is not Adam's");
    }
    if (!archive.try_read("step", step) || !step.isInt() || step.toInt() < 0) {
      return absl::InvalidArgumentError("the optimizer state has no step count");
    }
    absl::StatusOr<std::vector<torch::Tensor>> exp_avg =
        ReadTensors(archive, "exp_avg", exp_avg_);
    if (!exp_avg.ok()) return exp_avg.status();
    absl::StatusOr<std::vector<torch::Tensor>> exp_avg_sq =
        ReadTensors(archive, "exp_avg_sq", exp_avg_sq_);
    if (!exp_avg_sq.ok()) return exp_avg_sq.status();
    CopyInto(*exp_avg, exp_avg_);
    CopyInto(*exp_avg_sq, exp_avg_sq_);
    step_ = step.toInt();
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
                               std::vector<Hyperparameters> models)
    : params_(std::move(params)), models_(std::move(models)) {
  lr_ = PerModel(Field(&Hyperparameters::lr));
}

absl::StatusOr<std::unique_ptr<FusedOptimizer>> FusedOptimizer::Create(
    OptimizerKind kind, std::vector<torch::Tensor> params,
    const std::vector<Hyperparameters>& models) {
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
  if (kind == OptimizerKind::kAdam) {
    return std::unique_ptr<FusedOptimizer>(new FusedAdam(std::move(params), models));
  }
  return std::unique_ptr<FusedOptimizer>(new FusedSgd(std::move(params), models));
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

}  // namespace sophon
