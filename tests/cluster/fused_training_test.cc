// A fused array trained end to end: a real sophon-server (gRPC on
// 127.0.0.1, port 0) over real JPEG files, the real loader, and the LibTorch
// fused trainer. One loader feeds all B models (each sample is fetched and
// prepared once per epoch, not B times), and each model's epoch figures equal
// those of an ordinary run with its seed and hyperparameters on the same data.
#include <memory>
#include <string>
#include <vector>

#include "client/loader/loader.h"
#include "client/loader/sample_client.h"
#include "client/offload/fixed_policy.h"
#include "client/train/train_loop.h"
#include "client/train/trainer.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "sophon/planning/planner.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int kModels = 3;
constexpr int kEpochs = 2;

class FusedTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions dopts;
    dopts.classes = 2;
    dopts.per_class = 10;
    ServiceOptions service;
    service.prep_workers = 1;
    absl::StatusOr<testing::LocalServer> local =
        testing::StartLocalServer(testing::MakeTestDataset("fused_training", dopts), std::move(service));
    ASSERT_TRUE(local.ok()) << local.status();
    server_ = std::move(local->server);
    client_ = std::move(local->client);
  }

  // Trains `options` for kEpochs epochs over the whole dataset (batches of 5,
  // crops of 40, fetched at the cropped stage).
  absl::StatusOr<std::vector<EpochReport>> Train(const TrainerOptions& options) {
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(options);
    if (!trainer.ok()) return trainer.status();
    LoaderOptions loader_options;
    loader_options.batch_size = 5;
    loader_options.workers = 1;
    loader_options.prefetch_batches = 2;
    loader_options.seed = 3;
    loader_options.pipeline.augment.crop_size = 40;
    FixedPolicy policy(FixedKindStage(PlannerKind::kResizeOff), ModeName(PlannerKind::kResizeOff));
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), loader_options, &policy);
    if (!loader.ok()) return loader.status();
    TrainLoopOptions loop;
    loop.epochs = kEpochs;
    loop.progress = false;
    loop.mode_name = policy.name();
    return RunTraining(loader->get(), trainer->get(), loop);
  }

  uint64_t SamplesServed() {
    absl::StatusOr<v1::ServerStats> stats = client_->GetStats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    uint64_t served = 0;
    if (stats.ok()) {
      for (uint64_t n : stats->samples_by_stage()) served += n;
    }
    return served;
  }

  std::unique_ptr<StorageServer> server_;
  std::unique_ptr<SampleClient> client_;
};

TEST_F(FusedTrainingTest, OneLoaderFeedsEveryModelAsItsOwnRunWould) {
  TrainerOptions options;
  options.arch = "tinycnn";
  options.num_classes = 2;
  options.seed = 17;
  options.threads = 1;
  options.fused = true;
  options.models.resize(kModels);
  for (int k = 0; k < kModels; ++k) options.models[k].lr = 0.1 / (1 << k);

  const uint64_t served_before = SamplesServed();
  absl::StatusOr<std::vector<EpochReport>> fused = Train(options);
  ASSERT_TRUE(fused.ok()) << fused.status();
  // Each sample was fetched and prepared once per epoch for all the models.
  EXPECT_EQ(SamplesServed() - served_before, 20u * kEpochs);
  ASSERT_EQ(fused->size(), static_cast<size_t>(kEpochs));
  for (const EpochReport& r : *fused) {
    EXPECT_EQ(r.loader.samples, 20u);
    ASSERT_EQ(r.models.size(), static_cast<size_t>(kModels));
  }

  for (int k = 0; k < kModels; ++k) {
    TrainerOptions one = options;
    one.fused = false;
    one.seed = options.seed + k;
    one.models = {options.models[k]};
    absl::StatusOr<std::vector<EpochReport>> separate = Train(one);
    ASSERT_TRUE(separate.ok()) << separate.status();
    ASSERT_EQ(separate->size(), static_cast<size_t>(kEpochs));
    for (int e = 0; e < kEpochs; ++e) {
      const EpochReport& s = (*separate)[e];
      EXPECT_TRUE(s.models.empty());
      EXPECT_NEAR((*fused)[e].models[k].mean_loss, s.mean_loss, 1e-4)
          << "model " << k << " epoch " << e;
      // At most one prediction of the 20 may flip on float rounding.
      EXPECT_NEAR((*fused)[e].models[k].top1, s.top1, 1.0 / 20 + 1e-9)
          << "model " << k << " epoch " << e;
    }
  }
  // The models differ: their learning rates do.
  EXPECT_NE((*fused)[kEpochs - 1].models[0].mean_loss, (*fused)[kEpochs - 1].models[2].mean_loss);
}

}  // namespace
}  // namespace sophon
