#include "client/train/emulated_trainer.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/emulation/synthetic_batch.h"

namespace sophon {
namespace {

using Clock = std::chrono::steady_clock;

GpuProfile TestProfile() {
  absl::StatusOr<GpuProfile> p = GpuProfile::Parse(
      "gpu_type,model,batch_size,copy_seconds_per_batch,compute_seconds_per_batch,source\n"
      "V100,resnet50,8,0.010,0.040,test\n"
      "v100,alexnet,8,0.002,0.008,test\n"
      "v100,resnet50,32,0.030,0.120,test\n"
      "v100,alexnetx2,8,0.002,0.011,test\n",
      "test.csv");
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

double TimeStep(Trainer* trainer, const Batch& batch, StepResult* result) {
  const Clock::time_point start = Clock::now();
  absl::StatusOr<StepResult> step = trainer->Step(batch);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(step.ok()) << step.status();
  if (step.ok()) *result = *step;
  return seconds;
}

TEST(EmulatedTrainerTest, StepLastsTheProfiledTime) {
  EmulatedTrainerOptions options;
  options.arch = "ResNet50";
  options.gpu_type = "v100";
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer =
      EmulatedTrainer::Create(TestProfile(), options, 8);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->DeviceName(), "emulated v100 x1");
  const Batch batch = MakeSyntheticBatch(8, 4, 10, 1);
  // Profile: 10 ms copy + 40 ms compute = 50 ms: never shorter. (No upper
  // bound: a loaded machine may deschedule the sleeper for any time.)
  for (int i = 0; i < 3; ++i) {
    StepResult result;
    const double seconds = TimeStep(trainer->get(), batch, &result);
    EXPECT_GE(seconds, 0.050);
    EXPECT_EQ(result.count, 8);
    EXPECT_EQ(result.loss, 0);
    EXPECT_GE(result.copy_seconds, 0.010);
    EXPECT_LT(result.copy_seconds, seconds);
  }
}

TEST(EmulatedTrainerTest, GpuCountDividesAndShortBatchesScale) {
  EmulatedTrainerOptions options;
  options.arch = "resnet50";
  options.gpu_count = 2;
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer =
      EmulatedTrainer::Create(TestProfile(), options, 8);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->DeviceName(), "emulated v100 x2");
  absl::StatusOr<GpuStepTime> t = (*trainer)->StepTimeFor(8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->copy_seconds, 0.005);
  EXPECT_DOUBLE_EQ(t->compute_seconds, 0.020);
  // A last batch of 4: half the time of 8, then halved by the two GPUs.
  t = (*trainer)->StepTimeFor(4);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->scaled);
  EXPECT_DOUBLE_EQ(t->compute_seconds, 0.010);

  for (int i = 0; i < 3; ++i) {
    StepResult result;
    const double seconds = TimeStep(trainer->get(), MakeSyntheticBatch(8, 4, 10, 1), &result);
    EXPECT_GE(seconds, 0.025);  // (10 + 40 ms) / 2 GPUs
    EXPECT_GE(result.copy_seconds, 0.005);
  }
}

TEST(EmulatedTrainerTest, CreateFailsForWhatTheProfileLacks) {
  EmulatedTrainerOptions options;
  options.arch = "resnet18";
  EXPECT_EQ(EmulatedTrainer::Create(TestProfile(), options, 8).status().code(),
            absl::StatusCode::kNotFound);
  options.arch = "resnet50";
  options.gpu_type = "h100";
  EXPECT_EQ(EmulatedTrainer::Create(TestProfile(), options, 8).status().code(),
            absl::StatusCode::kNotFound);
  options.gpu_type = "v100";
  options.gpu_count = 0;
  EXPECT_EQ(EmulatedTrainer::Create(TestProfile(), options, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EmulatedTrainerTest, FusedArrayWithoutItsRowCopiesOnceAndComputesBTimesTheBatch) {
  EmulatedTrainerOptions options;
  options.arch = "resnet50";
  options.fused_models = 4;
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer =
      EmulatedTrainer::Create(TestProfile(), options, 8);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<GpuStepTime> t = (*trainer)->StepTimeFor(8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->copy_seconds, 0.010);     // the batch of 8, copied once
  EXPECT_DOUBLE_EQ(t->compute_seconds, 0.120);  // one resnet50 at batch 4 * 8
  EXPECT_TRUE(t->scaled);
  EXPECT_THAT(t->note, ::testing::HasSubstr("fused array of 4 resnet50"));
  StepResult result;
  TimeStep(trainer->get(), MakeSyntheticBatch(8, 4, 10, 1), &result);
  EXPECT_EQ(result.models.size(), 4u);  // one (empty) result per model
}

TEST(EmulatedTrainerTest, FusedArrayRowIsUsedWhenTheProfileHasIt) {
  EmulatedTrainerOptions options;
  options.arch = "alexnet";
  options.fused_models = 2;
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer =
      EmulatedTrainer::Create(TestProfile(), options, 8);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<GpuStepTime> t = (*trainer)->StepTimeFor(8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->compute_seconds, 0.011);
  EXPECT_FALSE(t->scaled);

  options.fused_models = -1;
  EXPECT_EQ(EmulatedTrainer::Create(TestProfile(), options, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EmulatedTrainerTest, SaveIsRefused) {
  EmulatedTrainerOptions options;
  options.arch = "alexnet";
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer =
      EmulatedTrainer::Create(TestProfile(), options, 8);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->Save("/tmp/never.pt").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(EmulatedTrainerTest, HasNoTrainingCheckpointsAndNoRanks) {
  EmulatedTrainerOptions options;
  options.arch = "alexnet";
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer =
      EmulatedTrainer::Create(TestProfile(), options, 8);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_EQ((*trainer)->SaveCheckpoint("/tmp/never.ckpt", TrainingCursor{}).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*trainer)->LoadCheckpoint("/tmp/never.ckpt").status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*trainer)->rank(), 0);
  EXPECT_EQ((*trainer)->world_size(), 1);
}

TEST(EmulatedTrainerTest, EmptyBatchIsRejected) {
  EmulatedTrainerOptions options;
  options.arch = "alexnet";
  absl::StatusOr<std::unique_ptr<EmulatedTrainer>> trainer =
      EmulatedTrainer::Create(TestProfile(), options, 8);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Batch empty;
  EXPECT_EQ((*trainer)->Step(empty).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sophon
