#include "sophon/data/pack_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sophon/data/image_folder.h"
#include "sophon/data/open_source.h"
#include "sophon/data/pack_writer.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

struct Packed {
  std::unique_ptr<ImageFolderSource> folder;
  std::string dir;
  PackIndex index;
};

// 3 classes x 5 images packed in groups of `group_size`, shuffled.
Packed MakePack(const std::string& name, uint32_t group_size, int64_t shard_bytes = 1 << 30) {
  testing::TestDatasetOptions d;
  d.per_class = 5;
  d.min_side = 40;
  d.max_side = 90;
  Packed p;
  p.folder = *ImageFolderSource::Open(testing::MakeTestDataset(name, d));
  p.dir = testing::MakeTempDir(name + "_pack");
  PackWriteOptions options;
  options.group_size = group_size;
  options.shard_bytes = shard_bytes;
  absl::StatusOr<PackIndex> index = WritePack(*p.folder, p.dir, options);
  EXPECT_TRUE(index.ok()) << index.status();
  p.index = *index;
  return p;
}

// The folder's id of pack sample `id` (the pack keeps the relative paths).
uint64_t FolderId(const Packed& p, uint64_t id) {
  for (uint64_t f = 0; f < p.folder->size(); ++f) {
    if (p.folder->manifest().relative_path(f) == p.index.samples[id].path) return f;
  }
  ADD_FAILURE() << "no folder sample " << p.index.samples[id].path;
  return 0;
}

TEST(PackSourceTest, ServesEverySampleByteExactWithOneReadPerGroup) {
  Packed p = MakePack("pack_src_exact", 4);
  absl::StatusOr<std::unique_ptr<PackSource>> pack = PackSource::Open(p.dir);
  ASSERT_TRUE(pack.ok()) << pack.status();
  ASSERT_EQ((*pack)->size(), 15u);
  EXPECT_EQ((*pack)->group_size(), 4u);
  EXPECT_EQ((*pack)->class_names(), p.folder->class_names());
  EXPECT_EQ((*pack)->source_fingerprint(), p.folder->fingerprint());
  for (uint64_t id = 0; id < 15; ++id) {
    const uint64_t f = FolderId(p, id);
    absl::StatusOr<std::string> bytes = (*pack)->Read(id);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, *p.folder->Read(f)) << id;
    EXPECT_EQ((*pack)->manifest().label(id), p.folder->manifest().label(f));
  }
  // 15 samples in groups of 4: 4 group reads, 11 samples served from them.
  const PackReadStats stats = (*pack)->read_stats();
  EXPECT_EQ(stats.group_reads, 4u);
  EXPECT_EQ(stats.shared, 11u);
  EXPECT_EQ(stats.sample_reads, 0u);
  EXPECT_EQ(stats.evicted, 0u);
  EXPECT_EQ((*pack)->Read(15).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(PackSourceTest, ConcurrentReadersOfAGroupShareOneRead) {
  Packed p = MakePack("pack_src_share", 15);
  std::unique_ptr<PackSource> pack = *PackSource::Open(p.dir);
  std::vector<std::thread> threads;
  std::vector<std::string> got(15);
  for (int t = 0; t < 15; ++t) {
    threads.emplace_back([&, t] { got[t] = *pack->Read(t); });
  }
  for (std::thread& t : threads) t.join();
  for (uint64_t id = 0; id < 15; ++id) EXPECT_EQ(got[id], *p.folder->Read(FolderId(p, id)));
  EXPECT_EQ(pack->read_stats().group_reads, 1u);
  EXPECT_EQ(pack->read_stats().shared, 14u);
}

TEST(PackSourceTest, BufferMemoryIsBoundedAndEvictsOldestGroups) {
  Packed p = MakePack("pack_src_bound", 5);
  PackSourceOptions options;
  // Room for one group's bytes only.
  uint64_t largest = 0;
  for (uint64_t g = 0; g < 3; ++g) {
    const PackedSample& a = p.index.samples[g * 5];
    const PackedSample& b = p.index.samples[g * 5 + 4];
    largest = std::max(largest, b.offset + b.size - a.offset);
  }
  options.group_buffer_bytes = static_cast<int64_t>(largest);
  std::unique_ptr<PackSource> pack = *PackSource::Open(p.dir, options);
  // The first sample of each group, then the rest: each group is read twice.
  for (uint64_t id : {0, 5, 10, 1, 6, 11}) ASSERT_TRUE(pack->Read(id).ok());
  EXPECT_EQ(pack->read_stats().group_reads, 6u);
  EXPECT_EQ(pack->read_stats().evicted, 5u);
  // A budget smaller than any group: every sample is read alone.
  options.group_buffer_bytes = 16;
  std::unique_ptr<PackSource> tiny = *PackSource::Open(p.dir, options);
  for (uint64_t id = 0; id < 15; ++id) ASSERT_TRUE(tiny->Read(id).ok());
  EXPECT_EQ(tiny->read_stats().sample_reads, 15u);
  EXPECT_EQ(tiny->read_stats().group_reads, 0u);
}

void FlipByteAt(const std::string& path, uint64_t offset) {
  std::string bytes = testing::ReadFile(path);
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x5a);
  testing::WriteFile(path, bytes);
}

TEST(PackSourceTest, ACorruptSampleFailsAloneNamingItsShardAndOffset) {
  Packed p = MakePack("pack_src_corrupt", 4);
  const PackedSample& victim = p.index.samples[6];
  FlipByteAt(p.dir + "/" + p.index.shards[victim.shard], victim.offset + victim.size / 2);
  std::unique_ptr<PackSource> pack = *PackSource::Open(p.dir);
  for (uint64_t id = 0; id < 15; ++id) {
    absl::StatusOr<std::string> bytes = pack->Read(id);
    if (id == 6) {
      EXPECT_EQ(bytes.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_NE(bytes.status().message().find("sample 6 ('" + victim.path + "', "),
                std::string::npos)
          << bytes.status();
      EXPECT_NE(bytes.status().message().find("at offset " + std::to_string(victim.offset)),
                std::string::npos)
          << bytes.status();
      EXPECT_NE(bytes.status().message().find("checksum mismatch"), std::string::npos);
    } else {
      EXPECT_TRUE(bytes.ok()) << id << ": " << bytes.status();
    }
  }
}

TEST(PackSourceTest, ATruncatedShardIsRefusedAtOpenNamingTheSample) {
  Packed p = MakePack("pack_src_trunc", 4, /*shard_bytes=*/1);  // one group per shard
  ASSERT_EQ(p.index.shards.size(), 4u);
  const std::string shard = p.dir + "/" + p.index.shards[2];
  ASSERT_EQ(::truncate(shard.c_str(), 1000), 0);
  absl::Status s = PackSource::Open(p.dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sample 8 ('" + p.index.samples[8].path + "')"), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("truncated shard"), std::string::npos) << s;
  // A missing shard is NotFound naming it.
  ASSERT_EQ(::unlink(shard.c_str()), 0);
  s = PackSource::Open(p.dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find(p.index.shards[2]), std::string::npos) << s;
}

TEST(PackSourceTest, ASampleOverTheSizeCapIsRefusedAtOpen) {
  Packed p = MakePack("pack_src_cap", 4);
  PackSourceOptions options;
  options.max_sample_bytes = 100;
  absl::Status s = PackSource::Open(p.dir, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("PackSourceOptions.max_sample_bytes"), std::string::npos) << s;
  options.max_sample_bytes = 0;
  EXPECT_NE(PackSource::Open(p.dir, options).status().message().find("max_sample_bytes"),
            std::string::npos);
}

TEST(PackSourceTest, ACorruptIndexIsRefusedNamingTheFile) {
  Packed p = MakePack("pack_src_badidx", 4);
  FlipByteAt(p.dir + "/" + kPackIndexName, 40);
  absl::Status s = PackSource::Open(p.dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(kPackIndexName), std::string::npos) << s;
}

bool Contains(const absl::Status& s, const std::string& words) {
  return s.message().find(words) != absl::string_view::npos;
}

// Moves pack shard `k` to `outside` and leaves a link to it in its place.
std::string LinkShardFrom(const Packed& p, uint32_t k, const std::string& outside) {
  const std::string shard = p.dir + "/" + p.index.shards[k];
  const std::string moved = outside + "/" + p.index.shards[k];
  std::filesystem::rename(shard, moved);
  std::filesystem::create_symlink(moved, shard);
  return shard;
}

// A shard linked to a file outside the pack folder (as to /etc/passwd) is
// refused by the image folders' policy; only kAll follows it.
TEST(PackSourceTest, AShardLinkedFromOutsideThePackIsRefusedUnlessAllLinksAreFollowed) {
  Packed p = MakePack("pack_src_link", 4, /*shard_bytes=*/1);  // one group per shard
  ASSERT_EQ(p.index.shards.size(), 4u);
  const std::string shard = LinkShardFrom(p, 1, testing::MakeTempDir("pack_src_link_outside"));
  absl::Status s = PackSource::Open(p.dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(Contains(s, "shard " + shard + ": resolves to")) << s;
  EXPECT_TRUE(Contains(s, "outside the pack folder (PackSourceOptions.follow_symlinks is inside)"))
      << s;
  // As the server opens it: the image folders' option is the pack's.
  s = OpenSampleSource(p.dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  ImageFolderOptions all;
  all.follow_symlinks = FollowSymlinks::kAll;
  absl::StatusOr<std::unique_ptr<SampleSource>> opened = OpenSampleSource(p.dir, all);
  ASSERT_TRUE(opened.ok()) << opened.status();
  for (uint64_t id = 4; id < 8; ++id) {
    EXPECT_EQ(*(*opened)->Read(id), *p.folder->Read(FolderId(p, id))) << id;
  }
}

TEST(PackSourceTest, AShardLinkedInsideThePackIsServed) {
  Packed p = MakePack("pack_src_link_in", 4, /*shard_bytes=*/1);
  std::filesystem::create_directories(p.dir + "/store");
  LinkShardFrom(p, 2, p.dir + "/store");
  absl::StatusOr<std::unique_ptr<PackSource>> pack = PackSource::Open(p.dir);
  ASSERT_TRUE(pack.ok()) << pack.status();
  for (uint64_t id = 0; id < 15; ++id) {
    EXPECT_EQ(*(*pack)->Read(id), *p.folder->Read(FolderId(p, id))) << id;
  }
}

// The shards are held open from Open on: a shard swapped for a link to a
// file outside the folder afterwards is never read.
TEST(PackSourceTest, AShardSwappedForALinkAfterOpenIsNeverRead) {
  Packed p = MakePack("pack_src_swap", 4);
  std::unique_ptr<PackSource> pack = *PackSource::Open(p.dir);
  const std::string outside = testing::MakeTempDir("pack_src_swap_outside");
  const std::string shard = p.dir + "/" + p.index.shards[0];
  testing::WriteFile(outside + "/secret", std::string(testing::ReadFile(shard).size(), 's'));
  std::filesystem::remove(shard);
  std::filesystem::create_symlink(outside + "/secret", shard);
  for (uint64_t id = 0; id < 15; ++id) {
    EXPECT_EQ(*pack->Read(id), *p.folder->Read(FolderId(p, id))) << id;
  }
  EXPECT_EQ(PackSource::Open(p.dir).status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace sophon
