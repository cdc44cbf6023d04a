#include "client/loader/sample_cache.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

// Sample `id`'s file: `size` bytes that differ from every other sample's.
std::string File(uint64_t id, size_t size = 1000) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((id * 131 + i * 7) & 0xff);
  return bytes;
}

std::unique_ptr<SampleCache> Make(int64_t entries, SampleCachePolicy policy, size_t size = 1000) {
  SampleCacheOptions options;
  options.max_bytes = entries * (static_cast<int64_t>(size) + SampleCache::kEntryOverhead);
  options.policy = policy;
  absl::StatusOr<std::unique_ptr<SampleCache>> cache = SampleCache::Create(options);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return *std::move(cache);
}

TEST(SampleCacheTest, NoEvictKeepsTheFirstThatFitAndHitsThemEveryLaterEpoch) {
  std::unique_ptr<SampleCache> cache = Make(3, SampleCachePolicy::kNoEvict);
  const std::vector<uint64_t> epoch0 = {4, 0, 3, 1, 2};
  for (uint64_t id : epoch0) {
    std::string out;
    EXPECT_FALSE(cache->Get(id, &out));
    cache->Put(id, File(id));
  }
  EXPECT_EQ(cache->stats().entries, 3);
  EXPECT_EQ(cache->stats().rejected, 2u);
  for (int epoch = 1; epoch <= 3; ++epoch) {
    int hits = 0;
    for (uint64_t id : {2, 1, 4, 0, 3}) {
      std::string out;
      if (cache->Get(id, &out)) {
        ++hits;
        EXPECT_EQ(out, File(id)) << "sample " << id;
      } else {
        cache->Put(id, File(id));  // no room: not kept
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
  EXPECT_EQ(stats.bytes, 3 * (1000 + SampleCache::kEntryOverhead));
}

TEST(SampleCacheTest, LruEvictsTheLeastRecentlyUsed) {
  std::unique_ptr<SampleCache> cache = Make(2, SampleCachePolicy::kLru);
  std::string out;
  cache->Put(0, File(0));
  cache->Put(1, File(1));
  EXPECT_TRUE(cache->Get(0, &out));  // 1 is now the least recently used
  cache->Put(2, File(2));            // evicts 1
  EXPECT_TRUE(cache->Contains(0));
  EXPECT_FALSE(cache->Contains(1));
  EXPECT_TRUE(cache->Contains(2));
  // A sequential scan larger than the cache thrashes LRU: no hits at all.
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t id = 10; id < 13; ++id) {
      if (!cache->Get(id, &out)) cache->Put(id, File(id));
    }
  }
  const SampleCacheStats stats = cache->stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 6u);
  EXPECT_EQ(stats.evicted, 1u + 6u);
  EXPECT_EQ(stats.entries, 2);
  EXPECT_LE(stats.bytes, cache->options().max_bytes);
}

TEST(SampleCacheTest, CorruptEntryIsDroppedAndFetchedAgain) {
  std::unique_ptr<SampleCache> cache = Make(4, SampleCachePolicy::kNoEvict);
  cache->Put(7, File(7));
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
  EXPECT_TRUE(cache->Put(7, File(7)));
  EXPECT_TRUE(cache->Get(7, &out));
  EXPECT_EQ(out, File(7));
}

TEST(SampleCacheTest, BoundCountsOverheadAndRefusesWhatCannotFit) {
  SampleCacheOptions options;
  options.max_bytes = 1000 + SampleCache::kEntryOverhead - 1;
  std::unique_ptr<SampleCache> cache = *SampleCache::Create(options);
  EXPECT_FALSE(cache->Put(1, File(1)));
  EXPECT_TRUE(cache->Put(2, File(2, 100)));
  EXPECT_EQ(cache->stats().bytes, 100 + SampleCache::kEntryOverhead);
  options.policy = SampleCachePolicy::kLru;
  std::unique_ptr<SampleCache> lru = *SampleCache::Create(options);
  EXPECT_TRUE(lru->Put(2, File(2, 100)));
  EXPECT_FALSE(lru->Put(1, File(1)));  // larger than the bound: nothing evicted for it
  EXPECT_TRUE(lru->Contains(2));
}

TEST(SampleCacheTest, OptionsAndPolicyNames) {
  SampleCacheOptions options;
  options.max_bytes = -1;
  EXPECT_NE(options.Validate().message().find("max_bytes"), std::string::npos);
  EXPECT_FALSE(SampleCache::Create(options).ok());
  EXPECT_EQ(*ParseSampleCachePolicy("noevict"), SampleCachePolicy::kNoEvict);
  EXPECT_EQ(*ParseSampleCachePolicy("lru"), SampleCachePolicy::kLru);
  absl::StatusOr<SampleCachePolicy> bad = ParseSampleCachePolicy("fifo");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fifo"), std::string::npos);
  EXPECT_STREQ(SampleCachePolicyName(SampleCachePolicy::kLru), "lru");
}

TEST(SampleCacheTest, ConcurrentPutsAndGetsStayWithinTheBound) {
  std::unique_ptr<SampleCache> cache = Make(50, SampleCachePolicy::kLru, 200);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      std::string out;
      for (uint64_t i = 0; i < 2000; ++i) {
        const uint64_t id = (i * 7 + t * 13) % 120;
        if (cache->Get(id, &out)) {
          ASSERT_EQ(out, File(id, 200));
        } else {
          cache->Put(id, File(id, 200));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const SampleCacheStats stats = cache->stats();
  EXPECT_LE(stats.bytes, cache->options().max_bytes);
  EXPECT_EQ(stats.hits + stats.misses, 4u * 2000);
  EXPECT_EQ(stats.corrupt, 0u);
}

}  // namespace
}  // namespace sophon
