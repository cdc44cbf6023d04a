// The fused array's trainer through the LibTorch-free interface (trainer.h):
// each model k trains as an ordinary trainer with seed + k and its own
// hyperparameters would; Save writes ordinary checkpoints that the unfused
// trainer loads; bad options fail with errors that name them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/data/batch.h"
#include "tests/client/torch/noise_batch.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;

constexpr int kClasses = 4;

TrainerOptions Options(int models, OptimizerKind optimizer = OptimizerKind::kSgd) {
  TrainerOptions options;
  options.arch = "tinycnn";
  options.num_classes = kClasses;
  options.seed = 21;
  options.threads = 1;
  options.optimizer = optimizer;
  options.fused = true;
  options.models.assign(models, Hyperparameters{});
  for (int k = 0; k < models; ++k) {
    options.models[k].lr = optimizer == OptimizerKind::kSgd ? 0.08 / (k + 1) : 2e-3 / (k + 1);
    options.models[k].momentum = 0.5 + 0.2 * k;
    options.models[k].weight_decay = 1e-4 * k;
  }
  return options;
}

// Model k of `fused` as an ordinary trainer's options.
TrainerOptions Separate(const TrainerOptions& fused, int k) {
  TrainerOptions options = fused;
  options.fused = false;
  options.seed = fused.seed + k;
  options.models = {fused.models[k]};
  return options;
}

Batch NoiseBatch(int n, int side, uint64_t seed) {
  return testing::NoiseBatch(n, side, kClasses, seed);
}

class FusedTrainerTest : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(FusedTrainerTest, EachModelTrainsAsItsOwnTrainerWould) {
  constexpr int kModels = 3;
  constexpr int kSteps = 4;
  const TrainerOptions options = Options(kModels, GetParam());
  auto fused = Trainer::Create(options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  std::vector<std::unique_ptr<Trainer>> separate;
  for (int k = 0; k < kModels; ++k) {
    auto trainer = Trainer::Create(Separate(options, k));
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    separate.push_back(*std::move(trainer));
  }
  for (int step = 0; step < kSteps; ++step) {
    const Batch batch = NoiseBatch(8, 32, 100 + step);
    auto fused_step = (*fused)->Step(batch);
    ASSERT_TRUE(fused_step.ok()) << fused_step.status();
    ASSERT_EQ(fused_step->models.size(), static_cast<size_t>(kModels));
    EXPECT_EQ(fused_step->count, 8);
    double mean = 0;
    for (int k = 0; k < kModels; ++k) {
      auto step_k = separate[k]->Step(batch);
      ASSERT_TRUE(step_k.ok()) << step_k.status();
      EXPECT_NEAR(fused_step->models[k].loss, step_k->loss, 1e-4 * std::max(1.0, step_k->loss))
          << "model " << k << " step " << step;
      EXPECT_EQ(fused_step->models[k].correct, step_k->correct) << "model " << k;
      mean += step_k->loss / kModels;
    }
    EXPECT_NEAR(fused_step->loss, mean, 1e-4);
  }
  // Different hyperparameters made different models.
  const Batch held_out = NoiseBatch(8, 32, 7);
  auto eval = (*fused)->Evaluate(held_out);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_NE(eval->models[0].loss, eval->models[1].loss);
  for (int k = 0; k < kModels; ++k) {
    auto eval_k = separate[k]->Evaluate(held_out);
    ASSERT_TRUE(eval_k.ok());
    EXPECT_NEAR(eval->models[k].loss, eval_k->loss, 1e-4 * std::max(1.0, eval_k->loss));
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, FusedTrainerTest,
                         ::testing::Values(OptimizerKind::kSgd, OptimizerKind::kAdam),
                         [](const auto& info) { return OptimizerName(info.param); });

TEST(FusedTrainerScheduleTest, CosineScheduleReachesEveryModelsOptimizer) {
  // Epoch 1 of 2 under the cosine schedule runs at half of each base rate:
  // the same step as an ordinary trainer built with lr / 2.
  constexpr int kModels = 2;
  TrainerOptions options = Options(kModels);
  options.lr_schedule = LrSchedule::kCosine;
  auto fused = Trainer::Create(options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  (*fused)->BeginEpoch(1, 2);
  const Batch batch = NoiseBatch(8, 32, 3);
  ASSERT_TRUE((*fused)->Step(batch).ok());
  auto fused_eval = (*fused)->Evaluate(NoiseBatch(8, 32, 4));
  ASSERT_TRUE(fused_eval.ok());
  for (int k = 0; k < kModels; ++k) {
    for (bool scheduled : {false, true}) {
      // The unfused trainer under the same schedule, or with half the rate.
      TrainerOptions one = Separate(options, k);
      if (!scheduled) {
        one.lr_schedule = LrSchedule::kConstant;
        one.models[0].lr /= 2;
      }
      auto trainer = Trainer::Create(one);
      ASSERT_TRUE(trainer.ok()) << trainer.status();
      if (scheduled) (*trainer)->BeginEpoch(1, 2);
      ASSERT_TRUE((*trainer)->Step(batch).ok());
      auto eval = (*trainer)->Evaluate(NoiseBatch(8, 32, 4));
      ASSERT_TRUE(eval.ok());
      EXPECT_NEAR(fused_eval->models[k].loss, eval->loss, 1e-5)
          << "model " << k << (scheduled ? " (scheduled)" : " (lr / 2)");
    }
  }
  // And the schedule matters: without it the step differs.
  TrainerOptions constant = Separate(options, 0);
  constant.lr_schedule = LrSchedule::kConstant;
  auto unscheduled = Trainer::Create(constant);
  ASSERT_TRUE(unscheduled.ok());
  ASSERT_TRUE((*unscheduled)->Step(batch).ok());
  auto eval = (*unscheduled)->Evaluate(NoiseBatch(8, 32, 4));
  ASSERT_TRUE(eval.ok());
  EXPECT_GT(std::abs(fused_eval->models[0].loss - eval->loss), 1e-4);
}

TEST(FusedTrainerEdgeTest, ArrayOfOneTrainsAsTheOrdinaryModel) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam}) {
    const TrainerOptions options = Options(1, kind);
    auto fused = Trainer::Create(options);
    auto ordinary = Trainer::Create(Separate(options, 0));
    ASSERT_TRUE(fused.ok() && ordinary.ok());
    for (int step = 0; step < 3; ++step) {
      const Batch batch = NoiseBatch(8, 32, 40 + step);
      auto a = (*fused)->Step(batch);
      auto b = (*ordinary)->Step(batch);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(a->models.size(), 1u);
      EXPECT_NEAR(a->models[0].loss, b->loss, 1e-5) << OptimizerName(kind) << " step " << step;
    }
  }
}

TEST(FusedTrainerEdgeTest, ADivergedModelLeavesTheOthersAsTheyWouldBe) {
  TrainerOptions options = Options(3);
  options.models[0].lr = 1e12;  // diverges
  auto fused = Trainer::Create(options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  std::vector<std::unique_ptr<Trainer>> separate;
  for (int k = 1; k < 3; ++k) {
    auto trainer = Trainer::Create(Separate(options, k));
    ASSERT_TRUE(trainer.ok());
    separate.push_back(*std::move(trainer));
  }
  bool diverged = false;
  for (int step = 0; step < 8; ++step) {
    const Batch batch = NoiseBatch(8, 32, 60 + step);
    auto a = (*fused)->Step(batch);
    ASSERT_TRUE(a.ok()) << a.status();
    diverged = diverged || !std::isfinite(a->models[0].loss) || a->models[0].loss > 1e3;
    for (int k = 1; k < 3; ++k) {
      auto b = separate[k - 1]->Step(batch);
      ASSERT_TRUE(b.ok());
      ASSERT_TRUE(std::isfinite(a->models[k].loss)) << "model " << k << " step " << step;
      EXPECT_NEAR(a->models[k].loss, b->loss, 1e-4 * std::max(1.0, b->loss))
          << "model " << k << " step " << step;
    }
  }
  EXPECT_TRUE(diverged) << "model 0 was meant to diverge";
}

TEST(FusedTrainerSaveTest, EachSavedModelLoadsIntoTheUnfusedTrainer) {
  const std::string dir = testing::MakeTempDir("fused_save");
  const TrainerOptions options = Options(2);
  auto fused = Trainer::Create(options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  for (int step = 0; step < 2; ++step) ASSERT_TRUE((*fused)->Step(NoiseBatch(8, 32, step)).ok());

  auto files = (*fused)->Save(dir + "/ckpt.pt");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, (std::vector<std::string>{dir + "/ckpt.0.pt", dir + "/ckpt.1.pt"}));

  const Batch held_out = NoiseBatch(8, 32, 9);
  auto fused_eval = (*fused)->Evaluate(held_out);
  ASSERT_TRUE(fused_eval.ok());
  for (int k = 0; k < 2; ++k) {
    TrainerOptions loaded = Separate(options, k);
    loaded.seed = 999;  // the checkpoint, not the seed, must decide the weights
    loaded.init_checkpoint = (*files)[k];
    auto trainer = Trainer::Create(loaded);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    auto eval = (*trainer)->Evaluate(held_out);
    ASSERT_TRUE(eval.ok());
    EXPECT_NEAR(eval->loss, fused_eval->models[k].loss, 1e-5) << "model " << k;
  }

  // A fused array can start from a checkpoint too: every model starts from it.
  TrainerOptions from_checkpoint = Options(3);
  from_checkpoint.init_checkpoint = (*files)[1];
  auto restarted = Trainer::Create(from_checkpoint);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  auto restarted_eval = (*restarted)->Evaluate(held_out);
  ASSERT_TRUE(restarted_eval.ok());
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(restarted_eval->models[k].loss, fused_eval->models[1].loss, 1e-5) << k;
  }
}

TEST(FusedTrainerSaveTest, UnfusedTrainerSavesAndLoads) {
  const std::string dir = testing::MakeTempDir("unfused_save");
  TrainerOptions options = Options(1);
  options.fused = false;
  auto trainer = Trainer::Create(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Step(NoiseBatch(8, 32, 1)).ok());
  auto files = (*trainer)->Save(dir + "/model");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, std::vector<std::string>{dir + "/model"});
  const Batch held_out = NoiseBatch(8, 32, 2);
  auto expected = (*trainer)->Evaluate(held_out);
  ASSERT_TRUE(expected.ok());

  options.seed = 5;
  options.init_checkpoint = dir + "/model";
  auto loaded = Trainer::Create(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto eval = (*loaded)->Evaluate(held_out);
  ASSERT_TRUE(eval.ok());
  EXPECT_NEAR(eval->loss, expected->loss, 1e-6);
}

TEST(FusedTrainerSaveTest, BadCheckpointsAreRefusedByName) {
  const std::string dir = testing::MakeTempDir("bad_checkpoints");
  TrainerOptions options = Options(1);
  options.fused = false;
  auto trainer = Trainer::Create(options);
  ASSERT_TRUE(trainer.ok());
  ASSERT_TRUE((*trainer)->Save(dir + "/tiny.pt").ok());

  TrainerOptions missing = options;
  missing.init_checkpoint = dir + "/nothing.pt";
  auto status = Trainer::Create(missing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("nothing.pt"));

  testing::WriteFile(dir + "/garbage.pt", "not a checkpoint");
  TrainerOptions garbage = options;
  garbage.init_checkpoint = dir + "/garbage.pt";
  status = Trainer::Create(garbage).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("garbage.pt"));

  TrainerOptions other_arch = options;
  other_arch.arch = "resnet18";
  other_arch.init_checkpoint = dir + "/tiny.pt";
  status = Trainer::Create(other_arch).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("holds tinycnn with 4 classes, not resnet18"));

  TrainerOptions other_classes = options;
  other_classes.num_classes = kClasses + 1;
  other_classes.init_checkpoint = dir + "/tiny.pt";
  EXPECT_EQ(Trainer::Create(other_classes).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FusedTrainerOptionsTest, BadArraysAreRejected) {
  TrainerOptions none = Options(1);
  none.models.clear();
  auto status = Trainer::Create(none).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("TrainerOptions.models"));

  TrainerOptions unknown = Options(2);
  unknown.arch = "vgg11";
  status = Trainer::Create(unknown).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("vgg11"));

  TrainerOptions bad_lr = Options(3);
  bad_lr.models[2].lr = -1;
  status = Trainer::Create(bad_lr).status();
  EXPECT_THAT(status.message(), HasSubstr("TrainerOptions.models[2].lr must be > 0, got -1"));

  TrainerOptions unfused_array = Options(2);
  unfused_array.fused = false;
  EXPECT_THAT(Trainer::Create(unfused_array).status().message(), HasSubstr("fused is off"));
}

}  // namespace
}  // namespace sophon
