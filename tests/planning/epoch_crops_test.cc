#include "sophon/planning/epoch_crops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace sophon {
namespace {

constexpr uint64_t kSeed = 7;

// 100 images of several sizes whose lossless crop's bytes and crop-dependent times follow
// the file's size and the part its crop box keeps, measured in epoch 0.
DatasetProfile ProfileOfEpochZero(const AugmentOptions& augment) {
  DatasetProfile p;
  p.crop_size = augment.crop_size;
  for (uint64_t id = 0; id < 100; ++id) {
    SampleProfile s;
    s.id = id;
    s.width = 400 + 8 * static_cast<uint32_t>(id % 13);
    s.height = 300 + 16 * static_cast<uint32_t>(id % 7);
    const CropExtent crop = CropExtentOf(SampleKey{kSeed, 0, id}, s.width, s.height, augment);
    s.crop_part = crop.part;
    s.crop_reach = crop.reach;
    const double raw = 100000.0 + 1000.0 * static_cast<double>(id % 17);
    s.bytes[Stage::kRaw] = static_cast<uint64_t>(raw);
    s.bytes[Stage::kJpegCrop] = static_cast<uint64_t>(std::llround(raw * (0.05 + 0.9 * s.crop_part)));
    SetSizedStageBytes(p.crop_size, &s);
    s.client[Op::kJpegCrop] = 0.001 + 0.002 * raw / 1e5 * s.crop_part + 0.003 * raw / 1e5 * s.crop_reach;
    s.client[Op::kDecodeCrop] = 0.004 + 0.001 * raw / 1e5 + 0.003 * raw / 1e5 * s.crop_part;
    s.client[Op::kDecodeJpegCrop] = 0.0005 + 0.004 * raw / 1e5 * s.crop_part;
    p.samples.push_back(s);
  }
  return p;
}

TEST(CropExtentTest, IsTheBoxsShareOfTheImageAndOfItsRows) {
  AugmentOptions augment;
  const SampleKey key{kSeed, 3, 42};
  const SampleAugment a = AugmentFor(key, 300, 400, augment);
  const CropExtent e = CropExtentOf(key, 400, 300, augment);
  EXPECT_DOUBLE_EQ(e.part, static_cast<double>(a.box.width) * a.box.height / (400.0 * 300.0));
  EXPECT_DOUBLE_EQ(e.reach, static_cast<double>(a.box.top + a.box.height) / 300.0);
  EXPECT_EQ(CropExtentOf(key, 0, 300, augment).part, 0);  // size unknown
  // The evaluation transform keeps the same box every epoch.
  augment.eval_resize = 256;
  EXPECT_DOUBLE_EQ(CropExtentOf(SampleKey{kSeed, 1, 42}, 400, 300, augment).part,
                   CropExtentOf(SampleKey{kSeed, 9, 42}, 400, 300, augment).part);
}

TEST(EpochCropModelTest, SetsEachSampleAtTheBoxItsEpochDraws) {
  const AugmentOptions augment;
  const DatasetProfile profile = ProfileOfEpochZero(augment);
  const std::optional<EpochCropModel> model = EpochCropModel::Fit(profile);
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->samples(), 100u);
  DatasetProfile epoch3 = profile;
  const double mean_part = model->Apply(kSeed, 3, augment, &epoch3);
  // Below the smallest part profiled, values stop at the smallest measured.
  double min_part = 1;
  for (const SampleProfile& s : profile.samples) min_part = std::min(min_part, s.crop_part);
  double sum = 0;
  int changed = 0, checked = 0;
  for (const SampleProfile& s : epoch3.samples) {
    const CropExtent e = CropExtentOf(SampleKey{kSeed, 3, s.id}, s.width, s.height, augment);
    const double part = e.part;
    sum += part;
    changed += s.bytes[Stage::kJpegCrop] != profile.samples[s.id].bytes[Stage::kJpegCrop];
    if (part < min_part) continue;
    ++checked;
    const double raw = static_cast<double>(s.bytes[Stage::kRaw]);
    EXPECT_NEAR(static_cast<double>(s.bytes[Stage::kJpegCrop]), raw * (0.05 + 0.9 * part), 2)
        << "sample " << s.id;
    EXPECT_NEAR(s.client[Op::kDecodeJpegCrop], 0.0005 + 0.004 * raw / 1e5 * part, 1e-9)
        << "sample " << s.id;
    EXPECT_NEAR(s.client[Op::kJpegCrop],
                0.001 + 0.002 * raw / 1e5 * part + 0.003 * raw / 1e5 * e.reach, 1e-9);
    EXPECT_NEAR(s.client[Op::kDecodeCrop],
                0.004 + 0.001 * raw / 1e5 + 0.003 * raw / 1e5 * part, 1e-9);
  }
  EXPECT_GT(checked, 80);
  EXPECT_NEAR(mean_part, sum / 100, 1e-12);
  EXPECT_GT(changed, 90);  // another epoch, other boxes
  // Epoch 0 gives back what was measured.
  DatasetProfile epoch0 = profile;
  model->Apply(kSeed, 0, augment, &epoch0);
  for (const SampleProfile& s : epoch0.samples) {
    EXPECT_NEAR(static_cast<double>(s.bytes[Stage::kJpegCrop]),
                static_cast<double>(profile.samples[s.id].bytes[Stage::kJpegCrop]), 2);
  }
}

TEST(EpochCropModelTest, BoxesThatAllReachAlikeAreFittedWithoutTheirReach) {
  // The evaluation transform on images of one shape: every box ends on the same row share,
  // which makes size * reach proportional to size.
  AugmentOptions eval;
  eval.eval_resize = 256;
  DatasetProfile profile = ProfileOfEpochZero(AugmentOptions());
  for (SampleProfile& s : profile.samples) {
    s.width = 400;
    s.height = 300;
    const CropExtent e = CropExtentOf(SampleKey{kSeed, 0, s.id}, s.width, s.height, eval);
    s.crop_part = e.part * (0.9 + 0.002 * static_cast<double>(s.id % 50));  // parts vary a little
    s.crop_reach = e.reach;
  }
  const std::optional<EpochCropModel> model = EpochCropModel::Fit(profile);
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->samples(), 100u);
}

TEST(EpochCropModelTest, NeedsTheImagesSizesAndTheLosslessCrop) {
  const AugmentOptions augment;
  DatasetProfile no_sizes = ProfileOfEpochZero(augment);
  for (size_t i = 0; i < no_sizes.samples.size(); ++i) {
    if (i >= kMinSamplesForCropFit - 1) no_sizes.samples[i].width = 0;  // 19 known
  }
  EXPECT_FALSE(EpochCropModel::Fit(no_sizes).has_value());
  DatasetProfile no_crop = ProfileOfEpochZero(augment);
  no_crop.stages.Remove(Stage::kJpegCrop);
  EXPECT_FALSE(EpochCropModel::Fit(no_crop).has_value());
  // Crops the storage node declined (sent whole) are neither fitted nor set.
  DatasetProfile declined = ProfileOfEpochZero(augment);
  declined.samples[5].bytes[Stage::kJpegCrop] = declined.samples[5].bytes[Stage::kRaw];
  const std::optional<EpochCropModel> model = EpochCropModel::Fit(declined);
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->samples(), 99u);
  model->Apply(kSeed, 2, augment, &declined);
  EXPECT_EQ(declined.samples[5].bytes[Stage::kJpegCrop], declined.samples[5].bytes[Stage::kRaw]);
}

}  // namespace
}  // namespace sophon
