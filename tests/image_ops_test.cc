#include "sophon/image_ops.h"

#include <vector>

#include "gtest/gtest.h"
#include "test_util.h"

namespace sophon {
namespace {

TEST(ResizeAreaRgbTest, IdentityWhenSizesMatch) {
  const Image8 img = testing::MakeTestImage(17, 23, 1);
  std::vector<uint8_t> out(img.pixels.size());
  ResizeAreaRgb(img.pixels.data(), 17, 23, 23 * 3, 0, 0, 23, 17, 17, 23, out.data());
  EXPECT_EQ(out, img.pixels);
}

TEST(ResizeAreaRgbTest, HalvingAveragesTwoByTwoBlocks) {
  // 4x4 image, channel value = 10 * (y * 4 + x); the 2x2 means are exact.
  std::vector<uint8_t> src(4 * 4 * 3);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) src[(y * 4 + x) * 3 + c] = 10 * (y * 4 + x) + c;
  std::vector<uint8_t> out(2 * 2 * 3);
  ResizeAreaRgb(src.data(), 4, 4, 12, 0, 0, 4, 4, 2, 2, out.data());
  // block (0,0): values 0, 10, 40, 50 -> 25
  EXPECT_EQ(out[0], 25);
  EXPECT_EQ(out[1], 26);
  // block (1,1): 100, 110, 140, 150 -> 125
  EXPECT_EQ(out[(1 * 2 + 1) * 3], 125);
}

TEST(ResizeAreaRgbTest, FractionalBoxWeightsPartialPixels) {
  // One row: 0, 100, 200. The box [0.5, 2.5) mapped to one pixel covers half of
  // pixel 0, all of pixel 1 and half of pixel 2: (0 * .5 + 100 + 200 * .5) / 2 = 100.
  std::vector<uint8_t> src = {0, 0, 0, 100, 100, 100, 200, 200, 200};
  std::vector<uint8_t> out(3);
  ResizeAreaRgb(src.data(), 1, 3, 9, 0.5, 0, 2.5, 1, 1, 1, out.data());
  EXPECT_EQ(out[0], 100);
  ResizeAreaRgb(src.data(), 1, 3, 9, 1.0, 0, 3.0, 1, 1, 1, out.data());
  EXPECT_EQ(out[0], 150);
}

TEST(FlipHorizontalRgbTest, MirrorsAndIsAnInvolution) {
  const Image8 img = testing::MakeTestImage(5, 7, 2);
  std::vector<uint8_t> px = img.pixels;
  FlipHorizontalRgb(px.data(), 5, 7);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(px[c], img.pixels[6 * 3 + c]);
  FlipHorizontalRgb(px.data(), 5, 7);
  EXPECT_EQ(px, img.pixels);
}

TEST(ToTensorNormalizeTest, MatchesTorchvisionFormula) {
  const std::vector<uint8_t> hwc = {0, 128, 255, 10, 20, 30};  // 1 x 2 image
  std::vector<float> chw(6);
  ToTensorNormalize(hwc.data(), 1, 2, chw.data());
  EXPECT_NEAR(chw[0], (0 / 255.0 - 0.485) / 0.229, 1e-5);   // R, x=0
  EXPECT_NEAR(chw[1], (10 / 255.0 - 0.485) / 0.229, 1e-5);  // R, x=1
  EXPECT_NEAR(chw[2], (128 / 255.0 - 0.456) / 0.224, 1e-5); // G, x=0
  EXPECT_NEAR(chw[5], (30 / 255.0 - 0.406) / 0.225, 1e-5);  // B, x=1
}

}  // namespace
}  // namespace sophon
