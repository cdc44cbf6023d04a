#include "sophon/data/manifest_table.h"

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

TEST(ManifestTableTest, HoldsEverySampleInOrder) {
  ManifestTable table;
  table.Add("a/x.jpg", 0, 10);
  table.Add("", 1, 0);  // an empty path is a path too
  table.Add("b/\\xff.jpg", 1, uint64_t{5} << 32);
  table.ShrinkToFit();
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table.relative_path(0), "a/x.jpg");
  EXPECT_EQ(table.relative_path(1), "");
  EXPECT_EQ(table.relative_path(2), "b/\\xff.jpg");
  EXPECT_EQ(table.label(2), 1u);
  EXPECT_EQ(table.raw_size(2), uint64_t{5} << 32);  // sizes are not cut to 32 bits
  const ManifestEntry e = table.entry(0);
  EXPECT_EQ(e.relative_path, "a/x.jpg");
  EXPECT_EQ(e.label, 0u);
  EXPECT_EQ(e.raw_size, 10u);
}

// The point of the table: no string object per sample. 1000 samples of
// 20-byte paths take the paths' bytes and 24 bytes of fixed fields each
// (path end, label, size, version), made at their size (Reserve) or shrunk to
// it.
TEST(ManifestTableTest, HoldsAboutTwentyFourBytesPerSampleBesidesThePaths) {
  ManifestTable table;
  table.Reserve(1000, 1000 * 20);
  for (int i = 0; i < 1000; ++i) {
    char path[32];
    std::snprintf(path, sizeof(path), "class_%03d/%06d.jpg", i % 7, i);
    table.Add(path, static_cast<uint32_t>(i % 7), 1000 + i);
  }
  EXPECT_EQ(table.memory_bytes(), 1000u * (20 + 8 + 4 + 8 + 4));
  table.ShrinkToFit();
  EXPECT_EQ(table.memory_bytes(), 1000u * (20 + 8 + 4 + 8 + 4));
  // Grown without a reservation, the table gives back what it does not need.
  ManifestTable grown;
  for (int i = 0; i < 400; ++i) grown.Add("0123456789012345678.jpg", 0, 1);
  EXPECT_GT(grown.memory_bytes(), 400u * (23 + 24) * 5 / 4);
  grown.ShrinkToFit();
  EXPECT_EQ(grown.memory_bytes(), 400u * (23 + 24));
}

// The fingerprint is keyed into saved profiles: FNV-1a over (path, uint64
// size, uint32 label) per sample, whichever way it is computed.
TEST(ManifestTableTest, HasherMatchesTheFingerprintOfEntries) {
  const std::vector<ManifestEntry> entries = {{"a/x.jpg", 0, 3}, {"b/y.jpeg", 1, 2}};
  ManifestHasher hasher;
  for (const ManifestEntry& e : entries) hasher.Add(e.relative_path, e.raw_size, e.label);
  EXPECT_EQ(hasher.value(), ManifestFingerprint(entries));
  EXPECT_EQ(hasher.value(), 0x1fbda725d1e9f9bcULL);  // as ImageFolderSourceTest's golden value
  EXPECT_NE(ManifestFingerprint({entries[1], entries[0]}), hasher.value());
}

}  // namespace
}  // namespace sophon
