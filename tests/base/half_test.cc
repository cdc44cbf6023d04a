#include "sophon/base/half.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);  // the largest half
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // halfway to 2^16: rounds to infinity
  EXPECT_EQ(FloatToHalf(1e9f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // halfway to it: ties to even (0)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // the smallest normal
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(0.1f), 0x2e66);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
}

TEST(HalfTest, EveryHalfSurvivesARoundTrip) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(h & 0x7c00, 0x7c00u);
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << h << " -> " << f;
  }
}

TEST(HalfTest, RoundsToTheNearestHalf) {
  // Every float between two neighbouring halves goes to the nearer one.
  for (uint32_t h = 0x0000; h < 0x7bff; h += 97) {
    const float lo = HalfToFloat(static_cast<uint16_t>(h));
    const float hi = HalfToFloat(static_cast<uint16_t>(h + 1));
    for (float t : {0.25f, 0.49f, 0.51f, 0.75f}) {
      const float f = lo + (hi - lo) * t;
      EXPECT_EQ(FloatToHalf(f), t < 0.5f ? h : h + 1) << f;
    }
  }
  float in[3] = {1.0f, -2.0f, 0.5f};
  uint16_t halves[3];
  float back[3];
  FloatsToHalves(in, 3, halves);
  HalvesToFloats(halves, 3, back);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_EQ(back[2], 0.5f);
}

}  // namespace
}  // namespace sophon
