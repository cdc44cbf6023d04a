#include "sophon/data/page_cache.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/data/image_folder.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

// Files of incompressible bytes, 1 MiB each.
std::vector<std::string> WriteFiles(const std::string& dir, int count) {
  std::mt19937_64 rng(7);
  std::vector<std::string> paths;
  for (int i = 0; i < count; ++i) {
    std::string bytes(1 << 20, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    paths.push_back(dir + "/f" + std::to_string(i) + ".bin");
    testing::WriteFile(paths.back(), bytes);
  }
  return paths;
}

TEST(PageCacheTest, EvictThenWarmChangesResidency) {
  const std::string dir = testing::MakeTempDir("page_cache");
  const std::vector<std::string> paths = WriteFiles(dir, 4);
  absl::StatusOr<CacheResidency> evicted = EvictFromPageCache(paths);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(evicted->files, 4u);
  EXPECT_EQ(evicted->bytes, 4u << 20);
  EXPECT_EQ(evicted->pages, (4u << 20) / evicted->page_size);
  if (evicted->fraction() > 0.5) {
    GTEST_SKIP() << "this filesystem keeps evicted pages (tmpfs?): " << FormatResidency(*evicted);
  }
  EXPECT_LT(evicted->fraction(), 0.25) << FormatResidency(*evicted);

  absl::StatusOr<CacheResidency> warm = WarmPageCache(paths);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_GT(warm->fraction(), 0.9) << FormatResidency(*warm);
  EXPECT_EQ(warm->resident_bytes(), warm->resident_pages * warm->page_size);

  absl::StatusOr<CacheResidency> measured = MeasureResidency(paths);
  ASSERT_TRUE(measured.ok()) << measured.status();
  EXPECT_GT(measured->fraction(), 0.9);

  evicted = EvictFromPageCache(paths);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_LT(evicted->fraction(), 0.25) << FormatResidency(*evicted);
}

TEST(PageCacheTest, EmptyFilesAndMissingFiles) {
  const std::string dir = testing::MakeTempDir("page_cache_edge");
  testing::WriteFile(dir + "/empty.bin", "");
  absl::StatusOr<CacheResidency> r = MeasureResidency({dir + "/empty.bin"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files, 1u);
  EXPECT_EQ(r->pages, 0u);
  EXPECT_EQ(r->fraction(), 0.0);

  r = MeasureResidency({dir + "/missing.bin"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("missing.bin"));
  EXPECT_EQ(EvictFromPageCache({dir + "/missing.bin"}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(PageCacheTest, DatasetFilePathsAreTheManifestFiles) {
  testing::TestDatasetOptions options;
  options.classes = 2;
  options.per_class = 2;
  options.min_side = 32;
  options.max_side = 48;
  const std::string root = testing::MakeTestDataset("page_cache_dataset", options);
  absl::StatusOr<std::unique_ptr<ImageFolderSource>> ds = ImageFolderSource::Open(root);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const std::vector<std::string> paths = DatasetFilePaths(**ds);
  ASSERT_EQ(paths.size(), 4u);
  absl::StatusOr<CacheResidency> r = MeasureResidency(paths);
  ASSERT_TRUE(r.ok()) << r.status();
  uint64_t total = 0;
  for (uint64_t id = 0; id < (*ds)->size(); ++id) total += (*ds)->manifest().raw_size(id);
  EXPECT_EQ(r->bytes, total);
  EXPECT_EQ(r->files, 4u);
}

}  // namespace
}  // namespace sophon
