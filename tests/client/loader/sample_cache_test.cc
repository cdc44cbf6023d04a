#include "client/loader/sample_cache.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using testing::SampleFileBytes;

std::unique_ptr<SampleCache> Make(int64_t entries, CachePolicy policy, size_t size = 1000) {
  CacheOptions options;
  options.bytes = entries * (static_cast<int64_t>(size) + kCacheEntryOverheadBytes);
  options.policy = policy;
  absl::StatusOr<std::unique_ptr<SampleCache>> cache = SampleCache::Create(options);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return *std::move(cache);
}

TEST(SampleCacheTest, NoEvictKeepsTheFirstThatFitAndHitsThemEveryLaterEpoch) {
  std::unique_ptr<SampleCache> cache = Make(3, CachePolicy::kNoEvict);
  const std::vector<uint64_t> epoch0 = {4, 0, 3, 1, 2};
  for (uint64_t id : epoch0) {
    std::string out;
    EXPECT_FALSE(cache->Get(id, &out));
    cache->Put(id, SampleFileBytes(id));
  }
  EXPECT_EQ(cache->stats().entries, 3);
  EXPECT_EQ(cache->stats().rejected, 2u);
  for (int epoch = 1; epoch <= 3; ++epoch) {
    int hits = 0;
    for (uint64_t id : {2, 1, 4, 0, 3}) {
      std::string out;
      if (cache->Get(id, &out)) {
        ++hits;
        EXPECT_EQ(out, SampleFileBytes(id)) << "sample " << id;
      } else {
        cache->Put(id, SampleFileBytes(id));  // no room: not kept
      }
    }
    EXPECT_EQ(hits, 3) << "epoch " << epoch;
  }
  for (uint64_t id : {4, 0, 3}) EXPECT_TRUE(cache->Contains(id)) << id;
  const SampleCacheStats stats = cache->stats();
  EXPECT_EQ(stats.hits, 9u);
  EXPECT_EQ(stats.misses, 5u + 6u);
  EXPECT_EQ(stats.hit_bytes, 9u * 1000);
  EXPECT_EQ(stats.evicted, 0u);
  EXPECT_EQ(stats.bytes, 3 * (1000 + kCacheEntryOverheadBytes));
}

TEST(SampleCacheTest, LruEvictsTheLeastRecentlyUsed) {
  std::unique_ptr<SampleCache> cache = Make(2, CachePolicy::kLru);
  std::string out;
  cache->Put(0, SampleFileBytes(0));
  cache->Put(1, SampleFileBytes(1));
  EXPECT_TRUE(cache->Get(0, &out));  // 1 is now the least recently used
  cache->Put(2, SampleFileBytes(2));            // evicts 1
  EXPECT_TRUE(cache->Contains(0));
  EXPECT_FALSE(cache->Contains(1));
  EXPECT_TRUE(cache->Contains(2));
  // A sequential scan larger than the cache thrashes LRU: no hits at all.
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t id = 10; id < 13; ++id) {
      if (!cache->Get(id, &out)) cache->Put(id, SampleFileBytes(id));
    }
  }
  const SampleCacheStats stats = cache->stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 6u);
  EXPECT_EQ(stats.evicted, 1u + 6u);
  EXPECT_EQ(stats.entries, 2);
  EXPECT_LE(stats.bytes, cache->options().bytes);
}

TEST(SampleCacheTest, CorruptEntryIsDroppedAndFetchedAgain) {
  std::unique_ptr<SampleCache> cache = Make(4, CachePolicy::kNoEvict);
  cache->Put(7, SampleFileBytes(7));
  ASSERT_TRUE(cache->CorruptForTest(7));
  std::string out = "untouched";
  EXPECT_FALSE(cache->Get(7, &out));
  EXPECT_EQ(out, "untouched");
  EXPECT_FALSE(cache->Contains(7));
  SampleCacheStats stats = cache->stats();
  EXPECT_EQ(stats.corrupt, 1u);
  EXPECT_EQ(stats.entries, 0);
  EXPECT_EQ(stats.bytes, 0);
  // Fetched again, kept again, intact.
  EXPECT_TRUE(cache->Put(7, SampleFileBytes(7)));
  EXPECT_TRUE(cache->Get(7, &out));
  EXPECT_EQ(out, SampleFileBytes(7));
}

TEST(SampleCacheTest, BoundCountsOverheadAndRefusesWhatCannotFit) {
  CacheOptions options;
  options.bytes = 1000 + kCacheEntryOverheadBytes - 1;
  std::unique_ptr<SampleCache> cache = *SampleCache::Create(options);
  EXPECT_FALSE(cache->Put(1, SampleFileBytes(1)));
  EXPECT_TRUE(cache->Put(2, SampleFileBytes(2, 100)));
  EXPECT_EQ(cache->stats().bytes, 100 + kCacheEntryOverheadBytes);
  options.policy = CachePolicy::kLru;
  std::unique_ptr<SampleCache> lru = *SampleCache::Create(options);
  EXPECT_TRUE(lru->Put(2, SampleFileBytes(2, 100)));
  EXPECT_FALSE(lru->Put(1, SampleFileBytes(1)));  // larger than the bound: nothing evicted for it
  EXPECT_TRUE(lru->Contains(2));
}

TEST(SampleCacheTest, RefusesInvalidOptionsByName) {
  CacheOptions options;
  options.bytes = -1;
  absl::StatusOr<std::unique_ptr<SampleCache>> cache = SampleCache::Create(options);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find("CacheOptions.bytes"), std::string::npos)
      << cache.status();
}

TEST(SampleCacheTest, ConcurrentPutsAndGetsStayWithinTheBound) {
  std::unique_ptr<SampleCache> cache = Make(50, CachePolicy::kLru, 200);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      std::string out;
      for (uint64_t i = 0; i < 2000; ++i) {
        const uint64_t id = (i * 7 + t * 13) % 120;
        if (cache->Get(id, &out)) {
          ASSERT_EQ(out, SampleFileBytes(id, 200));
        } else {
          cache->Put(id, SampleFileBytes(id, 200));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const SampleCacheStats stats = cache->stats();
  EXPECT_LE(stats.bytes, cache->options().bytes);
  EXPECT_EQ(stats.hits + stats.misses, 4u * 2000);
  EXPECT_EQ(stats.corrupt, 0u);
}

TEST(SampleCacheTest, AHitsCpuCostPerByteIsCalibratedThenMeasured) {
  CacheOptions options;
  options.bytes = 64 << 20;
  absl::StatusOr<std::unique_ptr<SampleCache>> cache = SampleCache::Create(options);
  ASSERT_TRUE(cache.ok()) << cache.status();
  // Before any hit: the checksum and copy timed at creation, somewhere
  // between free and 1 MB/s.
  const double calibrated = (*cache)->ReadSecondsPerByte();
  EXPECT_GT(calibrated, 0);
  EXPECT_LT(calibrated, 1e-6);
  const std::string file(1 << 20, 'f');
  ASSERT_TRUE((*cache)->Put(1, file));
  std::string out;
  for (int i = 0; i < 9; ++i) ASSERT_TRUE((*cache)->Get(1, &out));
  // 9 MiB of hits: their own CPU time per byte from now on.
  const SampleCacheStats stats = (*cache)->stats();
  EXPECT_EQ(stats.hit_bytes, 9u << 20);
  EXPECT_GT(stats.hit_cpu_seconds, 0);
  EXPECT_DOUBLE_EQ((*cache)->ReadSecondsPerByte(),
                   stats.hit_cpu_seconds / static_cast<double>(stats.hit_bytes));
}

}  // namespace
}  // namespace sophon
