// Trainer::TrialSteps of the LibTorch trainers: it times real steps and
// leaves no trace. A trainer that ran trial steps (before any step, with no
// optimizer state yet, and again in the middle of training) trains on
// bit-identically to one that did not: weights, BatchNorm buffers, the
// optimizer's state (SGD momentum, Adam moments and step count: the trial
// steps must not touch them), and the RNG that AlexNet's dropout draws from.
// Checked byte for byte through the saved models.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/train/step_measure.h"
#include "client/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/data/batch.h"
#include "sophon/emulation/synthetic_batch.h"
#include "tests/client/torch/noise_batch.h"
#include "tests/client/torch/saved_models.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;
using testing::BitwiseEqual;
using testing::ModelTensors;
using testing::SavedModels;

constexpr int kClasses = 4;

struct Case {
  std::string name;
  std::string arch;
  int side;
  OptimizerKind optimizer;
  int fused_models;  // 0: one unfused model
  // The full sequence (trial, 2 steps, trial, 2 steps), comparing the
  // weights right after each trial too; false: a trial of 2 steps, 1 step,
  // compared at the end only (AlexNet's 57M parameters take seconds a step).
  bool full = true;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

TrainerOptions Options(const Case& c) {
  TrainerOptions options;
  options.arch = c.arch;
  options.num_classes = kClasses;
  options.seed = 5;
  options.threads = 1;
  options.optimizer = c.optimizer;
  options.fused = c.fused_models > 0;
  options.models.assign(std::max(1, c.fused_models), Hyperparameters{});
  for (size_t k = 0; k < options.models.size(); ++k) {
    options.models[k].lr = (c.optimizer == OptimizerKind::kSgd ? 0.05 : 2e-3) / (k + 1);
    options.models[k].momentum = 0.9;
    options.models[k].weight_decay = 1e-3;
  }
  return options;
}

std::unique_ptr<Trainer> Create(const TrainerOptions& options) {
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

Batch StepBatch(int step, int side) {
  Batch batch = testing::NoiseBatch(4, side, kClasses, 70 + step);
  batch.index = step;
  return batch;
}

void Steps(Trainer& trainer, int first, int count, int side) {
  for (int step = first; step < first + count; ++step) {
    auto result = trainer.Step(StepBatch(step, side));
    ASSERT_TRUE(result.ok()) << result.status();
  }
}

// SavedModels builds a model to read each file into, which draws from the
// CPU RNG: put its state back, so that only the trainer's steps draw.
std::vector<ModelTensors> Saved(Trainer& trainer, const TrainerOptions& options,
                                const std::string& path) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const torch::Tensor rng = generator.get_state();
  std::vector<ModelTensors> models = SavedModels(trainer, options, path);
  generator.set_state(rng);
  return models;
}

// Trial steps on another batch than training's (another size too), each
// timed.
void Trial(Trainer& trainer, int side, int steps) {
  auto seconds = trainer.TrialSteps(MakeSyntheticBatch(3, side, kClasses, 9), steps);
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  ASSERT_EQ(seconds->size(), static_cast<size_t>(steps));
  for (double s : *seconds) EXPECT_GT(s, 0);
}

class TrialStepsTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrialStepsTest, TrainingAfterTrialStepsIsBitIdentical) {
  const Case& c = GetParam();
  const std::string dir = testing::MakeTempDir("trial_steps_" + c.name);
  const TrainerOptions options = Options(c);

  const int steps = c.full ? 4 : 1;  // real steps in all

  // With trial steps before the first step (and, full, after two).
  std::unique_ptr<Trainer> tried = Create(options);
  ASSERT_NE(tried, nullptr);
  torch::manual_seed(11);
  tried->BeginEpoch(1, 4);
  // The weights and buffers right after a trial are those before it.
  const auto trial_changes_nothing = [&](const std::string& name) {
    if (!c.full) {
      Trial(*tried, c.side, 2);
      return;
    }
    const std::vector<ModelTensors> before = Saved(*tried, options, dir + "/" + name + "0.pt");
    Trial(*tried, c.side, 3);
    const std::vector<ModelTensors> after = Saved(*tried, options, dir + "/" + name + "1.pt");
    ASSERT_EQ(before.size(), after.size());
    for (size_t k = 0; k < before.size(); ++k) {
      EXPECT_TRUE(BitwiseEqual(before[k], after[k])) << name << ": model " << k << " changed";
    }
  };
  trial_changes_nothing("fresh");
  if (c.full) {
    Steps(*tried, 0, 2, c.side);
    trial_changes_nothing("mid");
    Steps(*tried, 2, 2, c.side);
  } else {
    Steps(*tried, 0, steps, c.side);
  }
  const torch::Tensor tried_draw = torch::rand({4});
  const std::vector<ModelTensors> with = Saved(*tried, options, dir + "/with.pt");

  // The same without trial steps.
  std::unique_ptr<Trainer> plain = Create(options);
  ASSERT_NE(plain, nullptr);
  torch::manual_seed(11);
  plain->BeginEpoch(1, 4);
  Steps(*plain, 0, steps, c.side);
  const torch::Tensor plain_draw = torch::rand({4});
  const std::vector<ModelTensors> without = Saved(*plain, options, dir + "/without.pt");

  EXPECT_TRUE(torch::equal(tried_draw, plain_draw)) << "the CPU RNG state";
  ASSERT_EQ(with.size(), options.models.size());
  ASSERT_EQ(without.size(), options.models.size());
  for (size_t k = 0; k < with.size(); ++k) {
    EXPECT_TRUE(BitwiseEqual(with[k], without[k])) << "model " << k;
  }
}

// tinycnn has BatchNorm buffers; AlexNet's dropout draws from the CPU RNG.
INSTANTIATE_TEST_SUITE_P(
    Trainers, TrialStepsTest,
    ::testing::Values(Case{"sgd", "tinycnn", 32, OptimizerKind::kSgd, 0},
                      Case{"adam", "tinycnn", 32, OptimizerKind::kAdam, 0},
                      Case{"fused_sgd", "tinycnn", 32, OptimizerKind::kSgd, 2},
                      Case{"fused_adam", "tinycnn", 32, OptimizerKind::kAdam, 2},
                      Case{"alexnet_dropout", "alexnet", 64, OptimizerKind::kSgd, 0, false}),
    [](const auto& info) { return info.param.name; });

TEST(TrialStepsEdgeTest, BadRequestsAreRefusedAndChangeNothing) {
  const TrainerOptions options = Options(Case{"sgd", "tinycnn", 32, OptimizerKind::kSgd, 0});
  std::unique_ptr<Trainer> trainer = Create(options);
  ASSERT_NE(trainer, nullptr);
  const std::string dir = testing::MakeTempDir("trial_steps_edge");
  const std::vector<ModelTensors> before = SavedModels(*trainer, options, dir + "/before.pt");
  auto zero = trainer->TrialSteps(MakeSyntheticBatch(2, 32, kClasses, 1), 0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  Batch bad_label = MakeSyntheticBatch(2, 32, kClasses, 1);
  bad_label.labels[1] = kClasses;
  auto refused = trainer->TrialSteps(bad_label, 2);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(BitwiseEqual(before[0], SavedModels(*trainer, options, dir + "/after.pt")[0]));
}

TEST(MeasureTrainingStepTest, MedianOfTheTimedStepsOfTheRealModel) {
  const TrainerOptions options = Options(Case{"sgd", "tinycnn", 32, OptimizerKind::kSgd, 0});
  std::unique_ptr<Trainer> trainer = Create(options);
  ASSERT_NE(trainer, nullptr);
  StepMeasureOptions measure;
  measure.batch_size = 8;
  measure.crop_size = 32;
  measure.num_classes = kClasses;
  auto m = MeasureTrainingStep(trainer.get(), measure);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->step_seconds.size(), 5u);
  EXPECT_GT(m->seconds, 0);
  double sum = 0;
  for (double s : m->step_seconds) sum += s;
  EXPECT_GE(m->total_seconds, sum);
  // A batch the model cannot take is refused with what was being measured.
  measure.num_classes = kClasses + 1;  // labels up to kClasses
  auto refused = MeasureTrainingStep(trainer.get(), measure);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("measuring the training step"));
}

}  // namespace
}  // namespace sophon
