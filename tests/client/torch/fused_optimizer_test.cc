// The fused optimizers on their own, without a model: parameters [B, ...] of
// every rank, seeded gradients, different hyperparameters per model, several
// steps and a learning-rate change, against torch::optim::SGD and
// torch::optim::Adam applied to each model's slice separately. In float32
// the two must agree to 1e-6 (the same arithmetic per element, in another
// order).
#include "client/torch/fused_optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/archive.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "model/checkpoint_file.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

constexpr int kModels = 3;
constexpr int kSteps = 6;
constexpr double kTolerance = 1e-6;

// Per model k: model 0 has no momentum and no weight decay, the others do,
// and every other setting differs from model to model.
std::vector<Hyperparameters> PerModelHyperparameters(OptimizerKind kind) {
  std::vector<Hyperparameters> h(kModels);
  for (int k = 0; k < kModels; ++k) {
    h[k].lr = kind == OptimizerKind::kSgd ? 0.05 / (k + 1) : 1e-2 / (k + 1);
    h[k].momentum = k == 0 ? 0.0 : 0.8 + 0.05 * k;
    h[k].weight_decay = k == 0 ? 0.0 : 1e-2 * k;
    h[k].beta1 = 0.9 - 0.05 * k;
    h[k].beta2 = 0.999 - 0.01 * k;
    h[k].eps = 1e-8 * (k + 1);
  }
  return h;
}

std::unique_ptr<torch::optim::Optimizer> Reference(OptimizerKind kind, const Hyperparameters& h,
                                                   std::vector<torch::Tensor> params) {
  if (kind == OptimizerKind::kSgd) {
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(h.lr).momentum(h.momentum).weight_decay(h.weight_decay));
  }
  return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(h.lr)
                                                          .betas({h.beta1, h.beta2})
                                                          .eps(h.eps)
                                                          .weight_decay(h.weight_decay));
}

void SetReferenceLearningRate(torch::optim::Optimizer& optimizer, OptimizerKind kind, double lr) {
  for (auto& group : optimizer.param_groups()) {
    if (kind == OptimizerKind::kSgd) {
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
    } else {
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
    }
  }
}

// Every optimizer both ways (FusedStepOps): the `_foreach_` ops run on the
// CPU too.
struct StepCase {
  OptimizerKind kind;
  FusedStepOps ops;
};

class FusedOptimizerStepTest : public ::testing::TestWithParam<StepCase> {};

TEST_P(FusedOptimizerStepTest, EqualsTorchOptimOnEachModelsSlice) {
  const OptimizerKind kind = GetParam().kind;
  torch::manual_seed(7);
  // Ranks 1 to 5 (a bias, a linear weight, a convolution's weight, ...), and
  // one parameter that never gets a gradient.
  const std::vector<std::vector<int64_t>> shapes = {
      {kModels}, {kModels, 5}, {kModels, 4, 3}, {kModels, 3, 2, 2}, {kModels, 2, 3, 3, 3}};
  std::vector<torch::Tensor> fused;
  for (const auto& shape : shapes) fused.push_back(torch::randn(shape).requires_grad_());
  const torch::Tensor frozen = torch::randn({kModels, 4}).requires_grad_();
  fused.push_back(frozen);
  const torch::Tensor frozen_before = frozen.detach().clone();

  const std::vector<Hyperparameters> h = PerModelHyperparameters(kind);
  // separate[k][i]: model k's copy of parameter i.
  std::vector<std::vector<torch::Tensor>> separate(kModels);
  std::vector<std::unique_ptr<torch::optim::Optimizer>> references;
  for (int k = 0; k < kModels; ++k) {
    for (const torch::Tensor& p : fused) {
      separate[k].push_back(p.detach()[k].clone().requires_grad_());
    }
    references.push_back(Reference(kind, h[k], separate[k]));
  }
  absl::StatusOr<std::unique_ptr<FusedOptimizer>> optimizer =
      FusedOptimizer::Create(kind, fused, h, GetParam().ops);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();

  for (int step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) {
      // A schedule's change of learning rates between steps.
      std::vector<double> lrs;
      for (int k = 0; k < kModels; ++k) lrs.push_back(h[k].lr * 0.3);
      ASSERT_TRUE((*optimizer)->SetLearningRates(lrs).ok());
      for (int k = 0; k < kModels; ++k) SetReferenceLearningRate(*references[k], kind, lrs[k]);
    }
    (*optimizer)->ZeroGrad();
    for (size_t i = 0; i + 1 < fused.size(); ++i) {
      fused[i].mutable_grad() = torch::randn(fused[i].sizes());
    }
    for (int k = 0; k < kModels; ++k) {
      references[k]->zero_grad();
      for (size_t i = 0; i + 1 < fused.size(); ++i) {
        separate[k][i].mutable_grad() = fused[i].grad()[k].clone();
      }
    }
    (*optimizer)->Step();
    for (int k = 0; k < kModels; ++k) references[k]->step();

    for (int k = 0; k < kModels; ++k) {
      for (size_t i = 0; i < fused.size(); ++i) {
        const double diff = (fused[i].detach()[k] - separate[k][i].detach()).abs().max().item<double>();
        EXPECT_LE(diff, kTolerance) << "step " << step << ", model " << k << ", parameter " << i;
      }
    }
  }
  EXPECT_TRUE(torch::equal(frozen.detach(), frozen_before));
}

// What Save writes, Load restores: a restored optimizer's next steps equal
// those of the one that went on.
TEST_P(FusedOptimizerStepTest, SavedStateResumesTheSameSteps) {
  const OptimizerKind kind = GetParam().kind;
  torch::manual_seed(8);
  std::vector<torch::Tensor> a = {torch::randn({kModels, 6}).requires_grad_(),
                                  torch::randn({kModels, 2, 3}).requires_grad_()};
  std::vector<torch::Tensor> b;
  for (const torch::Tensor& p : a) b.push_back(p.detach().clone().requires_grad_());
  const std::vector<Hyperparameters> h = PerModelHyperparameters(kind);
  auto first = FusedOptimizer::Create(kind, a, h, GetParam().ops);
  auto second = FusedOptimizer::Create(kind, b, h, GetParam().ops);
  ASSERT_TRUE(first.ok() && second.ok());
  auto step = [](std::vector<torch::Tensor>& params, FusedOptimizer& optimizer, int seed) {
    torch::manual_seed(seed);
    optimizer.ZeroGrad();
    for (torch::Tensor& p : params) p.mutable_grad() = torch::randn(p.sizes());
    optimizer.Step();
  };
  step(a, **first, 1);
  step(a, **first, 2);
  // Through a checkpoint file, as a training checkpoint keeps it.
  const std::string path = testing::TempDir() + "/fused_optimizer_state.pt";
  c10::impl::GenericDict root = NewCheckpointRoot("test");
  root.insert("optimizer", (*first)->State());
  ASSERT_TRUE(WriteCheckpointFile(path, root).ok());
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
  }
  absl::StatusOr<c10::impl::GenericDict> read = ReadCheckpointFile(path, "test");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE((*second)->LoadState(read->at("optimizer").toGenericDict()).ok());
  step(a, **first, 3);
  step(b, **second, 3);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].detach(), b[i].detach())) << "parameter " << i;
  }
}

// ZeroGrad drops the gradients (zero_grad(set_to_none=True)); a step then
// leaves a parameter without one unchanged.
TEST_P(FusedOptimizerStepTest, ZeroGradDropsGradientsAndStepSkipsThem) {
  std::vector<torch::Tensor> params = {torch::ones({2, 4}, torch::requires_grad()),
                                       torch::ones({2, 3}, torch::requires_grad())};
  Hyperparameters h;
  h.lr = 0.5;
  h.momentum = 0.9;
  h.weight_decay = 0.1;
  auto optimizer = FusedOptimizer::Create(GetParam().kind, params, {h, h}, GetParam().ops);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  (params[0] * params[0]).sum().backward();
  ASSERT_TRUE(params[0].grad().defined());
  ASSERT_FALSE(params[1].grad().defined());
  (*optimizer)->Step();
  EXPECT_FALSE(torch::equal(params[0].detach(), torch::ones({2, 4})));
  EXPECT_TRUE(torch::equal(params[1].detach(), torch::ones({2, 3})));
  (*optimizer)->ZeroGrad();
  EXPECT_FALSE(params[0].grad().defined());
  EXPECT_FALSE(params[1].grad().defined());
}

// The two ways of FusedStepOps against each other directly, over more steps.
TEST(FusedOptimizerTest, ForeachEqualsPerParameter) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam}) {
    SCOPED_TRACE(kind == OptimizerKind::kSgd ? "sgd" : "adam");
    torch::manual_seed(9);
    std::vector<torch::Tensor> a = {torch::randn({kModels, 7}).requires_grad_(),
                                    torch::randn({kModels, 3, 2, 2, 2}).requires_grad_()};
    std::vector<torch::Tensor> b;
    for (const torch::Tensor& p : a) b.push_back(p.detach().clone().requires_grad_());
    const std::vector<Hyperparameters> h = PerModelHyperparameters(kind);
    auto foreach = FusedOptimizer::Create(kind, a, h, FusedStepOps::kForeach);
    auto per_parameter = FusedOptimizer::Create(kind, b, h, FusedStepOps::kPerParameter);
    ASSERT_TRUE(foreach.ok() && per_parameter.ok());
    for (int step = 0; step < 3 * kSteps; ++step) {
      (*foreach)->ZeroGrad();
      (*per_parameter)->ZeroGrad();
      if (step == 5) {
        // A step without any gradient still counts as a step (Adam's bias
        // corrections) in both ways.
        (*foreach)->Step();
        (*per_parameter)->Step();
        continue;
      }
      for (size_t i = 0; i < a.size(); ++i) {
        a[i].mutable_grad() = torch::randn(a[i].sizes());
        b[i].mutable_grad() = a[i].grad().clone();
      }
      (*foreach)->Step();
      (*per_parameter)->Step();
      for (size_t i = 0; i < a.size(); ++i) {
        const double diff = (a[i].detach() - b[i].detach()).abs().max().item<double>();
        EXPECT_LE(diff, kTolerance) << "step " << step << ", parameter " << i;
      }
    }
  }
}

// Gradients laid out unlike their parameters (a channels-last 1x1
// convolution's weight gradient differs in the strides of its size-1
// dimensions; any other layout is possible too): the `_foreach_` step lines
// them up and gives the per-parameter step's result.
TEST(FusedOptimizerTest, ForeachTakesGradientsOfAnyLayout) {
  torch::manual_seed(10);
  const torch::Tensor start = torch::randn({kModels, 4, 3, 1, 1});
  const torch::Tensor grad = torch::randn({kModels, 4, 3, 1, 1});
  std::vector<torch::Tensor> grads = {
      // Strides of the size-1 dimensions changed: the same memory.
      grad.clone().as_strided(grad.sizes(), {12, 3, 1, 3, 3}),
      // Another order of the dimensions altogether.
      grad.permute({0, 2, 1, 3, 4}).contiguous().permute({0, 2, 1, 3, 4})};
  ASSERT_FALSE(grads[0].strides().equals(start.strides()));
  ASSERT_FALSE(grads[1].strides().equals(start.strides()));
  const std::vector<Hyperparameters> h = PerModelHyperparameters(OptimizerKind::kAdam);
  torch::Tensor reference = start.clone().requires_grad_();
  auto per_parameter =
      FusedOptimizer::Create(OptimizerKind::kAdam, {reference}, h, FusedStepOps::kPerParameter);
  ASSERT_TRUE(per_parameter.ok());
  reference.mutable_grad() = grad.clone();
  (*per_parameter)->Step();
  for (const torch::Tensor& g : grads) {
    torch::Tensor p = start.clone().requires_grad_();
    auto foreach = FusedOptimizer::Create(OptimizerKind::kAdam, {p}, h, FusedStepOps::kForeach);
    ASSERT_TRUE(foreach.ok());
    p.mutable_grad() = g;
    (*foreach)->Step();
    EXPECT_LE((p.detach() - reference.detach()).abs().max().item<double>(), kTolerance)
        << "gradient strides " << g.strides();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, FusedOptimizerStepTest,
    ::testing::Values(StepCase{OptimizerKind::kSgd, FusedStepOps::kForeach},
                      StepCase{OptimizerKind::kSgd, FusedStepOps::kPerParameter},
                      StepCase{OptimizerKind::kAdam, FusedStepOps::kForeach},
                      StepCase{OptimizerKind::kAdam, FusedStepOps::kPerParameter}),
    [](const ::testing::TestParamInfo<StepCase>& info) {
      return std::string(info.param.kind == OptimizerKind::kSgd ? "Sgd" : "Adam") +
             (info.param.ops == FusedStepOps::kForeach ? "Foreach" : "PerParameter");
    });

TEST(FusedOptimizerTest, ParametersMustHoldEveryModel) {
  std::vector<torch::Tensor> params = {torch::zeros({3, 4}, torch::requires_grad())};
  auto optimizer = FusedOptimizer::Create(OptimizerKind::kSgd, params, {Hyperparameters{}});
  EXPECT_EQ(optimizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(optimizer.status().message(), HasSubstr("3 models"));
}

}  // namespace
}  // namespace sophon
