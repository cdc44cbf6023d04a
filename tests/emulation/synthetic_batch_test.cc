// Synthetic batches at the two stages a training device can receive.
#include "sophon/emulation/synthetic_batch.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(SyntheticBatchTest, TensorBatchHoldsNormalisedFloats) {
  const Batch b = MakeSyntheticBatch(5, 4, 3, 1);
  EXPECT_EQ(b.stage, Stage::kTensor);
  EXPECT_EQ(b.images.size(), 5u * 3 * 4 * 4);
  EXPECT_TRUE(b.pixels.empty());
  EXPECT_TRUE(std::any_of(b.images.begin(), b.images.end(), [](float v) { return v < 0; }));
  EXPECT_EQ(b.labels, (std::vector<int64_t>{0, 1, 2, 0, 1}));
}

TEST(SyntheticBatchTest, FlippedBatchHoldsUint8CropsOfTheSameShape) {
  const Batch b = MakeSyntheticBatch(5, 4, 3, 1, Stage::kFlipped);
  EXPECT_EQ(b.stage, Stage::kFlipped);
  EXPECT_EQ(b.pixels.size(), 5u * 4 * 4 * 3);
  EXPECT_TRUE(b.images.empty());
  EXPECT_EQ(b.n, 5);
  EXPECT_EQ(b.c, 3);
  EXPECT_EQ(b.h, 4);
  EXPECT_EQ(b.w, 4);
  // Spread over the byte range, not a constant.
  const std::set<uint8_t> values(b.pixels.begin(), b.pixels.end());
  EXPECT_GT(values.size(), 100u);
  // The same seed, the same pixels.
  EXPECT_EQ(MakeSyntheticBatch(5, 4, 3, 1, Stage::kFlipped).pixels, b.pixels);
  EXPECT_TRUE(b.flips.empty());
}

TEST(SyntheticBatchTest, CroppedBatchFlagsEveryOtherSampleForTheDeviceToFlip) {
  const Batch b = MakeSyntheticBatch(5, 4, 3, 1, Stage::kCropped);
  EXPECT_EQ(b.stage, Stage::kCropped);
  EXPECT_EQ(b.pixels, MakeSyntheticBatch(5, 4, 3, 1, Stage::kFlipped).pixels);
  EXPECT_EQ(b.flips, (std::vector<uint8_t>{0, 1, 0, 1, 0}));
}

}  // namespace
}  // namespace sophon
