#include "client/torch/grad_scaler.h"

#include <torch/nn.h>
#include <torch/types.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

torch::Tensor WithGrad(std::vector<float> grad) {
  torch::Tensor p = torch::zeros({static_cast<int64_t>(grad.size())}, torch::kFloat32);
  p.mutable_grad() = torch::tensor(grad, torch::kFloat32);
  return p;
}

TEST(GradScalerTest, UnscaleDividesTheGradientsAndSeesOverflow) {
  GradScaler scaler;
  EXPECT_EQ(scaler.scale(), 65536.0);
  const torch::Tensor a = WithGrad({65536.0f, -131072.0f});
  const torch::Tensor b = WithGrad({32768.0f});
  const torch::Tensor none = torch::zeros({3});  // no gradient: left alone
  EXPECT_TRUE(scaler.Unscale({a, b, none}));
  EXPECT_FLOAT_EQ(a.grad()[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(a.grad()[1].item<float>(), -2.0f);
  EXPECT_FLOAT_EQ(b.grad()[0].item<float>(), 0.5f);
  EXPECT_FALSE(none.grad().defined());

  const torch::Tensor inf = WithGrad({1.0f, std::numeric_limits<float>::infinity()});
  EXPECT_FALSE(scaler.Unscale({a, inf}));
  const torch::Tensor nan = WithGrad({std::numeric_limits<float>::quiet_NaN()});
  EXPECT_FALSE(scaler.Unscale({nan}));
  EXPECT_TRUE(scaler.Unscale({}));
}

TEST(GradScalerTest, TheScaleBacksOffOnOverflowAndGrowsAfterTheInterval) {
  GradScalerOptions options;
  options.init_scale = 1024;
  options.growth_interval = 3;
  GradScaler scaler(options);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped(), 1);
  scaler.Update(true);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 512);
  scaler.Update(false);  // an overflow restarts the count
  EXPECT_EQ(scaler.scale(), 256);
  for (int i = 0; i < 3; ++i) scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_EQ(scaler.skipped(), 2);
  // The state round-trips, counting included.
  scaler.Update(true);
  GradScaler restored(options);
  ASSERT_TRUE(restored.Restore(scaler.State()).ok());
  EXPECT_EQ(restored.scale(), 512);
  restored.Update(true);
  restored.Update(true);
  EXPECT_EQ(restored.scale(), 1024);
  EXPECT_FALSE(restored.Restore({0.0, 1.0}).ok());
  EXPECT_FALSE(restored.Restore({2.0}).ok());
  EXPECT_EQ(restored.scale(), 1024);
  // What a checkpoint may not hold: checked before anything is restored.
  EXPECT_TRUE(GradScaler::CheckState({512.0, 7.0}).ok());
  EXPECT_FALSE(GradScaler::CheckState({512.0, std::nan("")}).ok());
  EXPECT_FALSE(GradScaler::CheckState({512.0, 1e300}).ok());
  EXPECT_FALSE(GradScaler::CheckState({512.0, 1.5}).ok());
  EXPECT_FALSE(GradScaler::CheckState({std::numeric_limits<double>::infinity(), 0.0}).ok());
  EXPECT_FALSE(GradScaler::CheckState({-1.0, 0.0}).ok());
}

// Backward of the scaled loss, unscaled, gives the gradients of the loss.
TEST(GradScalerTest, ScaledBackwardThenUnscaleGivesTheGradients) {
  torch::manual_seed(3);
  torch::nn::Linear layer(8, 4);
  const torch::Tensor x = torch::randn({16, 8});
  const torch::Tensor y = torch::randint(0, 4, {16});
  torch::nn::functional::cross_entropy(layer(x), y).backward();
  std::vector<torch::Tensor> plain;
  for (const torch::Tensor& p : layer->parameters()) plain.push_back(p.grad().clone());
  layer->zero_grad(/*set_to_none=*/true);

  GradScaler scaler;
  scaler.Scale(torch::nn::functional::cross_entropy(layer(x), y)).backward();
  // Scaled, they differ; unscaled, they agree.
  EXPECT_GT((layer->parameters()[0].grad() - plain[0]).abs().max().item<float>(), 1.0f);
  ASSERT_TRUE(scaler.Unscale(layer->parameters()));
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(torch::allclose(layer->parameters()[i].grad(), plain[i], 1e-6, 1e-7))
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace sophon
