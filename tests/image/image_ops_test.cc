#include "sophon/image/image_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

TEST(ResizeAreaRgbTest, IdentityWhenSizesMatch) {
  const Image8 img = testing::MakeTestImage(17, 23, 1);
  std::vector<uint8_t> out(img.pixels.size());
  ResizeAreaRgb(img.pixels.data(), 17, 23, 23 * 3, 3, 0, 0, 23, 17, 17, 23, out.data());
  EXPECT_EQ(out, img.pixels);
}

TEST(ResizeAreaRgbTest, HalvingAveragesTwoByTwoBlocks) {
  // 4x4 image, channel value = 10 * (y * 4 + x); the 2x2 means are exact.
  std::vector<uint8_t> src(4 * 4 * 3);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 3; ++c) src[(y * 4 + x) * 3 + c] = 10 * (y * 4 + x) + c;
  std::vector<uint8_t> out(2 * 2 * 3);
  ResizeAreaRgb(src.data(), 4, 4, 12, 3, 0, 0, 4, 4, 2, 2, out.data());
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
  ResizeAreaRgb(src.data(), 1, 3, 9, 3, 0.5, 0, 2.5, 1, 1, 1, out.data());
  EXPECT_EQ(out[0], 100);
  ResizeAreaRgb(src.data(), 1, 3, 9, 3, 1.0, 0, 3.0, 1, 1, 1, out.data());
  EXPECT_EQ(out[0], 150);
}

// The exact area mean of [x0, x1) x [y0, y1) for output pixel (ox, oy), channel c.
double ExactAreaMean(const std::vector<uint8_t>& rgb, int w, double x0, double y0, double x1,
                     double y1, int out_h, int out_w, int oy, int ox, int c) {
  const double sx = (x1 - x0) / out_w, sy = (y1 - y0) / out_h;
  const double a0 = x0 + ox * sx, a1 = a0 + sx, b0 = y0 + oy * sy, b1 = b0 + sy;
  double acc = 0, total = 0;
  for (int y = static_cast<int>(std::floor(b0)); y < std::ceil(b1); ++y) {
    const double wy = std::min(b1, y + 1.0) - std::max(b0, static_cast<double>(y));
    for (int x = static_cast<int>(std::floor(a0)); x < std::ceil(a1); ++x) {
      const double wt = wy * (std::min(a1, x + 1.0) - std::max(a0, static_cast<double>(x)));
      if (wt <= 0) continue;
      acc += wt * rgb[(static_cast<size_t>(y) * w + x) * 3 + c];
      total += wt;
    }
  }
  return acc / total;
}

struct ResizeCase {
  int src_h, src_w;
  double x0, y0, x1, y1;
  int out_h, out_w;
};

// The fixed-point kernels: the SSE2 path (RGBX input) and the portable path
// (RGB or RGBX, SIMD off) give the same bytes, each within one level of the
// exact area mean, for downscales of 1x to 2.5x, upscales and fractional boxes.
TEST(ResizeAreaRgbTest, SimdAndPortableKernelsAgreeAndStayWithinOneLevel) {
  const std::vector<ResizeCase> cases = {
      {300, 310, 3.25, 1.5, 301.75, 290.0, 224, 224},  // ~1.3x
      {560, 500, 0.0, 0.0, 500.0, 560.0, 224, 224},    // ~2.2x, 2.5x
      {230, 240, 10.4, 2.2, 237.9, 229.6, 224, 224},   // ~1.02x
      {120, 90, 5.5, 7.25, 80.0, 110.0, 224, 224},     // upscale
      {64, 64, 0.0, 0.0, 64.0, 64.0, 17, 31},          // odd sizes
      {7, 9, 0.5, 0.5, 8.5, 6.5, 3, 2},                // tiny source
  };
  for (const ResizeCase& k : cases) {
    const Image8 img = testing::MakeTestImage(k.src_h, k.src_w, 11);
    std::vector<uint8_t> rgbx(static_cast<size_t>(k.src_h) * k.src_w * 4);
    for (size_t i = 0; i < static_cast<size_t>(k.src_h) * k.src_w; ++i) {
      for (int c = 0; c < 3; ++c) rgbx[4 * i + c] = img.pixels[3 * i + c];
      rgbx[4 * i + 3] = 255;
    }
    const size_t n = static_cast<size_t>(k.out_h) * k.out_w * 3;
    std::vector<uint8_t> simd(n), portable_rgbx(n), portable_rgb(n);
    internal::ResizeArea(rgbx.data(), k.src_h, k.src_w, k.src_w * 4, 4, k.x0, k.y0, k.x1, k.y1,
                         k.out_h, k.out_w, simd.data(), /*allow_simd=*/true);
    internal::ResizeArea(rgbx.data(), k.src_h, k.src_w, k.src_w * 4, 4, k.x0, k.y0, k.x1, k.y1,
                         k.out_h, k.out_w, portable_rgbx.data(), /*allow_simd=*/false);
    internal::ResizeArea(img.pixels.data(), k.src_h, k.src_w, k.src_w * 3, 3, k.x0, k.y0, k.x1,
                         k.y1, k.out_h, k.out_w, portable_rgb.data(), /*allow_simd=*/true);
    EXPECT_EQ(simd, portable_rgbx) << k.src_h << "x" << k.src_w;
    EXPECT_EQ(simd, portable_rgb) << k.src_h << "x" << k.src_w;
    double max_err = 0;
    for (int oy = 0; oy < k.out_h; ++oy) {
      for (int ox = 0; ox < k.out_w; ++ox) {
        for (int c = 0; c < 3; ++c) {
          const double exact = ExactAreaMean(img.pixels, k.src_w, k.x0, k.y0, k.x1, k.y1,
                                             k.out_h, k.out_w, oy, ox, c);
          max_err = std::max(
              max_err, std::abs(simd[(static_cast<size_t>(oy) * k.out_w + ox) * 3 + c] - exact));
        }
      }
    }
    EXPECT_LE(max_err, 1.0) << k.src_h << "x" << k.src_w;
  }
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

// Every pixel, whichever kernel (SIMD on 8-pixel steps, scalar for the rest)
// handled it, is exactly float(x) * a + b with a float multiply then add.
TEST(ToTensorNormalizeTest, EveryValueAndWidthGivesTheExactFloats) {
  for (int width : {1, 7, 8, 9, 37, 224}) {
    const int height = 3;
    std::vector<uint8_t> hwc(static_cast<size_t>(height) * width * 3);
    for (size_t i = 0; i < hwc.size(); ++i) hwc[i] = static_cast<uint8_t>(i * 7 + 3);
    std::vector<float> chw(hwc.size());
    ToTensorNormalize(hwc.data(), height, width, chw.data());
    const size_t plane = static_cast<size_t>(height) * width;
    for (int c = 0; c < 3; ++c) {
      const float a = 1.0f / (255.0f * kImageNetStd[c]);
      const float b = -kImageNetMean[c] / kImageNetStd[c];
      for (size_t i = 0; i < plane; ++i) {
        const volatile float scaled = static_cast<float>(hwc[3 * i + c]) * a;  // no FMA
        ASSERT_EQ(chw[c * plane + i], scaled + b) << "width " << width << " c " << c << " i " << i;
      }
    }
  }
}

TEST(ToTensorNormalizeTest, MirroredEqualsFlipThenTensor) {
  for (int width : {7, 37}) {
    const Image8 img = testing::MakeTestImage(5, width, 3);
    std::vector<uint8_t> flipped = img.pixels;
    FlipHorizontalRgb(flipped.data(), 5, width);
    std::vector<float> expected(3 * 5 * width), mirrored(3 * 5 * width);
    ToTensorNormalize(flipped.data(), 5, width, expected.data());
    ToTensorNormalize(img.pixels.data(), 5, width, mirrored.data(), /*mirror=*/true);
    EXPECT_EQ(mirrored, expected) << "width " << width;
  }
}

}  // namespace
}  // namespace sophon
