#include "sophon/data/pack_index.h"

#include <string>

#include "gtest/gtest.h"
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

}  // namespace
}  // namespace sophon
