#include "client/loader/disk_sample_cache.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using testing::SampleFileBytes;

DiskSampleCacheOptions Options(const std::string& dir, int64_t entries, uint64_t fingerprint = 42) {
  DiskSampleCacheOptions options;
  options.dir = dir;
  options.max_bytes = entries * (1000 + DiskSampleCache::kHeaderBytes);
  options.fingerprint = fingerprint;
  options.num_samples = 100;
  return options;
}

std::unique_ptr<DiskSampleCache> Open(const DiskSampleCacheOptions& options) {
  absl::StatusOr<std::unique_ptr<DiskSampleCache>> cache = DiskSampleCache::Open(options);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

TEST(DiskSampleCacheTest, EntriesOutliveTheProcessThatWroteThem) {
  const std::string dir = testing::MakeTempDir("disk_cache_restart");
  {
    std::unique_ptr<DiskSampleCache> cache = Open(Options(dir, 10));
    ASSERT_TRUE(cache);
    std::string out;
    EXPECT_FALSE(cache->Get(3, &out));
    EXPECT_TRUE(cache->Put(3, SampleFileBytes(3)));
    EXPECT_TRUE(cache->Put(7, SampleFileBytes(7)));
    EXPECT_TRUE(cache->Get(3, &out));
    EXPECT_EQ(out, SampleFileBytes(3));
  }
  // A later job over the same dataset: warm from the start.
  std::unique_ptr<DiskSampleCache> again = Open(Options(dir, 10));
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->Contains(3));
  EXPECT_TRUE(again->Contains(7));
  EXPECT_FALSE(again->Contains(4));
  std::string out;
  EXPECT_TRUE(again->Get(7, &out));
  EXPECT_EQ(out, SampleFileBytes(7));
  EXPECT_EQ(again->stats().usage_bytes, 2 * (1000 + DiskSampleCache::kHeaderBytes));
}

// Two processes of a node (ranks) add to one folder: each reports the folder's usage,
// whichever wrote last.
TEST(DiskSampleCacheTest, EveryProcessOfTheNodeReportsTheFoldersUsage) {
  const std::string dir = testing::MakeTempDir("disk_cache_shared_usage");
  std::unique_ptr<DiskSampleCache> rank0 = Open(Options(dir, 10));
  std::unique_ptr<DiskSampleCache> rank1 = Open(Options(dir, 10));
  ASSERT_TRUE(rank0 && rank1);
  ASSERT_TRUE(rank1->Put(1, SampleFileBytes(1)));
  ASSERT_TRUE(rank0->Put(2, SampleFileBytes(2)));
  const int64_t two = 2 * (1000 + DiskSampleCache::kHeaderBytes);
  EXPECT_EQ(rank1->stats().usage_bytes, two) << "rank 0's entry, written after rank 1's";
  EXPECT_EQ(rank0->stats().usage_bytes, two);
}

TEST(DiskSampleCacheTest, AnotherDatasetNeverReadsTheseEntries) {
  const std::string dir = testing::MakeTempDir("disk_cache_fingerprint");
  std::unique_ptr<DiskSampleCache> first = Open(Options(dir, 10, /*fingerprint=*/1));
  ASSERT_TRUE(first && first->Put(5, SampleFileBytes(5)));
  std::unique_ptr<DiskSampleCache> other = Open(Options(dir, 10, /*fingerprint=*/2));
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->Contains(5));
  std::string out;
  EXPECT_FALSE(other->Get(5, &out));
  EXPECT_NE(first->folder(), other->folder());
  // An entry copied into the other dataset's folder is refused by its header.
  std::filesystem::copy_file(first->EntryPath(5), other->EntryPath(5));
  EXPECT_FALSE(other->Get(5, &out));
  EXPECT_EQ(other->stats().corrupt, 1u);
  EXPECT_FALSE(std::filesystem::exists(other->EntryPath(5)));
}

TEST(DiskSampleCacheTest, ADamagedEntryIsRemovedAndMissed) {
  const std::string dir = testing::MakeTempDir("disk_cache_corrupt");
  std::unique_ptr<DiskSampleCache> cache = Open(Options(dir, 10));
  ASSERT_TRUE(cache && cache->Put(9, SampleFileBytes(9)) && cache->Put(10, SampleFileBytes(10)));
  {
    std::fstream f(cache->EntryPath(9), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(DiskSampleCache::kHeaderBytes + 17);
    f.put('\x5a');
  }
  std::filesystem::resize_file(cache->EntryPath(10), 500);  // a crash left it short
  std::string out;
  EXPECT_FALSE(cache->Get(9, &out));
  EXPECT_FALSE(cache->Get(10, &out));
  EXPECT_EQ(cache->stats().corrupt, 2u);
  EXPECT_FALSE(cache->Contains(9));
  EXPECT_FALSE(std::filesystem::exists(cache->EntryPath(9)));
  // Fetched again and written again.
  EXPECT_TRUE(cache->Put(9, SampleFileBytes(9)));
  EXPECT_TRUE(cache->Get(9, &out));
  EXPECT_EQ(out, SampleFileBytes(9));
}

TEST(DiskSampleCacheTest, TheBoundHoldsAcrossProcessesSharingTheFolder) {
  const std::string dir = testing::MakeTempDir("disk_cache_bound");
  // Two openers of one folder (two ranks of a node): room for 3 entries.
  std::unique_ptr<DiskSampleCache> a = Open(Options(dir, 3));
  std::unique_ptr<DiskSampleCache> b = Open(Options(dir, 3));
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->Put(1, SampleFileBytes(1)));
  EXPECT_TRUE(b->Put(2, SampleFileBytes(2)));
  EXPECT_TRUE(b->Put(1, SampleFileBytes(1))) << "written by the other: there already";
  EXPECT_TRUE(a->Put(3, SampleFileBytes(3)));
  EXPECT_FALSE(b->Put(4, SampleFileBytes(4)));
  EXPECT_EQ(b->stats().rejected, 1u);
  std::string out;
  EXPECT_TRUE(b->Get(3, &out)) << "an entry the other wrote";
  EXPECT_EQ(out, SampleFileBytes(3));
  int64_t on_disk = 0;
  for (uint64_t id : {1, 2, 3, 4}) {
    if (std::filesystem::exists(a->EntryPath(id))) {
      on_disk += static_cast<int64_t>(std::filesystem::file_size(a->EntryPath(id)));
    }
  }
  EXPECT_EQ(on_disk, 3 * (1000 + DiskSampleCache::kHeaderBytes));
}

TEST(DiskSampleCacheTest, OptionsAreCheckedByName) {
  DiskSampleCacheOptions options;
  options.max_bytes = 1;
  EXPECT_NE(options.Validate().message().find("DiskSampleCacheOptions.dir"), std::string::npos);
  options.dir = "/tmp";
  options.max_bytes = 0;
  EXPECT_NE(options.Validate().message().find("max_bytes"), std::string::npos);
  options.dir = "/proc/no-such-folder";
  options.max_bytes = 1000;
  absl::StatusOr<std::unique_ptr<DiskSampleCache>> bad = DiskSampleCache::Open(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/proc/no-such-folder"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace sophon
