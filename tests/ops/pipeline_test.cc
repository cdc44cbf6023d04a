#include "sophon/ops/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "sophon/base/half.h"
#include "tests/ops/fake_extractor.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

StageData Raw(const std::string& bytes) {
  StageData d;
  d.data = bytes;
  return d;
}

class PipelineTest : public ::testing::Test {
 protected:
  PipelineTest() {
    options_.augment.crop_size = 64;
    jpeg_ = testing::EncodeJpeg(testing::MakeTestImage(240, 320, 11));
  }
  PipelineOptions options_;
  std::string jpeg_;
};

// Whatever the split point, the same tensor comes out.
TEST_F(PipelineTest, EverySplitPointGivesIdenticalTensors) {
  for (uint64_t id = 0; id < 8; ++id) {
    const SampleKey key{5, 2, id};
    std::vector<float> reference(3 * 64 * 64);
    ASSERT_TRUE(FinishToTensor(Raw(jpeg_), key, options_, reference.data()).ok());
    for (int split = 0; split <= StageIndex(Stage::kTensor); ++split) {
      absl::StatusOr<StageData> mid =
          RunPipeline(Raw(jpeg_), static_cast<Stage>(split), key, options_);
      ASSERT_TRUE(mid.ok()) << mid.status();
      EXPECT_EQ(mid->stage, static_cast<Stage>(split));
      std::vector<float> out(3 * 64 * 64);
      ASSERT_TRUE(FinishToTensor(*std::move(mid), key, options_, out.data()).ok());
      EXPECT_EQ(0, std::memcmp(out.data(), reference.data(), out.size() * sizeof(float)))
          << "split " << split << " id " << id;
    }
  }
}

TEST_F(PipelineTest, StagePayloadSizes) {
  const SampleKey key{0, 0, 0};
  EXPECT_EQ(RunPipeline(Raw(jpeg_), Stage::kCropped, key, options_)->data.size(), 64u * 64 * 3);
  EXPECT_EQ(RunPipeline(Raw(jpeg_), Stage::kTensor, key, options_)->data.size(),
            64u * 64 * 3 * 4);
}

TEST_F(PipelineTest, RecordsOpTimes) {
  OpTimes times;
  ASSERT_TRUE(RunPipeline(Raw(jpeg_), Stage::kTensor, {0, 0, 1}, options_, &times).ok());
  EXPECT_GT(times[Op::kDecodeCrop], 0);
  EXPECT_GT(times[Op::kTensor], 0);  // thread CPU time, in nanoseconds: never 0 for a real op
}

TEST_F(PipelineTest, RejectsGoingBackAndMalformedPayloads) {
  absl::StatusOr<StageData> t = RunPipeline(Raw(jpeg_), Stage::kTensor, {0, 0, 1}, options_);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(RunPipeline(*t, Stage::kCropped, {0, 0, 1}, options_).status().code(),
            absl::StatusCode::kInvalidArgument);
  StageData bad;
  bad.stage = Stage::kFlipped;
  bad.height = bad.width = 64;
  bad.data = "short";
  std::vector<float> out(3 * 64 * 64);
  EXPECT_EQ(FinishToTensor(bad, {0, 0, 1}, options_, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(FinishToTensor(Raw("not a jpeg"), {0, 0, 1}, options_, out.data()).ok());
}

TEST_F(PipelineTest, ReportsTheSizeOfEveryStageItPasses) {
  PerStage<uint64_t> sizes;
  ASSERT_TRUE(
      RunPipeline(Raw(jpeg_), Stage::kTensor, {0, 0, 1}, options_, nullptr, &sizes).ok());
  EXPECT_EQ(sizes[Stage::kRaw], jpeg_.size());
  EXPECT_EQ(sizes[Stage::kCropped], 64u * 64 * 3);
  EXPECT_EQ(sizes[Stage::kFlipped], 64u * 64 * 3);
  EXPECT_EQ(sizes[Stage::kTensor], 64u * 64 * 3 * 4);

  // FinishToTensor fuses flip and tensor, and still reports both.
  PerStage<uint64_t> finished;
  std::vector<float> out(3 * 64 * 64);
  ASSERT_TRUE(
      FinishToTensor(Raw(jpeg_), {0, 0, 1}, options_, out.data(), nullptr, &finished).ok());
  EXPECT_EQ(finished, sizes);
}

TEST_F(PipelineTest, FeaturesAreTheBackbonesOnTheTensorInHalfPrecision) {
  const SampleKey key{5, 2, 3};
  // Without a backbone the op refuses, naming what is missing.
  absl::StatusOr<StageData> none = RunPipeline(Raw(jpeg_), Stage::kFeatures, key, options_);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("backbone"), std::string::npos) << none.status();

  testing::FakeExtractor fake(6);
  options_.backbone = &fake;
  std::vector<float> tensor(3 * 64 * 64);
  ASSERT_TRUE(FinishToTensor(Raw(jpeg_), key, options_, tensor.data()).ok());
  std::vector<float> expected(6);
  ASSERT_TRUE(fake.Extract(tensor.data(), 1, 64, expected.data()).ok());
  // From every split point, the same fp16 vector.
  for (int split = 0; split <= StageIndex(Stage::kFeatures); ++split) {
    absl::StatusOr<StageData> mid = RunPipeline(Raw(jpeg_), StageAt(split), key, options_);
    ASSERT_TRUE(mid.ok()) << mid.status();
    PerStage<uint64_t> sizes;
    absl::StatusOr<StageData> f =
        RunPipeline(*std::move(mid), Stage::kFeatures, key, options_, nullptr, &sizes);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_EQ(f->stage, Stage::kFeatures);
    EXPECT_EQ(f->height, 1);
    ASSERT_EQ(f->width, 6);
    ASSERT_EQ(f->data.size(), 12u);
    EXPECT_EQ(sizes[Stage::kFeatures], 12u);
    EXPECT_TRUE(CheckStageData(*f, 64).ok());
    const auto* halves = reinterpret_cast<const uint16_t*>(f->data.data());
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(halves[i], FloatToHalf(expected[i])) << "split " << split << " feature " << i;
    }
  }
  // A vector payload must be 1 x F with F elements' bytes.
  StageData bad;
  bad.stage = Stage::kFeatures;
  bad.height = 1;
  bad.width = 6;
  bad.data.assign(11, 'x');
  EXPECT_EQ(CheckStageData(bad, 64).code(), absl::StatusCode::kInvalidArgument);
  bad.data.assign(12, 'x');
  EXPECT_TRUE(CheckStageData(bad, 64).ok());
  bad.height = 2;
  EXPECT_EQ(CheckStageData(bad, 64).code(), absl::StatusCode::kInvalidArgument);
  // Features cannot be taken back to a tensor.
  bad.height = 1;
  std::vector<float> out(3 * 64 * 64);
  EXPECT_FALSE(FinishToTensor(bad, key, options_, out.data()).ok());
}

TEST_F(PipelineTest, PredictionsAreTheHeadsTopKOnTheHalfPrecisionFeatures) {
  const SampleKey key{5, 2, 3};
  EXPECT_EQ(RunPipeline(Raw(jpeg_), Stage::kPredictions, key, options_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  testing::FakeExtractor fake(6, 1, /*classes=*/5);
  options_.backbone = &fake;
  options_.top_k = 3;
  EXPECT_EQ(VectorElements(Stage::kFeatures, options_), 6);
  EXPECT_EQ(VectorElements(Stage::kPredictions, options_), 6);
  EXPECT_EQ(VectorElements(Stage::kTensor, options_), -1);
  // What the op should give: the head on the fp16 features, softmax, top 3.
  absl::StatusOr<StageData> features = RunPipeline(Raw(jpeg_), Stage::kFeatures, key, options_);
  ASSERT_TRUE(features.ok()) << features.status();
  std::vector<float> f(6), logits(5);
  HalvesToFloats(reinterpret_cast<const uint16_t*>(features->data.data()), 6, f.data());
  ASSERT_TRUE(fake.Classify(f.data(), 1, logits.data()).ok());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  std::vector<int> order = {0, 1, 2, 3, 4};
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  for (int split = 0; split <= StageIndex(Stage::kPredictions); ++split) {
    absl::StatusOr<StageData> mid = RunPipeline(Raw(jpeg_), StageAt(split), key, options_);
    ASSERT_TRUE(mid.ok()) << mid.status();
    absl::StatusOr<StageData> p = RunPipeline(*std::move(mid), Stage::kPredictions, key, options_);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->stage, Stage::kPredictions);
    ASSERT_EQ(p->width, 6);  // 3 (class, probability) pairs
    ASSERT_EQ(p->data.size(), 6 * sizeof(float));
    EXPECT_TRUE(CheckStageData(*p, 64).ok());
    const auto* pairs = reinterpret_cast<const float*>(p->data.data());
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(pairs[2 * k], static_cast<float>(order[k])) << "split " << split << " rank " << k;
      EXPECT_NEAR(pairs[2 * k + 1], std::exp(static_cast<double>(logits[order[k]])) / sum, 1e-6);
    }
    EXPECT_GE(pairs[1], pairs[3]);
    EXPECT_GE(pairs[3], pairs[5]);
  }
  // More classes asked for than the head has: all of them, summing to 1.
  options_.top_k = 9;
  EXPECT_EQ(VectorElements(Stage::kPredictions, options_), 10);
  absl::StatusOr<StageData> all = RunPipeline(*features, Stage::kPredictions, key, options_);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->width, 10);
  double total = 0;
  for (int k = 0; k < 5; ++k) total += reinterpret_cast<const float*>(all->data.data())[2 * k + 1];
  EXPECT_NEAR(total, 1.0, 1e-6);
  // Features of another size than the model's are refused by name.
  testing::FakeExtractor other(4, 1, 5);
  options_.backbone = &other;
  const absl::Status wrong = RunPipeline(*features, Stage::kPredictions, key, options_).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("takes 4"), std::string::npos) << wrong;
}

}  // namespace
}  // namespace sophon
