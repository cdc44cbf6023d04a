#include "client/torch/device_ops.h"

#include <torch/torch.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "sophon/image/image_ops.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

// n random crops of h x w, uint8 HWC, back to back.
std::vector<uint8_t> Crops(int n, int h, int w) {
  std::vector<uint8_t> out;
  for (int i = 0; i < n; ++i) {
    const Image8 image = testing::MakeTestImage(h, w, 100 + i);
    out.insert(out.end(), image.pixels.begin(), image.pixels.end());
  }
  return out;
}

// The device ops on the CPU give the CPU pipeline's floats (the flip and
// ToTensorNormalize), sample by sample, flipped or not.
TEST(DeviceOpsTest, EqualsTheCpuPipelineWithAndWithoutFlips) {
  const int n = 5, h = 17, w = 23;
  std::vector<uint8_t> crops = Crops(n, h, w);
  const bool flips[n] = {true, false, false, true, true};
  torch::Tensor pixels = torch::from_blob(crops.data(), {n, h, w, 3}, torch::kUInt8).clone();
  torch::Tensor mask = torch::tensor(std::vector<int>{1, 0, 0, 1, 1}).to(torch::kBool);
  const torch::Tensor flipped = FinishOnDevice(pixels, mask);
  const torch::Tensor plain = FinishOnDevice(pixels);
  ASSERT_EQ(flipped.sizes(), (std::vector<int64_t>{n, 3, h, w}));
  ASSERT_EQ(flipped.scalar_type(), torch::kFloat32);
  const size_t per = 3 * h * w;
  for (int i = 0; i < n; ++i) {
    std::vector<float> expected(per), unflipped(per);
    const uint8_t* crop = crops.data() + static_cast<size_t>(i) * h * w * 3;
    std::vector<uint8_t> copy(crop, crop + h * w * 3);
    if (flips[i]) FlipHorizontalRgb(copy.data(), h, w);
    ToTensorNormalize(copy.data(), h, w, expected.data());
    ToTensorNormalize(crop, h, w, unflipped.data());
    const float* got = flipped[i].contiguous().data_ptr<float>();
    const float* got_plain = plain[i].contiguous().data_ptr<float>();
    double worst = 0, worst_plain = 0;
    for (size_t k = 0; k < per; ++k) {
      worst = std::max(worst, static_cast<double>(std::fabs(got[k] - expected[k])));
      worst_plain = std::max(worst_plain, static_cast<double>(std::fabs(got_plain[k] - unflipped[k])));
    }
    EXPECT_LE(worst, 1e-6) << "sample " << i;
    EXPECT_LE(worst_plain, 1e-6) << "sample " << i;
  }
}

TEST(DeviceOpsTest, RefusesWhatIsNotUint8Crops) {
  EXPECT_THROW(FinishOnDevice(torch::zeros({2, 4, 4, 3}, torch::kFloat32)), c10::Error);
  EXPECT_THROW(FinishOnDevice(torch::zeros({2, 4, 4, 1}, torch::kUInt8)), c10::Error);
  EXPECT_THROW(FinishOnDevice(torch::zeros({2, 4, 4, 3}, torch::kUInt8),
                              torch::zeros({3}, torch::kBool)),
               c10::Error);
}

}  // namespace
}  // namespace sophon
