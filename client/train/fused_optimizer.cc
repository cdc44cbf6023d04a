#include "client/train/fused_optimizer.h"

#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

// SGD, per model k:  d = g + wd_k * p;  buf = momentum_k * buf + d;  p -= lr_k * buf.
// (torch::optim::SGD starts the buffer as a copy of d: the same as a zero
// buffer here. A model with momentum 0 gets buf = d, plain SGD.)
class FusedSgd final : public FusedOptimizer {
 public:
  FusedSgd(std::vector<torch::Tensor> params, std::vector<Hyperparameters> models)
      : FusedOptimizer(std::move(params), std::move(models)) {
    for (const torch::Tensor& p : params_) buffers_.push_back(torch::zeros_like(p));
  }

  void Step() override {
    torch::NoGradGuard no_grad;
    const bool decay = AnyNonZero(&Hyperparameters::weight_decay);
    const bool momentum = AnyNonZero(&Hyperparameters::momentum);
    const std::vector<double> lr = Field(&Hyperparameters::lr);
    const std::vector<double> mu = Field(&Hyperparameters::momentum);
    const std::vector<double> wd = Field(&Hyperparameters::weight_decay);
    std::vector<double> neg_lr;
    for (double v : lr) neg_lr.push_back(-v);
    const PerModelValues wd_t = PerModel(wd), mu_t = PerModel(mu), neg_lr_t = PerModel(neg_lr);
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor p = params_[i];
      if (!p.grad().defined()) continue;
      torch::Tensor d = p.grad();
      if (decay) d = d.addcmul(p, wd_t.For(p));
      if (momentum) {
        buffers_[i].mul_(mu_t.For(p)).add_(d);
        d = buffers_[i];
      }
      p.addcmul_(d, neg_lr_t.For(p));
    }
  }

 private:
  std::vector<torch::Tensor> buffers_;
};

// Adam, per model k (t = steps taken, the same for every model):
//   g = g + wd_k * p;  m = b1_k m + (1 - b1_k) g;  v = b2_k v + (1 - b2_k) g^2;
//   p -= lr_k / (1 - b1_k^t) * m / (sqrt(v) / sqrt(1 - b2_k^t) + eps_k).
class FusedAdam final : public FusedOptimizer {
 public:
  FusedAdam(std::vector<torch::Tensor> params, std::vector<Hyperparameters> models)
      : FusedOptimizer(std::move(params), std::move(models)) {
    for (const torch::Tensor& p : params_) {
      exp_avg_.push_back(torch::zeros_like(p));
      exp_avg_sq_.push_back(torch::zeros_like(p));
    }
  }

  void Step() override {
    torch::NoGradGuard no_grad;
    ++step_;
    const bool decay = AnyNonZero(&Hyperparameters::weight_decay);
    const std::vector<double> wd = Field(&Hyperparameters::weight_decay);
    const std::vector<double> b1 = Field(&Hyperparameters::beta1);
    const std::vector<double> b2 = Field(&Hyperparameters::beta2);
    const std::vector<double> eps = Field(&Hyperparameters::eps);
    std::vector<double> one_minus_b1, one_minus_b2, sqrt_bc2, neg_step;
    for (size_t k = 0; k < models_.size(); ++k) {
      one_minus_b1.push_back(1 - b1[k]);
      one_minus_b2.push_back(1 - b2[k]);
      sqrt_bc2.push_back(std::sqrt(1 - std::pow(b2[k], step_)));
      neg_step.push_back(-models_[k].lr / (1 - std::pow(b1[k], step_)));
    }
    const PerModelValues wd_t = PerModel(wd), b1_t = PerModel(b1), b2_t = PerModel(b2),
                         eps_t = PerModel(eps), one_minus_b1_t = PerModel(one_minus_b1),
                         one_minus_b2_t = PerModel(one_minus_b2), sqrt_bc2_t = PerModel(sqrt_bc2),
                         neg_step_t = PerModel(neg_step);
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor p = params_[i];
      if (!p.grad().defined()) continue;
      torch::Tensor g = p.grad();
      if (decay) g = g.addcmul(p, wd_t.For(p));
      exp_avg_[i].mul_(b1_t.For(p)).addcmul_(g, one_minus_b1_t.For(p));
      exp_avg_sq_[i].mul_(b2_t.For(p)).addcmul_(g * g, one_minus_b2_t.For(p));
      torch::Tensor denom = (exp_avg_sq_[i].sqrt() / sqrt_bc2_t.For(p)).add_(eps_t.For(p));
      p.addcmul_(exp_avg_[i] / denom, neg_step_t.For(p));
    }
  }

 private:
  int64_t step_ = 0;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FusedOptimizer>> FusedOptimizer::Create(
    OptimizerKind kind, std::vector<torch::Tensor> params,
    const std::vector<Hyperparameters>& models) {
  const int64_t b = static_cast<int64_t>(models.size());
  if (b < 1) return absl::InvalidArgumentError("a fused optimizer needs at least 1 model");
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
  for (const torch::Tensor& p : params_) {
    // As torch::optim::Optimizer::zero_grad (LibTorch 1.13): zeroed, kept.
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

void FusedOptimizer::SetLearningRates(const std::vector<double>& lrs) {
  for (size_t k = 0; k < models_.size() && k < lrs.size(); ++k) models_[k].lr = lrs[k];
}

FusedOptimizer::PerModelValues FusedOptimizer::PerModel(const std::vector<double>& values) const {
  PerModelValues result;
  if (params_.empty()) return result;
  const torch::Tensor flat = torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble))
                                 .to(params_[0].options());
  int64_t max_dim = 1;
  for (const torch::Tensor& p : params_) max_dim = std::max<int64_t>(max_dim, p.dim());
  result.by_dim.resize(static_cast<size_t>(max_dim) + 1);
  for (int64_t dim = 1; dim <= max_dim; ++dim) {
    std::vector<int64_t> shape(static_cast<size_t>(dim), 1);
    shape[0] = static_cast<int64_t>(values.size());
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
