#include "sophon/data/cached_source.h"

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

// A source of samples of given sizes whose bytes are a function of the id;
// counts its reads, fails the ids it is told to, and can hold every read at a
// barrier (to make concurrent misses certain).
class FakeSource final : public SampleSource {
 public:
  explicit FakeSource(std::vector<uint64_t> sizes) : sizes_(std::move(sizes)) {
    for (size_t i = 0; i < sizes_.size(); ++i) {
      table_.Add(absl::StrCat("c/", i, ".bin"), 0, sizes_[i]);
    }
  }
  static std::string Bytes(uint64_t id, uint64_t size) {
    std::string s(size, '\0');
    for (uint64_t i = 0; i < size; ++i) s[i] = static_cast<char>((id * 131 + i * 7) & 0xff);
    return s;
  }

  std::string name() const override { return "fake"; }
  const ManifestTable& manifest() const override { return table_; }
  const std::vector<std::string>& class_names() const override { return classes_; }
  uint64_t fingerprint() const override { return 4242; }
  std::vector<std::string> FilePaths() const override { return {"/data/a", "/data/b"}; }
  uint64_t max_sample_bytes() const override { return 12345; }
  uint32_t group_size() const override { return 7; }

  absl::StatusOr<std::string> Read(uint64_t id) const override {
    reads_.fetch_add(1);
    if (barrier_ != nullptr) barrier_->Block();
    if (id >= sizes_.size()) {
      return absl::OutOfRangeError(absl::StrCat("sample ", id, " is outside the manifest"));
    }
    {
      absl::MutexLock lock(&mu_);
      if (failing_ == static_cast<int64_t>(id)) {
        return absl::DataLossError(absl::StrCat("sample ", id, " (c/", id, ".bin): bad disk"));
      }
    }
    return Bytes(id, sizes_[id]);
  }

  void Fail(int64_t id) {
    absl::MutexLock lock(&mu_);
    failing_ = id;
  }
  void HoldReadsAt(absl::Barrier* barrier) { barrier_ = barrier; }
  int reads() const { return reads_.load(); }

 private:
  std::vector<uint64_t> sizes_;
  ManifestTable table_;
  std::vector<std::string> classes_ = {"c"};
  mutable std::atomic<int> reads_{0};
  mutable absl::Mutex mu_;
  int64_t failing_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Barrier* barrier_ = nullptr;
};

constexpr uint64_t kSize = 1000;
constexpr int64_t kCharge = kSize + kCacheEntryOverheadBytes;

struct Cache {
  FakeSource* inner;
  std::unique_ptr<CachedSource> cache;
};

Cache MakeCache(std::vector<uint64_t> sizes, int64_t bytes, CachePolicy policy) {
  auto inner = std::make_unique<FakeSource>(std::move(sizes));
  FakeSource* raw = inner.get();
  CacheOptions options;
  options.bytes = bytes;
  options.policy = policy;
  EXPECT_TRUE(options.Validate().ok());
  return {raw, std::make_unique<CachedSource>(std::move(inner), options)};
}

// Reads `ids` in order, checking every answer against the inner bytes and the
// bound after every read; returns the hit flags.
std::vector<bool> ReadAll(const CachedSource& cache, const std::vector<uint64_t>& ids) {
  std::vector<bool> hits;
  for (uint64_t id : ids) {
    SampleSource::ReadInfo info;
    absl::StatusOr<std::string> bytes = cache.ReadWithInfo(id, &info);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (bytes.ok()) EXPECT_EQ(*bytes, FakeSource::Bytes(id, kSize)) << "sample " << id;
    EXPECT_LE(cache.stats().bytes, cache.stats().capacity_bytes);
    hits.push_back(info.cache_hit);
  }
  return hits;
}

TEST(CachedSourceTest, NoEvictKeepsTheFirstSamplesThatFit) {
  Cache c = MakeCache(std::vector<uint64_t>(5, kSize), 3 * kCharge, CachePolicy::kNoEvict);
  const std::vector<bool> hits = ReadAll(*c.cache, {0, 1, 2, 3, 0, 1, 2, 3, 4, 0});
  EXPECT_EQ(hits, std::vector<bool>({false, false, false, false, true, true, true, false, false,
                                     true}));
  const CacheStats s = c.cache->stats();
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.misses, 6u);
  EXPECT_EQ(s.inserted, 3u);
  EXPECT_EQ(s.evicted, 0u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, 3 * kCharge);
  EXPECT_EQ(s.capacity_bytes, 3 * kCharge);
  EXPECT_EQ(c.inner->reads(), 6);
  for (uint64_t id : {0, 1, 2}) EXPECT_TRUE(c.cache->Contains(id)) << id;
  for (uint64_t id : {3, 4}) EXPECT_FALSE(c.cache->Contains(id)) << id;
}

TEST(CachedSourceTest, LruThrashesOnACycleLongerThanTheCache) {
  Cache c = MakeCache(std::vector<uint64_t>(4, kSize), 3 * kCharge, CachePolicy::kLru);
  const std::vector<bool> hits = ReadAll(*c.cache, {0, 1, 2, 3, 0, 1, 2, 3});
  EXPECT_EQ(hits, std::vector<bool>(8, false));
  const CacheStats s = c.cache->stats();
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 8u);
  EXPECT_EQ(s.inserted, 8u);
  EXPECT_EQ(s.evicted, 5u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, 3 * kCharge);
  for (uint64_t id : {1, 2, 3}) EXPECT_TRUE(c.cache->Contains(id)) << id;
  EXPECT_FALSE(c.cache->Contains(0));
}

TEST(CachedSourceTest, LruEvictsTheLeastRecentlyRead) {
  Cache c = MakeCache(std::vector<uint64_t>(4, kSize), 3 * kCharge, CachePolicy::kLru);
  // 0 is read again before 3 comes, so 1 goes; 1 then makes 2 go.
  const std::vector<bool> hits = ReadAll(*c.cache, {0, 1, 2, 0, 3, 0, 1});
  EXPECT_EQ(hits, std::vector<bool>({false, false, false, true, false, true, false}));
  const CacheStats s = c.cache->stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 5u);
  EXPECT_EQ(s.inserted, 5u);
  EXPECT_EQ(s.evicted, 2u);
  EXPECT_EQ(s.entries, 3u);
  for (uint64_t id : {0, 1, 3}) EXPECT_TRUE(c.cache->Contains(id)) << id;
  EXPECT_FALSE(c.cache->Contains(2));

  // The same sequence without eviction keeps 0, 1 and 2.
  Cache n = MakeCache(std::vector<uint64_t>(4, kSize), 3 * kCharge, CachePolicy::kNoEvict);
  EXPECT_EQ(ReadAll(*n.cache, {0, 1, 2, 0, 3, 0, 1}),
            std::vector<bool>({false, false, false, true, false, true, true}));
  EXPECT_EQ(n.cache->stats().hits, 3u);
  EXPECT_EQ(n.cache->stats().inserted, 3u);
}

TEST(CachedSourceTest, ASampleLargerThanTheBudgetIsNeverCached) {
  for (CachePolicy policy : {CachePolicy::kNoEvict, CachePolicy::kLru}) {
    SCOPED_TRACE(CachePolicyName(policy));
    // Sample 2 costs one byte more than the whole budget; sample 3 exactly it.
    const int64_t budget = 3 * kCharge;
    const uint64_t too_big = budget - kCacheEntryOverheadBytes + 1;
    Cache c = MakeCache({kSize, kSize, too_big, too_big - 1}, budget, policy);
    ASSERT_TRUE(c.cache->Read(0).ok());
    ASSERT_TRUE(c.cache->Read(1).ok());
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<std::string> bytes = c.cache->Read(2);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_EQ(*bytes, FakeSource::Bytes(2, too_big));
    }
    EXPECT_FALSE(c.cache->Contains(2));
    // Nothing was evicted for it.
    EXPECT_TRUE(c.cache->Contains(0));
    EXPECT_TRUE(c.cache->Contains(1));
    EXPECT_EQ(c.cache->stats().evicted, 0u);
    EXPECT_EQ(c.inner->reads(), 5);

    ASSERT_TRUE(c.cache->Read(3).ok());
    if (policy == CachePolicy::kLru) {
      // It fits alone: both others make room for it.
      EXPECT_TRUE(c.cache->Contains(3));
      EXPECT_EQ(c.cache->stats().evicted, 2u);
      EXPECT_EQ(c.cache->stats().bytes, budget);
    } else {
      EXPECT_FALSE(c.cache->Contains(3));
      EXPECT_EQ(c.cache->stats().bytes, 2 * kCharge);
    }
  }
}

TEST(CachedSourceTest, ErrorsPassThroughAndAreNotCached) {
  Cache c = MakeCache(std::vector<uint64_t>(3, kSize), 10 * kCharge, CachePolicy::kLru);
  c.inner->Fail(1);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::string> bytes = c.cache->Read(1);
    ASSERT_FALSE(bytes.ok());
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(bytes.status().message(), "sample 1 (c/1.bin): bad disk");
  }
  EXPECT_FALSE(c.cache->Contains(1));
  absl::StatusOr<std::string> outside = c.cache->Read(99);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_FALSE(c.cache->Contains(99));
  CacheStats s = c.cache->stats();
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.inserted, 0u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.bytes, 0);

  // Once the inner source reads it, it is cached.
  c.inner->Fail(-1);
  ASSERT_TRUE(c.cache->Read(1).ok());
  EXPECT_TRUE(c.cache->Contains(1));
  EXPECT_EQ(c.inner->reads(), 4);
  ASSERT_TRUE(c.cache->Read(1).ok());
  EXPECT_EQ(c.inner->reads(), 4);
}

TEST(CachedSourceTest, OtherMethodsForwardToTheInnerSource) {
  Cache c = MakeCache(std::vector<uint64_t>(3, kSize), 10 * kCharge, CachePolicy::kNoEvict);
  EXPECT_EQ(c.cache->name(), "fake");
  EXPECT_EQ(c.cache->fingerprint(), 4242u);
  EXPECT_EQ(&c.cache->manifest(), &c.inner->manifest());
  EXPECT_EQ(c.cache->size(), 3u);
  EXPECT_EQ(c.cache->class_names(), std::vector<std::string>({"c"}));
  EXPECT_EQ(c.cache->FilePaths(), std::vector<std::string>({"/data/a", "/data/b"}));
  EXPECT_EQ(c.cache->max_sample_bytes(), 12345u);
  EXPECT_EQ(c.cache->group_size(), 7u);
  EXPECT_EQ(&c.cache->inner(), c.inner);
  // A source without a cache reports no hit.
  SampleSource::ReadInfo info;
  info.cache_hit = true;
  ASSERT_TRUE(c.inner->ReadWithInfo(0, &info).ok());
  EXPECT_FALSE(info.cache_hit);
}

// Two readers missing the same sample at once both read it; it is inserted once.
TEST(CachedSourceTest, ConcurrentMissesOfOneSampleInsertItOnce) {
  constexpr int kThreads = 8;
  for (CachePolicy policy : {CachePolicy::kNoEvict, CachePolicy::kLru}) {
    SCOPED_TRACE(CachePolicyName(policy));
    Cache c = MakeCache(std::vector<uint64_t>(2, kSize), 3 * kCharge, policy);
    absl::Barrier barrier(kThreads);
    c.inner->HoldReadsAt(&barrier);  // every reader is inside the inner Read at once
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&c] {
        absl::StatusOr<std::string> bytes = c.cache->Read(1);
        EXPECT_TRUE(bytes.ok() && *bytes == FakeSource::Bytes(1, kSize));
      });
    }
    for (std::thread& t : threads) t.join();
    c.inner->HoldReadsAt(nullptr);
    const CacheStats s = c.cache->stats();
    EXPECT_EQ(s.misses, static_cast<uint64_t>(kThreads));
    EXPECT_EQ(s.inserted, 1u);
    EXPECT_EQ(s.entries, 1u);
    EXPECT_EQ(s.bytes, kCharge);
    SampleSource::ReadInfo info;
    ASSERT_TRUE(c.cache->ReadWithInfo(1, &info).ok());
    EXPECT_TRUE(info.cache_hit);
  }
}

// Readers on several threads: every answer is the inner source's, the bound
// holds after every read, and the counts add up.
TEST(CachedSourceTest, ConcurrentReadsKeepTheBoundAndTheBytes) {
  constexpr int kThreads = 8;
  constexpr int kReadsPerThread = 3000;
  constexpr uint64_t kSamples = 64;
  std::vector<uint64_t> sizes;
  for (uint64_t i = 0; i < kSamples; ++i) sizes.push_back(100 + (i * 37) % 900);
  for (CachePolicy policy : {CachePolicy::kNoEvict, CachePolicy::kLru}) {
    SCOPED_TRACE(CachePolicyName(policy));
    const int64_t budget = 20 * 600;
    Cache c = MakeCache(sizes, budget, policy);
    std::atomic<uint64_t> hits{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        for (int i = 0; i < kReadsPerThread; ++i) {
          const uint64_t id = rng() % kSamples;
          SampleSource::ReadInfo info;
          absl::StatusOr<std::string> bytes = c.cache->ReadWithInfo(id, &info);
          ASSERT_TRUE(bytes.ok()) << bytes.status();
          ASSERT_EQ(*bytes, FakeSource::Bytes(id, sizes[id])) << "sample " << id;
          if (info.cache_hit) hits.fetch_add(1);
          const CacheStats s = c.cache->stats();
          ASSERT_LE(s.bytes, budget);
          ASSERT_GE(s.bytes, 0);
        }
      });
    }
    for (std::thread& t : threads) t.join();
    const CacheStats s = c.cache->stats();
    EXPECT_EQ(s.hits + s.misses, uint64_t{kThreads} * kReadsPerThread);
    EXPECT_EQ(s.hits, hits.load());
    EXPECT_GT(s.hits, 0u);
    EXPECT_EQ(s.misses, static_cast<uint64_t>(c.inner->reads()));
    EXPECT_EQ(s.inserted - s.evicted, s.entries);
    if (policy == CachePolicy::kNoEvict) EXPECT_EQ(s.evicted, 0u);
    int64_t held = 0;
    uint64_t entries = 0;
    for (uint64_t id = 0; id < kSamples; ++id) {
      if (!c.cache->Contains(id)) continue;
      held += static_cast<int64_t>(sizes[id]) + kCacheEntryOverheadBytes;
      ++entries;
    }
    EXPECT_EQ(s.entries, entries);
    EXPECT_EQ(s.bytes, held);
    EXPECT_LE(held, budget);
  }
}

TEST(CachedSourceTest, OptionErrorsNameTheOption) {
  CacheOptions options;
  EXPECT_TRUE(options.Validate().ok());
  EXPECT_FALSE(options.enabled());
  options.bytes = -1;
  absl::Status s = options.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("CacheOptions.bytes"), absl::string_view::npos) << s;
  options.bytes = 1 << 20;
  options.policy = static_cast<CachePolicy>(7);
  s = options.Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("CacheOptions.policy"), absl::string_view::npos) << s;

  EXPECT_EQ(*ParseCachePolicy("noevict"), CachePolicy::kNoEvict);
  EXPECT_EQ(*ParseCachePolicy("lru"), CachePolicy::kLru);
  absl::StatusOr<CachePolicy> bad = ParseCachePolicy("fifo");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CacheOptions.policy"), absl::string_view::npos);
  EXPECT_NE(bad.status().message().find("'fifo'"), absl::string_view::npos);
  EXPECT_EQ(CachePolicyName(CachePolicy::kLru), "lru");
  EXPECT_EQ(CachePolicyName(CachePolicy::kNoEvict), "noevict");
}

}  // namespace
}  // namespace sophon
