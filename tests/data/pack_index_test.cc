#include "sophon/data/pack_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "sophon/base/process_status.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

PackIndex Example() {
  PackIndex index;
  index.shards = {"shard-000000.tar", "shard-000001.tar"};
  index.class_names = {"cat", "dog"};
  index.group_size = 2;
  index.source_fingerprint = 0x1234567890abcdefULL;
  index.samples = {{0, 512, 100, 1, 0xaaaa, "dog/a.jpg"},
                   {0, 2048, 50, 0, 0xbbbb, "cat/b.jpg"},
                   {1, 512, 70, 1, 0xcccc, "dog/c.jpg"}};
  return index;
}

TEST(PackIndexTest, RoundTrip) {
  const PackIndex index = Example();
  absl::StatusOr<PackIndex> back = DecodePackIndex(EncodePackIndex(index), "x.idx");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->shards, index.shards);
  EXPECT_EQ(back->class_names, index.class_names);
  EXPECT_EQ(back->group_size, 2u);
  EXPECT_EQ(back->source_fingerprint, index.source_fingerprint);
  ASSERT_EQ(back->samples.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->samples[i].shard, index.samples[i].shard);
    EXPECT_EQ(back->samples[i].offset, index.samples[i].offset);
    EXPECT_EQ(back->samples[i].size, index.samples[i].size);
    EXPECT_EQ(back->samples[i].label, index.samples[i].label);
    EXPECT_EQ(back->samples[i].crc32, index.samples[i].crc32);
    EXPECT_EQ(back->samples[i].path, index.samples[i].path);
  }
}

TEST(PackIndexTest, WrittenAndReadFromAFolder) {
  const std::string dir = testing::MakeTempDir("pack_index_rw");
  EXPECT_FALSE(IsPackFolder(dir));
  ASSERT_TRUE(WritePackIndex(dir, Example()).ok());
  EXPECT_TRUE(IsPackFolder(dir));
  absl::StatusOr<PackIndex> back = ReadPackIndex(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->samples.size(), 3u);
  EXPECT_EQ(ReadPackIndex(testing::MakeTempDir("pack_index_none")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(PackIndexTest, Crc32IsZlibs) {
  EXPECT_EQ(Crc32("123456789"), 0xcbf43926u);  // the CRC-32 check value
  EXPECT_EQ(Crc32(""), 0u);
}

TEST(PackIndexTest, EveryFlippedByteAndEveryTruncationIsRefused) {
  const std::string bytes = EncodePackIndex(Example());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    absl::Status s = DecodePackIndex(bad, "x.idx").status();
    EXPECT_FALSE(s.ok()) << "byte " << i;
    EXPECT_NE(s.message().find("x.idx"), std::string::npos) << s;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodePackIndex(bytes.substr(0, n), "x.idx").ok()) << n;
  }
}

// A hostile index with a valid checksum: each field out of range is named.
TEST(PackIndexTest, FieldsOutOfRangeAreRefusedByName) {
  const auto refused = [](PackIndex index, const std::string& words) {
    absl::Status s = DecodePackIndex(EncodePackIndex(index), "x.idx").status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s;
  };
  PackIndex index = Example();
  index.samples[1].label = 2;
  refused(index, "has label 2 of 2 classes");
  index = Example();
  index.samples[2].shard = 7;
  refused(index, "names shard 7 of 2");
  index = Example();
  index.shards[1] = "../etc/passwd";
  refused(index, "not a plain file name");
  index = Example();
  index.samples[1].offset = 560;  // overlaps sample 0's [512, 612)
  refused(index, "sample 1 ('cat/b.jpg') is out of order");
  index = Example();
  index.samples[0].offset = UINT64_MAX - 10;
  refused(index, "overflow");
  index = Example();
  index.group_size = 0;
  refused(index, "group size 0");
}

TEST(PackIndexTest, AHugeCountAllocatesNothing) {
  PackIndex index = Example();
  std::string bytes = EncodePackIndex(index);
  // The sample count sits after magic (8), version (4), fingerprint (8),
  // group size, shards and classes (4 each).
  const size_t at = 8 + 4 + 8 + 4 + 4 + 4;
  for (int i = 0; i < 8; ++i) bytes[at + i] = static_cast<char>(0xff);
  bytes.resize(bytes.size() - 4);
  const uint32_t crc = Crc32(bytes);
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  absl::Status s = DecodePackIndex(bytes, "x.idx").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("do not fit"), std::string::npos) << s;
}

// The index's 8-byte sample count, after magic (8), version (4),
// fingerprint (8), group size, shards and classes (4 each).
constexpr size_t kSampleCountAt = 8 + 4 + 8 + 4 + 4 + 4;

void SetSampleCount(uint64_t n, std::string* bytes) {
  for (int i = 0; i < 8; ++i) {
    (*bytes)[kSampleCountAt + i] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
}

// Resets this process's peak resident memory (VmHWM) to what it holds now.
void ResetPeakRss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.close();
  ASSERT_TRUE(clear.good()) << "cannot reset VmHWM through /proc/self/clear_refs";
}

uint64_t PeakRss() {
  absl::StatusOr<ProcessStatus> status = ReadProcessStatus();
  EXPECT_TRUE(status.ok()) << status.status();
  return status.ok() ? status->peak_rss_bytes : 0;
}

// dir/sophon-pack.idx holding `bytes`, then extended (sparse: no disk) to
// `size` bytes.
std::string SparseIndex(const std::string& name, const std::string& bytes, int64_t size) {
  const std::string dir = testing::MakeTempDir(name);
  const std::string path = dir + "/" + kPackIndexName;
  testing::WriteFile(path, bytes);
  EXPECT_EQ(::truncate(path.c_str(), size), 0);
  return dir;
}

bool Contains(const absl::Status& s, const std::string& words) {
  return s.message().find(words) != absl::string_view::npos;
}

// A valid index followed by 2 GiB of zeros: its header's counts allow a few
// kilobytes, so nothing past the header is read.
TEST(PackIndexTest, AnIndexLargerThanItsHeaderAllowsIsRefusedWithoutBeingRead) {
  const std::string dir =
      SparseIndex("pack_index_huge", EncodePackIndex(Example()), int64_t{2} << 30);
  ResetPeakRss();
  const uint64_t before = ResidentBytes();
  const absl::Status s = ReadPackIndex(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(Contains(s, dir + "/sophon-pack.idx")) << s;
  EXPECT_TRUE(Contains(s, "2147483648 bytes, more than the")) << s;
  EXPECT_LT(PeakRss(), before + (uint64_t{64} << 20));
}

// A header that declares 4M samples (128 MiB at least) over a 256 MiB file
// of zeros: the size fits, the checksum does not, and it is found reading
// bounded chunks, not the whole file.
TEST(PackIndexTest, AChecksumIsCheckedInBoundedChunksBeforeTheIndexIsHeld) {
  std::string bytes = EncodePackIndex(Example());
  SetSampleCount(uint64_t{1} << 22, &bytes);
  const std::string dir = SparseIndex("pack_index_crc", bytes, int64_t{256} << 20);
  ResetPeakRss();
  const uint64_t before = ResidentBytes();
  const absl::Status s = ReadPackIndex(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(Contains(s, dir + "/sophon-pack.idx fails its checksum")) << s;
  EXPECT_LT(PeakRss(), before + (uint64_t{64} << 20));
}

TEST(PackIndexTest, AnIndexOverTheCapOrShorterThanItsCountsIsRefusedNamingIt) {
  std::string bytes = EncodePackIndex(Example());
  const std::string dir = SparseIndex("pack_index_cap", bytes, static_cast<int64_t>(bytes.size()));
  absl::Status s = ReadPackIndex(dir, FollowSymlinks::kInside, 100).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(Contains(s, dir + "/sophon-pack.idx")) << s;
  EXPECT_TRUE(Contains(s, "PackSourceOptions.max_index_bytes (100)")) << s;
  SetSampleCount(1000, &bytes);
  s = ReadPackIndex(SparseIndex("pack_index_short", bytes, static_cast<int64_t>(bytes.size())))
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(Contains(s, "is truncated: its header declares 2 shards, 2 classes and 1000 "
                          "samples"))
      << s;
}

// The index of a pack folder is read under the image folders' link policy.
TEST(PackIndexTest, AnIndexLinkedFromOutsideTheFolderIsRefusedUnlessAllLinksAreFollowed) {
  const std::string outside = testing::MakeTempDir("pack_index_link_outside");
  ASSERT_TRUE(WritePackIndex(outside, Example()).ok());
  const std::string dir = testing::MakeTempDir("pack_index_link");
  std::filesystem::create_symlink(outside + "/" + kPackIndexName, dir + "/" + kPackIndexName);
  const absl::Status s = ReadPackIndex(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(Contains(s, dir + "/sophon-pack.idx")) << s;
  EXPECT_TRUE(Contains(s, "outside the pack folder (PackSourceOptions.follow_symlinks is inside)"))
      << s;
  EXPECT_TRUE(ReadPackIndex(dir, FollowSymlinks::kAll).ok());
  // A link to a file inside the folder is followed.
  const std::string inside = testing::MakeTempDir("pack_index_link_inside");
  std::filesystem::create_directories(inside + "/sub");
  ASSERT_TRUE(WritePackIndex(inside + "/sub", Example()).ok());
  std::filesystem::create_symlink("sub/sophon-pack.idx", inside + "/" + kPackIndexName);
  absl::StatusOr<PackIndex> back = ReadPackIndex(inside);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->samples.size(), 3u);
}

}  // namespace
}  // namespace sophon
