// Shared batches (LoaderOptions.batch_share, sophon-train --share-batches-dir)
// against a real sophon-server on 127.0.0.1 (port 0): loaders of the same
// batches running at once fetch each sample once between them and hand out
// the lone loader's batches byte for byte; a loader with another seed shares
// nothing; a loader that stops mid-epoch holds no other back.
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/loader/batch_share.h"
#include "client/loader/loader.h"
#include "client/loader/sample_client.h"
#include "client/offload/fixed_policy.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int kSamples = 24;
constexpr int kBatch = 4;

// One epoch's batches in order: ids and image bytes each.
using Batches = std::vector<std::pair<std::vector<uint64_t>, std::vector<float>>>;

class BatchShareClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions dopts;
    dopts.classes = 2;
    dopts.per_class = kSamples / 2;
    const std::string dir = testing::MakeTestDataset("batch_share_cluster", dopts);
    ServiceOptions service;
    service.prep_workers = 2;
    absl::StatusOr<testing::LocalServer> local = testing::StartLocalServer(dir, std::move(service));
    ASSERT_TRUE(local.ok()) << local.status();
    server_ = std::move(local->server);
    for (int i = 0; i < 3; ++i) {
      ClientOptions copts;
      copts.address = server_->address();
      absl::StatusOr<std::unique_ptr<SampleClient>> client = SampleClient::Connect(copts);
      ASSERT_TRUE(client.ok()) << client.status();
      clients_.push_back(*std::move(client));
    }
    share_dir_ = testing::MakeTempDir("batch_share_cluster_share");
  }

  LoaderOptions Options(uint64_t seed) const {
    LoaderOptions options;
    options.batch_size = kBatch;
    options.workers = 2;
    options.seed = seed;
    options.pipeline.augment.crop_size = 32;
    return options;
  }

  // A loader on client `c`, sharing its batches when `share`.
  std::unique_ptr<Loader> MakeLoader(int c, uint64_t seed, bool share) {
    LoaderOptions options = Options(seed);
    if (share) {
      BatchShareOptions so;
      so.dir = share_dir_;
      absl::StatusOr<std::unique_ptr<BatchShare>> opened =
          BatchShare::Open(so, BatchShareKey(options, clients_[c]->manifest().fingerprint));
      EXPECT_TRUE(opened.ok()) << opened.status();
      if (!opened.ok()) return nullptr;
      options.batch_share = *std::move(opened);
    }
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(clients_[c].get(), options, &policy_);
    EXPECT_TRUE(loader.ok()) << loader.status();
    return loader.ok() ? *std::move(loader) : nullptr;
  }

  static Batches RunEpoch(Loader* loader, uint64_t epoch, LoaderEpochStats* stats = nullptr) {
    Batches got;
    EXPECT_TRUE(loader->StartEpoch(epoch).ok());
    Batch b;
    while (true) {
      absl::StatusOr<bool> more = loader->Next(&b);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      got.emplace_back(std::vector<uint64_t>(b.ids.begin(), b.ids.begin() + b.n), b.images);
    }
    if (stats != nullptr) *stats = loader->stats();
    return got;
  }

  std::unique_ptr<StorageServer> server_;
  std::vector<std::unique_ptr<SampleClient>> clients_;
  std::string share_dir_;
  FixedPolicy policy_{Stage::kRaw, "nooff"};
};

TEST_F(BatchShareClusterTest, TwoLoadersFetchEachSampleOnceAndGetTheLoneLoadersBatches) {
  std::unique_ptr<Loader> lone = MakeLoader(0, 7, /*share=*/false);
  ASSERT_TRUE(lone);
  const Batches want0 = RunEpoch(lone.get(), 0);
  const Batches want1 = RunEpoch(lone.get(), 1);
  lone.reset();

  std::unique_ptr<Loader> a = MakeLoader(1, 7, true), b = MakeLoader(2, 7, true);
  ASSERT_TRUE(a && b);
  for (uint64_t epoch : {0, 1}) {
    Batches got_a, got_b;
    LoaderEpochStats sa, sb;
    std::thread ta([&] { got_a = RunEpoch(a.get(), epoch, &sa); });
    std::thread tb([&] { got_b = RunEpoch(b.get(), epoch, &sb); });
    ta.join();
    tb.join();
    const Batches& want = epoch == 0 ? want0 : want1;
    EXPECT_EQ(got_a, want) << "epoch " << epoch;
    EXPECT_EQ(got_b, want) << "epoch " << epoch;
    // Each batch made by one of them and read by the other: each sample fetched once.
    EXPECT_EQ(sa.requested + sb.requested, static_cast<uint64_t>(kSamples)) << "epoch " << epoch;
    EXPECT_EQ(sa.shared_batches_published + sb.shared_batches_published, want.size());
    EXPECT_EQ(sa.shared_batches_read + sb.shared_batches_read, want.size());
    EXPECT_EQ(sa.samples, static_cast<uint64_t>(kSamples));
    EXPECT_EQ(sb.samples, static_cast<uint64_t>(kSamples));
  }
}

TEST_F(BatchShareClusterTest, AnotherSeedSharesNothing) {
  std::unique_ptr<Loader> a = MakeLoader(0, 7, true), b = MakeLoader(1, 8, true);
  ASSERT_TRUE(a && b);
  LoaderEpochStats sa, sb;
  RunEpoch(a.get(), 0, &sa);
  RunEpoch(b.get(), 0, &sb);
  EXPECT_EQ(sb.shared_batches_read, 0u);
  EXPECT_EQ(sb.requested, static_cast<uint64_t>(kSamples));
}

TEST_F(BatchShareClusterTest, ALoaderThatStopsMidEpochHoldsNoOneBack) {
  std::unique_ptr<Loader> quitter = MakeLoader(0, 7, true), other = MakeLoader(1, 7, true);
  ASSERT_TRUE(quitter && other);
  ASSERT_TRUE(quitter->StartEpoch(0).ok());
  Batch batch;
  ASSERT_TRUE(*quitter->Next(&batch));
  // It has claimed the batches it prefetches; stopping lets them go.
  quitter->Stop();
  LoaderEpochStats stats;
  const Batches got = RunEpoch(other.get(), 0, &stats);
  EXPECT_EQ(got.size(), static_cast<size_t>(kSamples / kBatch));
  EXPECT_EQ(stats.samples, static_cast<uint64_t>(kSamples));
}

}  // namespace
}  // namespace sophon
