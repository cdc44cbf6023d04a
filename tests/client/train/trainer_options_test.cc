// TrainerOptions: the one validation, optimizer names, hyperparameter labels
// and checkpoint paths (no LibTorch).
#include <cmath>
#include <string>

#include "client/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

TEST(TrainerOptionsTest, DefaultsAreValid) {
  TrainerOptions options;
  EXPECT_TRUE(options.Validate().ok());
  EXPECT_EQ(options.num_models(), 1);
  EXPECT_FALSE(options.fused);
}

TEST(TrainerOptionsTest, ErrorsNameTheField) {
  auto message = [](const TrainerOptions& o) { return std::string(o.Validate().message()); };
  TrainerOptions o;
  o.num_classes = 0;
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.num_classes must be > 0, got 0"));

  o = TrainerOptions();
  o.staging_buffers = -1;
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.staging_buffers must be in [0, 16], got -1"));
  o.staging_buffers = 0;
  EXPECT_TRUE(o.Validate().ok());
  o.steps_in_flight = 9;
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.steps_in_flight must be in [0, 8], got 9"));
  o.steps_in_flight = 0;
  EXPECT_TRUE(o.Validate().ok());

  // fp16 needs cuda, and one scale would couple a fused array's models.
  o = TrainerOptions();
  o.amp = "fp16";
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.amp fp16 needs a cuda device"));
  o.device = "cuda:1";
  EXPECT_TRUE(o.Validate().ok());
  o.fused = true;
  EXPECT_TRUE(o.Validate().ok());  // one model
  o.models.resize(3);
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.amp fp16 scales the loss of all 3 models"));
  o.amp = "bf16";
  EXPECT_TRUE(o.Validate().ok());

  o = TrainerOptions();
  o.models.clear();
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.models must hold at least 1 model"));

  o = TrainerOptions();
  o.models.resize(2);
  EXPECT_THAT(message(o), HasSubstr("fused is off"));
  o.fused = true;
  EXPECT_TRUE(o.Validate().ok());

  o.models[1].lr = 0;
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.models[1].lr must be > 0, got 0"));
  o.models[1].lr = 0.1;
  o.models[0].momentum = -0.5;
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.models[0].momentum must be >= 0"));
  o.models[0].momentum = 0.9;
  o.models[1].weight_decay = -1;
  EXPECT_THAT(message(o), HasSubstr("models[1].weight_decay"));
  o.models[1].weight_decay = 0;

  // Adam's fields are checked only for Adam, and SGD's momentum only for SGD.
  o.models[1].beta2 = 1.0;
  EXPECT_TRUE(o.Validate().ok());
  o.optimizer = OptimizerKind::kAdam;
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.models[1].beta2 must be in [0, 1), got 1"));
  o.models[1].beta2 = 0.999;
  o.models[0].eps = 0;
  EXPECT_THAT(message(o), HasSubstr("models[0].eps must be > 0"));
  o.models[0].eps = 1e-8;
  o.models[0].momentum = -1;
  EXPECT_TRUE(o.Validate().ok());

  o = TrainerOptions();
  o.dropout = 1;
  EXPECT_THAT(message(o), HasSubstr("TrainerOptions.dropout"));
}

TEST(TrainerOptionsTest, OptimizerNames) {
  EXPECT_EQ(*ParseOptimizerKind("sgd"), OptimizerKind::kSgd);
  EXPECT_EQ(*ParseOptimizerKind("adam"), OptimizerKind::kAdam);
  EXPECT_THAT(ParseOptimizerKind("adamw").status().message(), HasSubstr("valid: sgd, adam"));
  EXPECT_STREQ(OptimizerName(OptimizerKind::kAdam), "adam");
}

TEST(TrainerOptionsTest, TransferStages) {
  EXPECT_EQ(*TransferStage("float32", "cuda"), Stage::kTensor);
  EXPECT_EQ(*TransferStage("uint8", "cpu"), Stage::kCropped);
  EXPECT_EQ(*TransferStage("auto", "cuda:1"), Stage::kCropped);
  EXPECT_EQ(*TransferStage("auto", "cpu"), Stage::kTensor);
  EXPECT_THAT(TransferStage("fp16", "cpu").status().message(),
              HasSubstr("transfer must be auto, float32 or uint8, got 'fp16'"));
}

TEST(TrainerOptionsTest, HyperparameterLabels) {
  Hyperparameters h;
  h.lr = 0.05;
  EXPECT_EQ(DescribeHyperparameters(OptimizerKind::kSgd, h),
            "lr=0.05 momentum=0.9 weight_decay=0.0001");
  EXPECT_EQ(DescribeHyperparameters(OptimizerKind::kAdam, h),
            "lr=0.05 betas=0.9,0.999 eps=1e-08 weight_decay=0.0001");
}

TEST(TrainerOptionsTest, LearningRateSchedules) {
  EXPECT_EQ(*ParseLrSchedule("constant"), LrSchedule::kConstant);
  EXPECT_EQ(*ParseLrSchedule("cosine"), LrSchedule::kCosine);
  EXPECT_THAT(ParseLrSchedule("step").status().message(), HasSubstr("valid: constant, cosine"));
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(LrSchedule::kConstant, 0.1, 3, 4), 0.1);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(LrSchedule::kCosine, 0.1, 0, 4), 0.1);
  EXPECT_NEAR(ScheduledLearningRate(LrSchedule::kCosine, 0.1, 2, 4), 0.05, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(LrSchedule::kCosine, 0.1, 1, 4),
              0.1 * (1 + std::sqrt(0.5)) / 2, 1e-12);
  EXPECT_GT(ScheduledLearningRate(LrSchedule::kCosine, 0.1, 3, 4), 0);
}

TEST(DistributedOptionsTest, DefaultsAndAGoodGroupAreValid) {
  EXPECT_TRUE(DistributedOptions().Validate().ok());
  DistributedOptions d;
  d.world_size = 4;
  d.rank = 3;
  d.master_addr = "10.0.0.1";
  d.master_port = 1;
  d.collective_timeout = absl::Seconds(1);
  d.bucket_bytes = 1;
  EXPECT_TRUE(d.Validate().ok()) << d.Validate();
}

TEST(DistributedOptionsTest, ErrorsNameTheField) {
  auto message = [](const DistributedOptions& d) {
    const absl::Status status = d.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    return std::string(status.message());
  };
  DistributedOptions d;
  d.world_size = 0;
  EXPECT_THAT(message(d), HasSubstr("DistributedOptions.world_size must be >= 1, got 0"));

  d = DistributedOptions();
  d.world_size = 2;
  d.rank = 2;
  EXPECT_THAT(message(d), HasSubstr("DistributedOptions.rank must be in [0, 2)"));
  d.rank = -1;
  EXPECT_THAT(message(d), HasSubstr("DistributedOptions.rank must be in [0, 2)"));
  d.world_size = 1;
  d.rank = 1;
  EXPECT_THAT(message(d), HasSubstr("DistributedOptions.rank must be in [0, 1)"));

  d = DistributedOptions();
  d.world_size = 2;
  d.master_addr = "";
  EXPECT_THAT(message(d), HasSubstr("DistributedOptions.master_addr"));

  d = DistributedOptions();
  d.world_size = 2;
  d.master_port = 0;
  EXPECT_THAT(message(d), HasSubstr("DistributedOptions.master_port must be in [1, 65535], got 0"));
  d.master_port = 65536;
  EXPECT_THAT(message(d), HasSubstr("got 65536"));

  d = DistributedOptions();
  d.world_size = 2;
  d.collective_timeout = absl::ZeroDuration();
  EXPECT_THAT(message(d), HasSubstr("DistributedOptions.collective_timeout must be finite"));
  d.collective_timeout = absl::InfiniteDuration();
  EXPECT_THAT(message(d), HasSubstr("DistributedOptions.collective_timeout"));
  d.collective_timeout = absl::Milliseconds(999);
  EXPECT_THAT(message(d), HasSubstr("at least 1s, got 999ms"));

  d = DistributedOptions();
  d.world_size = 2;
  d.bucket_bytes = 0;
  EXPECT_THAT(message(d), HasSubstr("DistributedOptions.bucket_bytes must be >= 1, got 0"));
}

TEST(DistributedOptionsTest, UnusedFieldsAreIgnoredWithoutRanks) {
  DistributedOptions d;
  d.master_addr = "";
  d.master_port = 0;
  d.bucket_bytes = 0;
  EXPECT_TRUE(d.Validate().ok()) << d.Validate();
}

TEST(DistributedOptionsTest, TrainerOptionsValidateTheirDistributedOptions) {
  TrainerOptions o;
  o.distributed.world_size = 2;
  o.distributed.rank = 5;
  EXPECT_THAT(std::string(o.Validate().message()), HasSubstr("DistributedOptions.rank"));
}

TEST(TrainerOptionsTest, CheckpointPaths) {
  EXPECT_EQ(ModelCheckpointPath("out/model.pt", 0, 1, false), "out/model.pt");
  EXPECT_EQ(ModelCheckpointPath("out/model.pt", 0, 1, true), "out/model.0.pt");
  EXPECT_EQ(ModelCheckpointPath("out/model.pt", 3, 4, true), "out/model.3.pt");
  EXPECT_EQ(ModelCheckpointPath("out/model", 2, 4, true), "out/model.2");
  EXPECT_EQ(ModelCheckpointPath("out.d/model", 2, 4, true), "out.d/model.2");
  EXPECT_EQ(ModelCheckpointPath(".hidden", 1, 2, true), ".hidden.1");
  EXPECT_EQ(ModelCheckpointPath("a/.hidden", 1, 2, true), "a/.hidden.1");
}

}  // namespace
}  // namespace sophon
