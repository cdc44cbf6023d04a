// Trainers as data-parallel ranks (two threads of this process, each with its
// own TCPStore client and ProcessGroupGloo on loopback): ranks end with
// bitwise identical parameters, equal to one process trained on their
// combined batches; BatchNorm buffers follow rank 0; a rank with an empty
// batch still takes part.
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/train/trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/data/batch.h"
#include "tests/client/torch/noise_batch.h"
#include "tests/client/torch/ranks.h"
#include "tests/client/torch/saved_models.h"
#include "tests/client/torch/skip_without_gloo.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::HasSubstr;
using testing::BitwiseEqual;
using testing::MaxDifference;
using testing::ModelTensors;
using testing::OnRanks;
using testing::RankOptions;
using testing::SavedModels;

constexpr int kClasses = 4;
constexpr int kRanks = 2;
constexpr int kSteps = 3;
constexpr int kBatch = 4;  // per rank

TrainerOptions Options(const std::string& arch, OptimizerKind optimizer, int fused_models) {
  TrainerOptions options;
  options.arch = arch;
  options.num_classes = kClasses;
  options.seed = 1;
  options.threads = 1;
  options.optimizer = optimizer;
  options.fused = fused_models > 0;
  options.models.assign(std::max(1, fused_models), Hyperparameters{});
  for (size_t k = 0; k < options.models.size(); ++k) {
    options.models[k].lr = (optimizer == OptimizerKind::kSgd ? 0.1 : 0.01) / (k + 1);
    options.models[k].momentum = 0.9;
  }
  return options;
}

// Rank r's batch of step s.
Batch RankBatch(int step, int rank) {
  Batch batch = testing::NoiseBatch(kBatch, 32, kClasses, 100 + 10 * step + rank);
  batch.index = step;
  return batch;
}

// Every rank's batch of step s, one after the other.
Batch CombinedBatch(int step) {
  Batch combined = RankBatch(step, 0);
  for (int rank = 1; rank < kRanks; ++rank) {
    const Batch more = RankBatch(step, rank);
    combined.n += more.n;
    combined.images.insert(combined.images.end(), more.images.begin(), more.images.end());
    combined.labels.insert(combined.labels.end(), more.labels.begin(), more.labels.end());
    combined.ids.insert(combined.ids.end(), more.ids.begin(), more.ids.end());
  }
  return combined;
}

struct RankRun {
  std::vector<ModelTensors> models;  // after the last step
  std::vector<StepResult> steps;
};

// Trains `options` as kRanks ranks on `batch(step, rank)`: rank 0 starts from
// `init` (a checkpoint) when given, the other ranks from another seed, so that
// only rank 0's broadcast makes them agree.
std::vector<RankRun> TrainRanks(const TrainerOptions& options, const std::string& init,
                                const std::string& dir,
                                const std::function<Batch(int step, int rank)>& batch) {
  const int port = testing::FreePort();
  std::vector<RankRun> runs(kRanks);
  OnRanks(kRanks, [&](int rank) {
    TrainerOptions rank_options = options;
    rank_options.distributed = RankOptions(rank, kRanks, port);
    if (rank == 0) {
      rank_options.init_checkpoint = init;
    } else {
      rank_options.seed = options.seed + 1000 + rank;
    }
    auto trainer = Trainer::Create(rank_options);
    ASSERT_TRUE(trainer.ok()) << "rank " << rank << ": " << trainer.status();
    EXPECT_EQ((*trainer)->rank(), rank);
    EXPECT_EQ((*trainer)->world_size(), kRanks);
    for (int step = 0; step < kSteps; ++step) {
      auto result = (*trainer)->Step(batch(step, rank));
      ASSERT_TRUE(result.ok()) << "rank " << rank << " step " << step << ": " << result.status();
      runs[rank].steps.push_back(*result);
    }
    runs[rank].models =
        SavedModels(**trainer, options, dir + "/rank" + std::to_string(rank) + ".pt");
  });
  return runs;
}

// One process from `init`, on batch(step) (by default the ranks' combined
// batches); `before_step` may change its learning rates.
std::vector<ModelTensors> TrainAlone(
    TrainerOptions options, const std::string& init, const std::string& dir,
    const std::function<Batch(int step)>& batch = CombinedBatch,
    const std::function<void(Trainer& trainer, int step)>& before_step = nullptr) {
  options.init_checkpoint = init;
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  EXPECT_EQ((*trainer)->world_size(), 1);
  for (int step = 0; step < kSteps; ++step) {
    if (before_step) before_step(**trainer, step);
    auto result = (*trainer)->Step(batch(step));
    EXPECT_TRUE(result.ok()) << result.status();
  }
  return SavedModels(**trainer, options, dir + "/alone.pt");
}

// A model checkpoint of `options`' initial model(s) (model 0 of a fused array).
std::string InitialCheckpoint(TrainerOptions options, const std::string& dir) {
  options.fused = false;
  options.models.resize(1);
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  const std::string path = dir + "/init.pt";
  EXPECT_TRUE((*trainer)->Save(path).ok());
  return path;
}

struct Case {
  std::string name;
  OptimizerKind optimizer;
  int fused_models;  // 0: one unfused model
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class TwoRanksTest : public ::testing::TestWithParam<Case> {};

TEST_P(TwoRanksTest, RanksAgreeBitwiseAndMatchOneProcessOnTheCombinedBatches) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const std::string dir = testing::MakeTempDir("two_ranks_" + GetParam().name);
  // tinymlp has no BatchNorm, whose batch statistics would differ between a
  // rank's half batch and the combined batch.
  const TrainerOptions options = Options("tinymlp", GetParam().optimizer, GetParam().fused_models);
  const std::string init = InitialCheckpoint(options, dir);
  const std::vector<RankRun> runs = TrainRanks(options, init, dir, RankBatch);
  const std::vector<ModelTensors> alone = TrainAlone(options, init, dir);
  ASSERT_EQ(runs[0].models.size(), options.models.size());
  ASSERT_EQ(runs[1].models.size(), options.models.size());
  ASSERT_EQ(alone.size(), options.models.size());
  for (size_t k = 0; k < options.models.size(); ++k) {
    EXPECT_TRUE(BitwiseEqual(runs[0].models[k], runs[1].models[k])) << "model " << k;
    const double difference = MaxDifference(runs[0].models[k], alone[k]);
    EXPECT_GE(difference, 0) << "model " << k;
    EXPECT_LE(difference, 1e-5) << "model " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Trainers, TwoRanksTest,
    ::testing::Values(Case{"sgd", OptimizerKind::kSgd, 0}, Case{"adam", OptimizerKind::kAdam, 0},
                      Case{"fused_sgd", OptimizerKind::kSgd, 2},
                      Case{"fused_adam", OptimizerKind::kAdam, 2}),
    [](const auto& info) { return info.param.name; });

TEST(TwoRanksBatchNormTest, BuffersFollowRankZeroBeforeEachForward) {
  SOPHON_SKIP_WITHOUT_GLOO();
  // Step 0 on different batches, then the same batch on both ranks: with rank
  // 0's buffers broadcast before each forward, both ranks run step 1 from the
  // same buffers and parameters, so they end with the same buffers too.
  const std::string dir = testing::MakeTempDir("two_ranks_bn");
  const TrainerOptions options = Options("tinycnn", OptimizerKind::kSgd, 0);
  const std::vector<RankRun> runs =
      TrainRanks(options, "", dir, [](int step, int rank) {
        return RankBatch(step, step == 0 ? rank : 0);
      });
  ASSERT_EQ(runs[0].models.size(), 1u);
  ASSERT_EQ(runs[1].models.size(), 1u);
  EXPECT_TRUE(BitwiseEqual(runs[0].models[0], runs[1].models[0]));
}

TEST(TwoRanksEmptyBatchTest, ARankWithoutSamplesContributesZeroGradients) {
  SOPHON_SKIP_WITHOUT_GLOO();
  for (const int fused_models : {0, 2}) {
    SCOPED_TRACE(fused_models);
    const std::string dir = testing::MakeTempDir("two_ranks_empty");
    // Plain SGD: a step is -lr times the gradient, so a gradient averaged
    // with a rank's zeros is one process's step at half the learning rate.
    TrainerOptions options = Options("tinymlp", OptimizerKind::kSgd, fused_models);
    for (Hyperparameters& h : options.models) h.momentum = h.weight_decay = 0;
    const std::string init = InitialCheckpoint(options, dir);
    // Rank 1's last batch is empty (every sample failed); rank 0's is not.
    const std::vector<RankRun> runs = TrainRanks(options, init, dir, [](int step, int rank) {
      if (rank == 1 && step == kSteps - 1) {
        Batch empty;
        empty.index = step;
        return empty;
      }
      return RankBatch(step, rank);
    });
    ASSERT_EQ(runs[1].steps.size(), static_cast<size_t>(kSteps));
    const StepResult& empty = runs[1].steps.back();
    EXPECT_EQ(empty.count, 0);
    EXPECT_EQ(empty.loss, 0);
    EXPECT_EQ(empty.models.size(), static_cast<size_t>(fused_models));
    EXPECT_EQ(runs[0].steps.back().count, kBatch);

    // Alone: the combined batches, then rank 0's last batch at half the rate
    // (a cosine schedule over two epochs is at half in the second).
    TrainerOptions alone_options = options;
    alone_options.lr_schedule = LrSchedule::kCosine;
    const std::vector<ModelTensors> alone = TrainAlone(
        alone_options, init, dir,
        [](int step) { return step == kSteps - 1 ? RankBatch(step, 0) : CombinedBatch(step); },
        [](Trainer& trainer, int step) { trainer.BeginEpoch(step == kSteps - 1 ? 1 : 0, 2); });
    ASSERT_EQ(alone.size(), options.models.size());
    for (size_t k = 0; k < options.models.size(); ++k) {
      EXPECT_TRUE(BitwiseEqual(runs[0].models[k], runs[1].models[k])) << "model " << k;
      const double difference = MaxDifference(runs[1].models[k], alone[k]);
      EXPECT_GE(difference, 0) << "model " << k;
      EXPECT_LE(difference, 1e-5) << "model " << k;
    }
  }
}

TEST(TwoRanksEmptyBatchTest, AloneAnEmptyBatchIsStillAnError) {
  auto trainer = Trainer::Create(Options("tinymlp", OptimizerKind::kSgd, 0));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto step = (*trainer)->Step(Batch{});
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), HasSubstr("n must be > 0"));
}

}  // namespace
}  // namespace sophon
