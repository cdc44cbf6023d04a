// Ranks and checkpoints end to end: three storage servers holding shards
// (real gRPC on 127.0.0.1, real files), one loader per rank, LibTorch
// trainers joined over c10d (Gloo) in threads of this process, and the train
// loop with its checkpoints.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "client/loader/loader.h"
#include "client/offload/fixed_policy.h"
#include "client/train/train_loop.h"
#include "client/train/trainer.h"
#include "gtest/gtest.h"
#include "sophon/planning/planner.h"
#include "tests/client/torch/ranks.h"
#include "tests/client/torch/saved_models.h"
#include "tests/client/torch/skip_without_gloo.h"
#include "tests/cluster/local_cluster.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

class DistributedTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions d;
    d.classes = 3;
    d.per_class = 8;  // 24 samples: two ranks need no padding
    d.min_side = 40;
    d.max_side = 64;
    const std::string full = testing::MakeTestDataset("dist_full", d);
    absl::StatusOr<testing::LocalCluster> cluster =
        testing::StartLocalCluster(testing::SplitIntoShards(full, 3, "dist"));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  static LoaderOptions Loading(int batch, int rank, int world) {
    LoaderOptions o;
    o.batch_size = batch;
    o.workers = 1;
    o.prefetch_batches = 2;
    o.seed = 3;
    o.rank = rank;
    o.world = world;
    o.pipeline.augment.crop_size = 32;
    return o;
  }

  static TrainerOptions Training(const DistributedOptions& distributed = {}) {
    TrainerOptions o;
    o.arch = "tinymlp";
    o.num_classes = 3;
    o.seed = 7;
    o.threads = 1;
    o.models = {Hyperparameters{}};
    o.models[0].lr = 0.05;
    o.distributed = distributed;
    return o;
  }

  TrainLoopOptions Looping(int epochs, int64_t global_batch) {
    TrainLoopOptions o;
    o.epochs = epochs;
    o.progress = false;
    o.global_batch = global_batch;
    o.dataset_fingerprint = cluster_.set->manifest().fingerprint();
    o.seed = 3;
    return o;
  }

  // One rank's run: its own loader and trainer over the shared servers.
  struct RankRun {
    std::unique_ptr<Trainer> trainer;
    TrainerOptions options;
    absl::Status status;
    std::multiset<uint64_t> ids;  // every sample its loader delivered
  };

  // Trains `world` ranks (threads) with per-rank batch `batch` under
  // `loop`; `prepare(rank, trainer)` may load a checkpoint first.
  std::vector<RankRun> Train(int world, int batch, TrainLoopOptions loop,
                             const std::function<absl::Status(Trainer*, TrainLoopOptions*)>&
                                 prepare = nullptr,
                             const std::string& init_checkpoint = "") {
    std::vector<RankRun> runs(world);
    const int port = world > 1 ? testing::FreePort() : 0;
    testing::OnRanks(world, [&](int rank) {
      RankRun& run = runs[rank];
      run.options = Training(world > 1 ? testing::RankOptions(rank, world, port)
                                       : DistributedOptions());
      run.options.init_checkpoint = init_checkpoint;
      absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(run.options);
      if (!trainer.ok()) {
        run.status = trainer.status();
        return;
      }
      run.trainer = *std::move(trainer);
      TrainLoopOptions mine = loop;
      if (prepare) {
        run.status = prepare(run.trainer.get(), &mine);
        if (!run.status.ok()) return;
      }
      FixedPolicy policy(Stage::kFlipped, "resizeoff");
      absl::StatusOr<std::unique_ptr<Loader>> loader =
          Loader::Create(cluster_.set.get(), Loading(batch, rank, world), &policy);
      if (!loader.ok()) {
        run.status = loader.status();
        return;
      }
      absl::StatusOr<std::vector<EpochReport>> reports =
          RunTraining(loader->get(), run.trainer.get(), mine);
      run.status = reports.status();
    });
    return runs;
  }

  testing::LocalCluster cluster_;
};

TEST_F(DistributedTrainingTest, TwoRanksEndIdenticalAndEqualToOneProcessOnTheCombinedBatches) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const std::string dir = testing::MakeTempDir("dist_models");
  // The ranks are built in threads at once, so their initialisations draw
  // from LibTorch's global generator in turns: rank 0's weights (broadcast
  // to rank 1) are saved before training, and the one process starts from
  // them.
  const std::string init = dir + "/init.pt";
  std::vector<RankRun> two = Train(2, 4, Looping(2, 8), [&](Trainer* t, TrainLoopOptions*) {
    if (t->rank() != 0) return absl::OkStatus();
    return t->Save(init).status();
  });
  for (const RankRun& r : two) ASSERT_TRUE(r.status.ok()) << r.status;
  std::vector<RankRun> one = Train(1, 8, Looping(2, 8), nullptr, init);
  ASSERT_TRUE(one[0].status.ok()) << one[0].status;
  const auto rank0 = testing::SavedModels(*two[0].trainer, two[0].options, dir + "/r0.pt");
  const auto rank1 = testing::SavedModels(*two[1].trainer, two[1].options, dir + "/r1.pt");
  const auto alone = testing::SavedModels(*one[0].trainer, one[0].options, dir + "/one.pt");
  ASSERT_EQ(rank0.size(), 1u);
  ASSERT_EQ(rank1.size(), 1u);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(testing::MaxDifference(rank0[0], rank1[0]), 0.0) << "the ranks' models differ";
  const double d = testing::MaxDifference(rank0[0], alone[0], /*parameters_only=*/true);
  EXPECT_GE(d, 0.0);
  EXPECT_LE(d, 1e-5) << "2 ranks x 4 differ from 1 process x 8 on the same global batches";
  // And the models did train (6 steps at lr 0.05 move the weights).
  const auto fresh_trainer = Trainer::Create(Training());
  ASSERT_TRUE(fresh_trainer.ok());
  const auto fresh = testing::SavedModels(**fresh_trainer, Training(), dir + "/fresh.pt");
  EXPECT_GT(testing::MaxDifference(fresh[0], alone[0], true), 1e-4);
}

TEST_F(DistributedTrainingTest, StoppedAndResumedEndsAsTheUninterruptedRun) {
  SOPHON_SKIP_WITHOUT_GLOO();
  const std::string dir = testing::MakeTempDir("dist_resume");
  // Uninterrupted: 2 epochs of 3 steps.
  std::vector<RankRun> whole = Train(1, 8, Looping(2, 8));
  ASSERT_TRUE(whole[0].status.ok()) << whole[0].status;
  // Stopped after 4 steps (inside epoch 1) with a checkpoint, then resumed
  // in a fresh trainer.
  TrainLoopOptions first = Looping(2, 8);
  first.checkpoint_path = dir + "/checkpoint.pt";
  first.max_steps = 4;
  std::vector<RankRun> stopped = Train(1, 8, first);
  ASSERT_TRUE(stopped[0].status.ok()) << stopped[0].status;
  TrainLoopOptions second = Looping(2, 8);
  second.checkpoint_path = first.checkpoint_path;
  TrainingCursor seen;
  std::vector<RankRun> resumed =
      Train(1, 8, second, [&](Trainer* trainer, TrainLoopOptions* loop) -> absl::Status {
        absl::StatusOr<TrainingCursor> cursor = trainer->LoadCheckpoint(loop->checkpoint_path);
        if (!cursor.ok()) return cursor.status();
        if (absl::Status s = CheckResumable(*cursor, *loop, loop->checkpoint_path); !s.ok()) {
          return s;
        }
        seen = *cursor;
        loop->start = *cursor;
        loop->resumed = true;
        return absl::OkStatus();
      });
  ASSERT_TRUE(resumed[0].status.ok()) << resumed[0].status;
  EXPECT_EQ(seen.epoch, 1);
  EXPECT_EQ(seen.position, 8);
  EXPECT_EQ(seen.steps, 4);
  const auto a = testing::SavedModels(*whole[0].trainer, whole[0].options, dir + "/whole.pt");
  const auto b = testing::SavedModels(*resumed[0].trainer, resumed[0].options, dir + "/res.pt");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(testing::MaxDifference(a[0], b[0]), 0.0) << "the resumed run ended elsewhere";
  // Another global batch is refused with both values.
  TrainLoopOptions other = Looping(2, 16);
  const absl::Status refused = CheckResumable(seen, other, "ckpt");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("8"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("16"), std::string::npos) << refused;
}

}  // namespace
}  // namespace sophon
