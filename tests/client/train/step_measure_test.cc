// MeasureTrainingStep: the median of the timed trial steps, the warm-up left
// out, its options checked by name, and a trainer that cannot run trial steps
// reported with what was being measured.
#include "client/train/step_measure.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/client/train/tiny_emulated_trainer.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

// Answers TrialSteps with given times and records the batch it was given;
// the rest of the interface is never called here.
class ScriptedTrainer : public Trainer {
 public:
  explicit ScriptedTrainer(std::vector<double> times) : times_(std::move(times)) {}
  absl::StatusOr<std::vector<double>> TrialSteps(const Batch& batch, int steps) override {
    batch_ = batch;
    steps_ = steps;
    return std::vector<double>(times_.begin(),
                               times_.begin() + std::min<size_t>(times_.size(), steps));
  }
  absl::StatusOr<StepResult> Step(const Batch&) override { return absl::InternalError("unused"); }
  absl::StatusOr<StepResult> Evaluate(const Batch&) override {
    return absl::InternalError("unused");
  }
  std::string DeviceName() const override { return "scripted"; }
  absl::StatusOr<std::vector<std::string>> Save(const std::string&) override {
    return absl::InternalError("unused");
  }

  Batch batch_;
  int steps_ = 0;

 private:
  std::vector<double> times_;
};

// Only Trainer's required methods: no TrialSteps.
class PlainTrainer : public ScriptedTrainer {
 public:
  PlainTrainer() : ScriptedTrainer({}) {}
  absl::StatusOr<std::vector<double>> TrialSteps(const Batch& batch, int steps) override {
    return Trainer::TrialSteps(batch, steps);
  }
};

TEST(MeasureTrainingStepTest, MedianOfTheTimedStepsWithoutTheWarmUp) {
  // The warm-up is the slowest and the fastest would win a minimum: the
  // median of the last three is 0.3.
  ScriptedTrainer trainer({9.0, 0.2, 0.4, 0.3});
  StepMeasureOptions options;
  options.warmup_steps = 1;
  options.batch_size = 5;
  options.crop_size = 7;
  options.num_classes = 3;
  absl::StatusOr<StepMeasurement> m = MeasureTrainingStep(&trainer, options);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(trainer.steps_, 4);
  EXPECT_DOUBLE_EQ(m->seconds, 0.3);
  EXPECT_EQ(m->step_seconds, (std::vector<double>{9.0, 0.2, 0.4, 0.3}));
  // The batch has the training batch's shape and labels the model takes.
  EXPECT_EQ(trainer.batch_.n, 5);
  EXPECT_EQ(trainer.batch_.h, 7);
  EXPECT_EQ(trainer.batch_.w, 7);
  EXPECT_EQ(trainer.batch_.images.size(), 5u * 3 * 7 * 7);
  ASSERT_EQ(trainer.batch_.labels.size(), 5u);
  for (int64_t label : trainer.batch_.labels) {
    EXPECT_GE(label, 0);
    EXPECT_LT(label, 3);
  }
}

TEST(MeasureTrainingStepTest, EmulatedStepTakesAtLeastTheProfiledTime) {
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer = testing::TinyEmulatedTrainer(8);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  StepMeasureOptions options;
  options.batch_size = 8;
  options.crop_size = 4;
  options.num_classes = 10;
  absl::StatusOr<StepMeasurement> m = MeasureTrainingStep(trainer->get(), options);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->step_seconds.size(), 5u);  // 2 warm-up, 3 timed
  EXPECT_GE(m->seconds, 0.003);  // 1 ms copy + 2 ms compute (no upper bound: a busy machine)
}

// Small batches (the default options make 256 images of 224x224).
StepMeasureOptions Small() {
  StepMeasureOptions options;
  options.batch_size = 2;
  options.crop_size = 4;
  options.num_classes = 2;
  return options;
}

// With uint8 transfer the trial batch is uint8 crops, so the step measured
// includes their normalisation on the device.
TEST(MeasureTrainingStepTest, TheTrialBatchIsWhatTheDeviceReceives) {
  ScriptedTrainer trainer({1, 1, 1, 1, 1});
  StepMeasureOptions options = Small();
  options.stage = Stage::kCropped;
  ASSERT_TRUE(MeasureTrainingStep(&trainer, options).ok());
  EXPECT_EQ(trainer.batch_.stage, Stage::kCropped);
  EXPECT_EQ(trainer.batch_.pixels.size(), 2u * 4 * 4 * 3);
  EXPECT_EQ(trainer.batch_.flips.size(), 2u);
  EXPECT_TRUE(trainer.batch_.images.empty());

  options.stage = Stage::kRaw;
  EXPECT_THAT(options.Validate().message(),
              HasSubstr("StepMeasureOptions.stage must be TENSOR, CROPPED or FLIPPED"));
}

TEST(MeasureTrainingStepTest, ErrorsSayWhatWasMeasured) {
  PlainTrainer plain;
  absl::StatusOr<StepMeasurement> m = MeasureTrainingStep(&plain, Small());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(m.status().message(), HasSubstr("measuring the training step"));

  ScriptedTrainer short_answer({0.1, 0.1, 0.1});
  m = MeasureTrainingStep(&short_answer, Small());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInternal);
}

TEST(MeasureTrainingStepTest, OptionsAreCheckedByName) {
  ScriptedTrainer trainer({1, 1, 1, 1, 1});
  StepMeasureOptions options = Small();
  options.timed_steps = 0;
  absl::StatusOr<StepMeasurement> m = MeasureTrainingStep(&trainer, options);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("StepMeasureOptions.timed_steps"));
  options = StepMeasureOptions{};
  options.batch_size = 0;
  EXPECT_THAT(options.Validate().message(), HasSubstr("StepMeasureOptions.batch_size"));
  options = StepMeasureOptions{};
  options.warmup_steps = -1;
  EXPECT_THAT(options.Validate().message(), HasSubstr("StepMeasureOptions.warmup_steps"));
  EXPECT_EQ(trainer.steps_, 0);  // never asked
}

}  // namespace
}  // namespace sophon
