// A real sophon-server with the cache of raw sample bytes on (--cache-bytes):
// two epochs over gRPC, the hits and misses in GetStats, and each sample's
// cache_hit flag.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/memory_bound.h"
#include "sophon/data/cached_source.h"
#include "sophon/net/wire.h"
#include "sophon/ops/augment.h"
#include "tests/cluster/local_server.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

constexpr int kSamples = 8;

// One Fetch stream asking for `ids` at `stage` in `epoch`; the samples by id.
std::map<uint64_t, v1::Sample> Fetch(SampleClient& client, const std::vector<uint64_t>& ids,
                                     Stage stage, uint64_t epoch) {
  AugmentOptions augment;
  augment.crop_size = 32;
  FetchRequestBuilder builder(epoch, /*seed=*/1, augment);
  for (uint64_t id : ids) builder.Add(id, stage);
  std::unique_ptr<FetchCall> call = client.OpenFetch();
  EXPECT_TRUE(call->Write(builder.Take()));
  call->WritesDone();
  std::map<uint64_t, v1::Sample> got;
  v1::FetchResponse response;
  while (call->Read(&response)) {
    for (const v1::Sample& sample : response.samples()) {
      EXPECT_EQ(sample.error_code(), 0) << sample.error_message();
      got[sample.id()] = sample;
    }
  }
  EXPECT_TRUE(call->Finish().ok());
  EXPECT_EQ(got.size(), ids.size());
  return got;
}

std::vector<uint64_t> Ids(bool reversed) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < kSamples; ++id) ids.push_back(id);
  if (reversed) std::reverse(ids.begin(), ids.end());
  return ids;
}

// What the cache charges for sample `id` of the server's dataset.
int64_t Charge(const StorageServer& server, uint64_t id) {
  return static_cast<int64_t>(server.source().manifest().raw_size(id)) +
         kCacheEntryOverheadBytes;
}

// One prep worker: the server reads the samples in the order asked.
ServiceOptions CacheService(int64_t bytes, CachePolicy policy) {
  ServiceOptions service;
  service.prep_workers = 1;
  service.cache.bytes = bytes;
  service.cache.policy = policy;
  return service;
}

testing::TestDatasetOptions Dataset() {
  testing::TestDatasetOptions options;
  options.classes = 2;
  options.per_class = kSamples / 2;
  options.min_side = 64;
  options.max_side = 96;
  return options;
}

TEST(CacheClusterTest, TheSecondEpochIsServedFromACacheThatHoldsEverything) {
  const std::string dir = testing::MakeTestDataset("cache_cluster_all", Dataset());
  for (CachePolicy policy : {CachePolicy::kNoEvict, CachePolicy::kLru}) {
    SCOPED_TRACE(CachePolicyName(policy));
    absl::StatusOr<testing::LocalServer> local =
        testing::StartLocalServer(dir, CacheService(int64_t{64} << 20, policy));
    ASSERT_TRUE(local.ok()) << local.status();
    SampleClient& client = *local->client;

    const std::map<uint64_t, v1::Sample> first = Fetch(client, Ids(false), Stage::kRaw, 0);
    int64_t held = 0;
    for (const auto& [id, sample] : first) {
      EXPECT_FALSE(sample.cache_hit()) << "sample " << id;
      held += Charge(*local->server, id);
    }
    absl::StatusOr<v1::ServerStats> stats = client.GetStats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->cache_hits(), 0u);
    EXPECT_EQ(stats->cache_misses(), uint64_t{kSamples});
    EXPECT_EQ(stats->cache_entries(), uint64_t{kSamples});
    EXPECT_EQ(stats->cache_bytes(), static_cast<uint64_t>(held));
    EXPECT_EQ(stats->cache_capacity_bytes(), uint64_t{64} << 20);

    // Another epoch, another order: every sample from the cache, the same bytes.
    const std::map<uint64_t, v1::Sample> second = Fetch(client, Ids(true), Stage::kRaw, 1);
    for (const auto& [id, sample] : second) {
      EXPECT_TRUE(sample.cache_hit()) << "sample " << id;
      EXPECT_EQ(sample.payload(), first.at(id).payload()) << "sample " << id;
    }
    stats = client.GetStats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->cache_hits(), uint64_t{kSamples});
    EXPECT_EQ(stats->cache_misses(), uint64_t{kSamples});
    EXPECT_EQ(stats->cache_evictions(), 0u);
    EXPECT_EQ(stats->cache_entries(), uint64_t{kSamples});

    // A stage past RAW from cached bytes is what the files give.
    const std::map<uint64_t, v1::Sample> cropped = Fetch(client, {2, 5}, Stage::kCropped, 3);
    for (const auto& [id, sample] : cropped) EXPECT_TRUE(sample.cache_hit()) << id;
    absl::StatusOr<testing::LocalServer> plain = testing::StartLocalServer(dir);
    ASSERT_TRUE(plain.ok()) << plain.status();
    const std::map<uint64_t, v1::Sample> reference =
        Fetch(*plain->client, {2, 5}, Stage::kCropped, 3);
    for (const auto& [id, sample] : reference) {
      EXPECT_FALSE(sample.cache_hit()) << id;
      EXPECT_EQ(sample.payload(), cropped.at(id).payload()) << "sample " << id;
    }
    stats = plain->client->GetStats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->cache_capacity_bytes(), 0u);
    EXPECT_EQ(stats->cache_misses(), 0u);
  }
}

// Room for the first three samples: noevict keeps them and hits them in every
// later epoch; LRU, read in the same cyclic order, evicts each before it
// comes again.
TEST(CacheClusterTest, ACacheSmallerThanTheDatasetHitsAsItsPolicySays) {
  const std::string dir = testing::MakeTestDataset("cache_cluster_part", Dataset());
  for (CachePolicy policy : {CachePolicy::kNoEvict, CachePolicy::kLru}) {
    SCOPED_TRACE(CachePolicyName(policy));
    // The budget is known only once the sizes are: a first server tells them.
    int64_t budget = 0;
    {
      absl::StatusOr<testing::LocalServer> sizes = testing::StartLocalServer(dir);
      ASSERT_TRUE(sizes.ok()) << sizes.status();
      for (uint64_t id = 0; id < 3; ++id) budget += Charge(*sizes->server, id);
    }
    absl::StatusOr<testing::LocalServer> local =
        testing::StartLocalServer(dir, CacheService(budget, policy));
    ASSERT_TRUE(local.ok()) << local.status();
    const auto& cache = static_cast<const CachedSource&>(local->server->source());

    Fetch(*local->client, Ids(false), Stage::kRaw, 0);
    const std::map<uint64_t, v1::Sample> second =
        Fetch(*local->client, Ids(false), Stage::kRaw, 1);
    absl::StatusOr<v1::ServerStats> stats = local->client->GetStats();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_LE(stats->cache_bytes(), static_cast<uint64_t>(budget));
    EXPECT_EQ(stats->cache_misses() + stats->cache_hits(), uint64_t{2 * kSamples});
    if (policy == CachePolicy::kNoEvict) {
      for (const auto& [id, sample] : second) {
        EXPECT_EQ(sample.cache_hit(), id < 3) << "sample " << id;
        EXPECT_EQ(cache.Contains(id), id < 3) << "sample " << id;
      }
      EXPECT_EQ(stats->cache_hits(), 3u);
      EXPECT_EQ(stats->cache_misses(), uint64_t{2 * kSamples - 3});
      EXPECT_EQ(stats->cache_entries(), 3u);
      EXPECT_EQ(stats->cache_evictions(), 0u);
      EXPECT_EQ(stats->cache_bytes(), static_cast<uint64_t>(budget));
    } else {
      for (const auto& [id, sample] : second) EXPECT_FALSE(sample.cache_hit()) << id;
      EXPECT_EQ(stats->cache_hits(), 0u);
      EXPECT_EQ(stats->cache_misses(), uint64_t{2 * kSamples});
      // Each sample evicted its predecessors as far as needed.
      EXPECT_GE(stats->cache_entries(), 1u);
      EXPECT_LT(stats->cache_entries(), uint64_t{kSamples});
      EXPECT_EQ(stats->cache_evictions(), 2 * kSamples - stats->cache_entries());
      EXPECT_TRUE(cache.Contains(kSamples - 1));
    }
  }
}

TEST(CacheClusterTest, TheMemoryBoundCountsTheCache) {
  ServiceOptions service;
  const ServerMemoryBound without = ComputeServerMemoryBound(service, 1 << 20, 1 << 20);
  service.cache.bytes = int64_t{400} << 20;
  const ServerMemoryBound with = ComputeServerMemoryBound(service, 1 << 20, 1 << 20);
  EXPECT_EQ(without.cache, 0);
  EXPECT_EQ(with.cache, int64_t{400} << 20);
  EXPECT_EQ(with.total() - without.total(),
            static_cast<int64_t>((int64_t{400} << 20) * (1 + kAllocatorOverhead)));
  EXPECT_NE(with.ToString().find("400 sample cache"), std::string::npos) << with.ToString();
  EXPECT_EQ(without.ToString().find("cache"), std::string::npos) << without.ToString();
}

TEST(CacheClusterTest, ABadCacheOptionStopsTheServerNamingIt) {
  const std::string dir = testing::MakeTestDataset("cache_cluster_bad", Dataset());
  absl::StatusOr<testing::LocalServer> local =
      testing::StartLocalServer(dir, CacheService(-1, CachePolicy::kLru));
  ASSERT_FALSE(local.ok());
  EXPECT_EQ(local.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(local.status().message().find("CacheOptions.bytes"), std::string::npos)
      << local.status();
}

}  // namespace
}  // namespace sophon
