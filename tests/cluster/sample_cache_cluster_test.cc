// The training node's sample cache (LoaderOptions.sample_cache, sophon-train
// --local-cache-bytes) against a real sophon-server on 127.0.0.1 (port 0):
// what later epochs take from the cache instead of fetching, batches equal to
// those of a loader without a cache, and a corrupt entry fetched again.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/loader/loader.h"
#include "client/loader/sample_cache.h"
#include "client/loader/sample_client.h"
#include "client/offload/fixed_policy.h"
#include "gtest/gtest.h"
#include "server/storage_server.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int kSamples = 12;

class SampleCacheClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TestDatasetOptions dopts;
    dopts.classes = 2;
    dopts.per_class = kSamples / 2;
    dir_ = testing::MakeTestDataset("sample_cache_cluster", dopts);
    ServiceOptions service;
    service.prep_workers = 2;
    absl::StatusOr<testing::LocalServer> local = testing::StartLocalServer(dir_, std::move(service));
    ASSERT_TRUE(local.ok()) << local.status();
    server_ = std::move(local->server);
    client_ = std::move(local->client);
  }

  // Sample id -> its float tensor, for one epoch of a loader whose policy
  // asks for every sample at `stage`.
  using Epoch = std::map<uint64_t, std::vector<float>>;
  Epoch RunEpoch(Loader& loader, uint64_t epoch) {
    EXPECT_TRUE(loader.StartEpoch(epoch).ok());
    Epoch got;
    Batch b;
    const size_t per = 3 * 32 * 32;
    while (true) {
      absl::StatusOr<bool> more = loader.Next(&b);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) break;
      for (int i = 0; i < b.n; ++i) {
        got[b.ids[i]] = std::vector<float>(b.images.begin() + i * per,
                                           b.images.begin() + (i + 1) * per);
      }
    }
    EXPECT_EQ(got.size(), static_cast<size_t>(kSamples));
    return got;
  }

  std::unique_ptr<Loader> MakeLoader(FixedPolicy* policy, std::shared_ptr<SampleCache> cache) {
    LoaderOptions options;
    options.batch_size = 4;
    options.workers = 2;
    options.pipeline.augment.crop_size = 32;
    options.sample_cache = std::move(cache);
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(client_.get(), options, policy);
    EXPECT_TRUE(loader.ok()) << loader.status();
    return loader.ok() ? *std::move(loader) : nullptr;
  }

  std::shared_ptr<SampleCache> MakeCache(int64_t bytes) {
    CacheOptions options;
    options.bytes = bytes;
    absl::StatusOr<std::unique_ptr<SampleCache>> cache = SampleCache::Create(options);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::shared_ptr<SampleCache>(*std::move(cache)) : nullptr;
  }

  // What the cache charges for every sample of the dataset.
  int64_t WholeSet() const {
    int64_t total = 0;
    for (uint64_t id = 0; id < kSamples; ++id) {
      total += static_cast<int64_t>(server_->source().manifest().raw_size(id)) +
               kCacheEntryOverheadBytes;
    }
    return total;
  }

  std::string dir_;
  std::unique_ptr<StorageServer> server_;
  std::unique_ptr<SampleClient> client_;
};

TEST_F(SampleCacheClusterTest, LaterEpochsTakeEverySampleFromACacheThatHoldsTheSet) {
  FixedPolicy nooff(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> reference = MakeLoader(&nooff, nullptr);
  std::shared_ptr<SampleCache> cache = MakeCache(WholeSet());
  FixedPolicy cached_policy(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> loader = MakeLoader(&cached_policy, cache);
  ASSERT_TRUE(reference && loader && cache);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const Epoch want = RunEpoch(*reference, epoch);
    const Epoch got = RunEpoch(*loader, epoch);
    EXPECT_EQ(got, want) << "epoch " << epoch << ": batches differ from the uncached loader's";
    const LoaderEpochStats stats = loader->stats();
    if (epoch == 0) {
      EXPECT_EQ(stats.requested, static_cast<uint64_t>(kSamples));
      EXPECT_EQ(stats.sample_cache_hits, 0u);
      EXPECT_EQ(stats.sample_cache_inserted, static_cast<uint64_t>(kSamples));
    } else {
      EXPECT_EQ(stats.requested, 0u) << "epoch " << epoch << " fetched samples";
      EXPECT_EQ(stats.sample_cache_hits, static_cast<uint64_t>(kSamples));
      EXPECT_EQ(stats.bytes_by_stage[StageIndex(Stage::kRaw)], 0u);
    }
    EXPECT_EQ(stats.sample_cache_entries, kSamples);
    EXPECT_EQ(stats.sample_cache_bytes, WholeSet());
  }
}

TEST_F(SampleCacheClusterTest, AHalfCacheHitsWhatTheFirstEpochKept) {
  FixedPolicy policy(Stage::kRaw, "nooff");
  std::shared_ptr<SampleCache> cache = MakeCache(WholeSet() / 2);
  std::unique_ptr<Loader> loader = MakeLoader(&policy, cache);
  ASSERT_TRUE(loader && cache);
  RunEpoch(*loader, 0);
  const uint64_t kept = loader->stats().sample_cache_inserted;
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, static_cast<uint64_t>(kSamples));
  for (uint64_t epoch = 1; epoch < 3; ++epoch) {
    RunEpoch(*loader, epoch);
    const LoaderEpochStats stats = loader->stats();
    EXPECT_EQ(stats.sample_cache_hits, kept) << "epoch " << epoch;
    EXPECT_EQ(stats.requested, kSamples - kept) << "epoch " << epoch;
    EXPECT_EQ(stats.sample_cache_inserted, 0u) << "noevict: a full cache keeps nothing more";
  }
  EXPECT_LE(cache->stats().bytes, WholeSet() / 2);
}

TEST_F(SampleCacheClusterTest, ACorruptEntryIsFetchedAgainNotTrainedOn) {
  FixedPolicy nooff(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> reference = MakeLoader(&nooff, nullptr);
  std::shared_ptr<SampleCache> cache = MakeCache(WholeSet());
  FixedPolicy policy(Stage::kRaw, "nooff");
  std::unique_ptr<Loader> loader = MakeLoader(&policy, cache);
  ASSERT_TRUE(reference && loader && cache);
  RunEpoch(*loader, 0);
  ASSERT_TRUE(cache->CorruptForTest(5));
  const Epoch got = RunEpoch(*loader, 1);
  EXPECT_EQ(got, RunEpoch(*reference, 1));
  const LoaderEpochStats stats = loader->stats();
  EXPECT_EQ(stats.sample_cache_hits, static_cast<uint64_t>(kSamples - 1));
  EXPECT_EQ(stats.requested, 1u);
  EXPECT_EQ(stats.sample_cache_inserted, 1u) << "the refetched sample is kept again";
  EXPECT_EQ(cache->stats().corrupt, 1u);
}

}  // namespace
}  // namespace sophon
