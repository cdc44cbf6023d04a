#include "sophon/ops/augment.h"

#include <cmath>
#include <deque>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

// Replays fixed draws the way torch does: uniform_(lo, hi) = lo + (hi - lo) * u.
class ScriptedSource : public UniformSource {
 public:
  ScriptedSource(std::deque<double> uniforms, std::deque<int64_t> ints)
      : uniforms_(std::move(uniforms)), ints_(std::move(ints)) {}
  double Uniform(double lo, double hi) override {
    const double u = uniforms_.front();
    uniforms_.pop_front();
    return lo + (hi - lo) * u;
  }
  int64_t RandInt(int64_t lo, int64_t hi) override {
    const int64_t v = ints_.front();
    ints_.pop_front();
    EXPECT_GE(v, lo);
    EXPECT_LT(v, hi);
    return v;
  }

 private:
  std::deque<double> uniforms_;
  std::deque<int64_t> ints_;
};

// torchvision RandomResizedCrop.get_params with scale draw 0.5 and log-ratio
// draw 0.5 on a 375x500 image: target area = 187500 * (0.08 + 0.92 * 0.5) =
// 101250, ratio 1, w = h = round(318.198) = 318; i = randint(0, 58), j =
// randint(0, 183).
TEST(SampleCropBoxTest, FirstAttemptMatchesTorchvision) {
  ScriptedSource src({0.5, 0.5}, {10, 20});
  const CropBox box = SampleCropBox(375, 500, AugmentOptions(), src);
  EXPECT_EQ(box.top, 10);
  EXPECT_EQ(box.left, 20);
  EXPECT_EQ(box.height, 318);
  EXPECT_EQ(box.width, 318);
}

// A draw that does not fit is retried: first attempt scale 0.99 on 100x1000
// (h = 315 > 100) fails, second attempt scale 0 and ratio draw 1.0 (ratio
// 4/3): target 8000, w = round(sqrt(8000 * 4/3)) = 103, h = round(77.46) = 77.
TEST(SampleCropBoxTest, RetriesWhenCropDoesNotFit) {
  ScriptedSource src({0.99, 0.5, 0.0, 1.0}, {3, 400});
  const CropBox box = SampleCropBox(100, 1000, AugmentOptions(), src);
  EXPECT_EQ(box.height, 77);
  EXPECT_EQ(box.width, 103);
  EXPECT_EQ(box.top, 3);
  EXPECT_EQ(box.left, 400);
}

// Ten failed attempts on a 100x1000 image (ratio 10 > 4/3): centre crop with
// h = 100, w = round(100 * 4/3) = 133, i = 0, j = (1000 - 133) // 2 = 433.
TEST(SampleCropBoxTest, FallbackCentreCropForWideImage) {
  std::deque<double> draws;
  for (int i = 0; i < 10; ++i) {
    draws.push_back(0.99);
    draws.push_back(0.5);
  }
  ScriptedSource src(draws, {});
  const CropBox box = SampleCropBox(100, 1000, AugmentOptions(), src);
  EXPECT_EQ(box.top, 0);
  EXPECT_EQ(box.left, 433);
  EXPECT_EQ(box.height, 100);
  EXPECT_EQ(box.width, 133);
}

// Tall image (ratio 0.1 < 3/4): w = 100, h = round(100 / 0.75) = 133.
TEST(SampleCropBoxTest, FallbackCentreCropForTallImage) {
  std::deque<double> draws;
  for (int i = 0; i < 10; ++i) {
    draws.push_back(0.99);
    draws.push_back(0.5);
  }
  ScriptedSource src(draws, {});
  const CropBox box = SampleCropBox(1000, 100, AugmentOptions(), src);
  EXPECT_EQ(box.top, 433);
  EXPECT_EQ(box.left, 0);
  EXPECT_EQ(box.height, 133);
  EXPECT_EQ(box.width, 100);
}

TEST(SampleCropBoxTest, HugeRatioRangesFromAClientGiveAValidBox) {
  // Finite but extreme ratios (a client sends them) once overflowed the
  // int conversion of the crop side (undefined behaviour; the request fuzzer
  // found it). Every box must lie inside the image.
  for (double ratio_max : {1e10, 1e92, 1e300}) {
    AugmentOptions o;
    o.ratio_min = 1e-300;
    o.ratio_max = ratio_max;
    ASSERT_TRUE(o.Validate().ok());
    for (uint64_t id = 0; id < 20; ++id) {
      CounterRng rng(SampleKey{1, 0, id}, 0);
      const CropBox b = SampleCropBox(300, 200, o, rng);
      EXPECT_GE(b.top, 0);
      EXPECT_GE(b.left, 0);
      EXPECT_GE(b.height, 1);
      EXPECT_GE(b.width, 1);
      EXPECT_LE(b.top + b.height, 300);
      EXPECT_LE(b.left + b.width, 200);
    }
  }
}

TEST(AugmentForTest, PureFunctionOfSeedEpochAndId) {
  AugmentOptions opts;
  const SampleAugment a = AugmentFor({7, 3, 42}, 480, 640, opts);
  const SampleAugment b = AugmentFor({7, 3, 42}, 480, 640, opts);
  EXPECT_EQ(a.box.top, b.box.top);
  EXPECT_EQ(a.box.left, b.box.left);
  EXPECT_EQ(a.box.height, b.box.height);
  EXPECT_EQ(a.box.width, b.box.width);
  EXPECT_EQ(a.flip, b.flip);
  // Another epoch or id gives other boxes (for nearly all of 100 samples).
  int same = 0;
  for (uint64_t id = 0; id < 100; ++id) {
    const SampleAugment x = AugmentFor({7, 3, id}, 480, 640, opts);
    const SampleAugment y = AugmentFor({7, 4, id}, 480, 640, opts);
    same += x.box.top == y.box.top && x.box.left == y.box.left && x.box.width == y.box.width;
  }
  EXPECT_LT(same, 3);
}

TEST(AugmentForTest, SameResultsFromManyThreads) {
  AugmentOptions opts;
  std::vector<SampleAugment> expected;
  for (uint64_t id = 0; id < 500; ++id) expected.push_back(AugmentFor({1, 0, id}, 300, 400, opts));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t id = 0; id < 500; ++id) {
        const SampleAugment a = AugmentFor({1, 0, id}, 300, 400, opts);
        mismatches[t] += a.box.top != expected[id].box.top ||
                         a.box.left != expected[id].box.left || a.flip != expected[id].flip;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(AugmentForTest, DistributionLooksLikeTorchvision) {
  AugmentOptions opts;
  int flips = 0;
  double area_sum = 0;
  const int n = 4000;
  for (int id = 0; id < n; ++id) {
    const SampleAugment a = AugmentFor({0, 0, static_cast<uint64_t>(id)}, 768, 1024, opts);
    flips += a.flip;
    area_sum += static_cast<double>(a.box.width) * a.box.height / (768.0 * 1024.0);
    ASSERT_GE(a.box.top, 0);
    ASSERT_GE(a.box.left, 0);
    ASSERT_LE(a.box.top + a.box.height, 768);
    ASSERT_LE(a.box.left + a.box.width, 1024);
  }
  EXPECT_NEAR(flips / static_cast<double>(n), 0.5, 0.04);
  // Mean area fraction is a bit below the uniform mean 0.54 (large draws are
  // rejected more often on a 4:3 image).
  EXPECT_GT(area_sum / n, 0.40);
  EXPECT_LT(area_sum / n, 0.56);
}

TEST(AugmentForTest, EvaluationTransformIsTheCentreSquareUnflippedEveryEpoch) {
  AugmentOptions o;
  o.crop_size = 224;
  o.eval_resize = 256;
  // Shorter side 300: a square of 300 * 224 / 256 = 262.5 -> 262 (half to
  // even), centred.
  for (uint64_t epoch : {0, 1, 7}) {
    for (uint64_t id : {0, 5, 99}) {
      const SampleAugment a = AugmentFor(SampleKey{3, epoch, id}, 300, 400, o);
      EXPECT_EQ(a.box.height, 262);
      EXPECT_EQ(a.box.width, 262);
      EXPECT_EQ(a.box.top, 19);
      EXPECT_EQ(a.box.left, 69);
      EXPECT_FALSE(a.flip);
      EXPECT_FALSE(FlipFor(SampleKey{3, epoch, id}, o));
    }
  }
  const CropBox tall = EvalCropBox(512, 256, o);  // shorter side 256: 224 x 224
  EXPECT_EQ(tall.height, 224);
  EXPECT_EQ(tall.top, 144);
  EXPECT_EQ(tall.left, 16);
  const CropBox tiny = EvalCropBox(1, 1, o);  // never empty
  EXPECT_EQ(tiny.height, 1);
  EXPECT_EQ(tiny.width, 1);
  // Random crops with the same options otherwise differ between epochs.
  o.eval_resize = 0;
  EXPECT_NE(AugmentFor(SampleKey{3, 0, 5}, 300, 400, o).box.top +
                AugmentFor(SampleKey{3, 0, 5}, 300, 400, o).box.height * 1000,
            AugmentFor(SampleKey{3, 1, 5}, 300, 400, o).box.top +
                AugmentFor(SampleKey{3, 1, 5}, 300, 400, o).box.height * 1000);
}

TEST(AugmentOptionsTest, ValidateNamesTheProblem) {
  AugmentOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.crop_size = 0;
  EXPECT_NE(o.Validate().message().find("crop size"), std::string::npos);
  o = AugmentOptions();
  o.scale_min = 0.9;
  o.scale_max = 0.5;
  EXPECT_NE(o.Validate().message().find("scale"), std::string::npos);
  o = AugmentOptions();
  o.ratio_min = -1;
  EXPECT_NE(o.Validate().message().find("ratio"), std::string::npos);
  o = AugmentOptions();
  o.eval_resize = o.crop_size - 1;
  EXPECT_NE(o.Validate().message().find("evaluation resize"), std::string::npos);
  o.eval_resize = o.crop_size;
  EXPECT_TRUE(o.Validate().ok());
}

}  // namespace
}  // namespace sophon
