// Tests of what the LibTorch trainers share (torch_step.h): autocast, the
// channels-last layout.
#include "client/torch/torch_step.h"

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "sophon/data/batch.h"

namespace sophon {
namespace {

// AutocastScope (torch_step.h) runs matrix products in bfloat16 while it
// lives and puts the previous state back.
TEST(AutocastScopeTest, Bf16InsideFloat32After) {
  const torch::Tensor a = torch::randn({8, 8});
  {
    const AutocastScope autocast("bf16", torch::Device(torch::kCPU));
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
    {
      const AutocastScope off("off", torch::Device(torch::kCPU));
      EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);  // off changes nothing
    }
  }
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat32);
}

// ToChannelsLast and ToTensors(channels_last) change the layout, not the values.
TEST(ChannelsLastTest, WeightsAndBatchesTakeTheNhwcLayout) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3));
  const torch::Tensor before = conv->weight.detach().clone();
  ToChannelsLast(*conv);
  EXPECT_TRUE(conv->weight.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(conv->weight.is_contiguous());
  EXPECT_TRUE(torch::equal(conv->weight.detach(), before));
  EXPECT_EQ(conv->bias.dim(), 1);  // other tensors are left alone
  Batch batch;
  batch.n = 2;
  batch.h = 4;
  batch.w = 5;
  batch.images.assign(2 * 3 * 4 * 5, 0.5f);
  batch.labels = {0, 1};
  const BatchTensors nhwc = ToTensors(batch, torch::Device(torch::kCPU), /*channels_last=*/true);
  EXPECT_TRUE(nhwc.images.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(nhwc.images.is_contiguous());
  EXPECT_TRUE(ToTensors(batch, torch::Device(torch::kCPU)).images.is_contiguous());
}

}  // namespace
}  // namespace sophon
