#include "sophon/data/pack_writer.h"

#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sophon/data/image_folder.h"
#include "sophon/data/open_source.h"
#include "sophon/data/pack_source.h"
#include "sophon/data/tar.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

std::unique_ptr<ImageFolderSource> Folder(const std::string& name, int per_class = 5) {
  testing::TestDatasetOptions d;
  d.per_class = per_class;
  d.min_side = 40;
  d.max_side = 90;
  return *ImageFolderSource::Open(testing::MakeTestDataset(name, d));
}

// stdout of `command`; fails the test on a non-zero exit.
std::string RunShell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  EXPECT_EQ(pclose(pipe), 0) << command << "\n" << out;
  return out;
}

TEST(PackWriterTest, KeepsTheLastPartialGroupAndEverySampleOnce) {
  std::unique_ptr<ImageFolderSource> folder = Folder("pack_w_partial");  // 15 samples
  const std::string dir = testing::MakeTempDir("pack_w_partial_out");
  PackWriteOptions options;
  options.group_size = 4;
  absl::StatusOr<PackIndex> index = WritePack(*folder, dir, options);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->samples.size(), 15u);
  std::set<std::string> paths;
  for (const PackedSample& s : index->samples) paths.insert(s.path);
  EXPECT_EQ(paths.size(), 15u);
  // Shuffled: not in the folder's order (15! orders; the seed's is not 1).
  bool moved = false;
  for (uint64_t i = 0; i < 15; ++i) {
    moved |= index->samples[i].path != folder->manifest().relative_path(i);
  }
  EXPECT_TRUE(moved);
  absl::StatusOr<std::unique_ptr<SampleSource>> opened = OpenSampleSource(dir);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->size(), 15u);
  EXPECT_EQ((*opened)->group_size(), 4u);
  EXPECT_EQ(testing::ReadFile(dir + "/classes.txt"), "class_0\nclass_1\nclass_2\n");
}

TEST(PackWriterTest, GroupBytesDeriveTheGroupSizeAndShardsCloseAtGroups) {
  std::unique_ptr<ImageFolderSource> folder = Folder("pack_w_bytes");
  uint64_t total = 0;
  for (uint64_t i = 0; i < folder->size(); ++i) total += folder->manifest().raw_size(i);
  PackWriteOptions options;
  options.group_size = 0;
  options.group_bytes = static_cast<int64_t>(total * 3 / 15);  // about 3 samples
  options.shard_bytes = 1;
  absl::StatusOr<PackIndex> index =
      WritePack(*folder, testing::MakeTempDir("pack_w_bytes_out"), options);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->group_size, 3u);
  EXPECT_EQ(index->shards.size(), 5u);  // one group per shard
  for (uint64_t i = 0; i < 15; ++i) EXPECT_EQ(index->samples[i].shard, i / 3);
}

TEST(PackWriterTest, RefusesANonEmptyFolderAndBadOptions) {
  std::unique_ptr<ImageFolderSource> folder = Folder("pack_w_refuse", 1);
  const std::string dir = testing::MakeTempDir("pack_w_refuse_out");
  testing::WriteFile(dir + "/notes.txt", "mine");
  absl::Status s = WritePack(*folder, dir, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("notes.txt"), std::string::npos) << s;
  PackWriteOptions options;
  options.group_size = 0;
  EXPECT_NE(WritePack(*folder, dir, options).status().message().find("group_size"),
            std::string::npos);
}

// What Python's tarfile lists in the shards: name, size and the CRC-32 of the
// data, one line per member.
std::string PythonListing(const std::string& dir) {
  return RunShell("/usr/bin/python3 -c \"import tarfile,sys,glob,zlib\n"
             "for p in sorted(glob.glob(sys.argv[1] + '/*.tar')):\n"
             "  t = tarfile.open(p)\n"
             "  for m in t:\n"
             "    print(m.name, m.size, zlib.crc32(t.extractfile(m).read()))\" " +
             dir);
}

TEST(PackWriterTest, PythonsTarfileReadsThePackAsTheIndexDescribesIt) {
  std::unique_ptr<ImageFolderSource> folder = Folder("pack_w_python");
  const std::string dir = testing::MakeTempDir("pack_w_python_out");
  PackWriteOptions options;
  options.group_size = 4;
  options.shard_bytes = 20000;
  absl::StatusOr<PackIndex> index = WritePack(*folder, dir, options);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_GT(index->shards.size(), 1u);
  std::string expected;
  for (uint64_t i = 0; i < index->samples.size(); ++i) {
    const PackedSample& s = index->samples[i];
    char key[16];
    std::snprintf(key, sizeof(key), "%09llu", static_cast<unsigned long long>(i));
    const std::string cls = absl::StrCat(s.label);
    absl::StrAppend(&expected, key, ".jpg ", s.size, " ", s.crc32, "\n", key, ".cls ",
                    cls.size(), " ", Crc32(cls), "\n");
  }
  EXPECT_EQ(PythonListing(dir), expected);
}

// Shards written by Python's tarfile as the webdataset library writes them
// (pax headers for the fractional mtime, keys with a folder, other members).
TEST(PackWriterTest, IndexesShardsWrittenByPython) {
  const std::string dir = testing::MakeTempDir("pack_w_foreign");
  std::unique_ptr<ImageFolderSource> folder = Folder("pack_w_foreign_src", 2);  // 6 samples
  for (uint64_t i = 0; i < folder->size(); ++i) {
    testing::WriteFile(absl::StrCat(dir, "/img", i, ".bin"), *folder->Read(i));
  }
  RunShell("cd " + dir +
      " && /usr/bin/python3 -c \"import tarfile,io,time\n"
      "for s in range(2):\n"
      "  with tarfile.open('part-%d.tar' % s, 'w', format=tarfile.PAX_FORMAT) as t:\n"
      "    for i in range(3 * s, 3 * s + 3):\n"
      "      for ext, data in (('jpg', open('img%d.bin' % i, 'rb').read()),\n"
      "                        ('cls', str(i % 2).encode()), ('json', b'{}')):\n"
      "        m = tarfile.TarInfo('train/sample_%d.%s' % (i, ext))\n"
      "        m.size = len(data); m.mtime = time.time()\n"
      "        t.addfile(m, io.BytesIO(data))\"");
  absl::StatusOr<PackIndex> index = IndexShards(dir, 2);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->samples.size(), 6u);
  EXPECT_EQ(index->class_names, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(index->samples[4].path, "part-1.tar/train/sample_4.jpg");
  std::unique_ptr<PackSource> pack = *PackSource::Open(dir);
  for (uint64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(*pack->Read(i), *folder->Read(i)) << i;
    EXPECT_EQ(pack->manifest().label(i), i % 2);
  }
  absl::StatusOr<PackVerifyReport> report = VerifyPack(dir);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->samples, 6u);
  EXPECT_EQ(report->bad, 0u) << (report->errors.empty() ? "" : report->errors[0]);
}

TEST(PackWriterTest, IndexRefusesASampleWithoutALabelNamingTheShardAndKey) {
  const std::string dir = testing::MakeTempDir("pack_w_nolabel");
  RunShell("cd " + dir +
      " && /usr/bin/python3 -c \"import tarfile,io\n"
      "with tarfile.open('a.tar', 'w', format=tarfile.USTAR_FORMAT) as t:\n"
      "  m = tarfile.TarInfo('k1.jpg'); m.size = 3; t.addfile(m, io.BytesIO(b'abc'))\"");
  absl::Status s = IndexShards(dir, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("a.tar: sample 'k1' has no .cls member"), std::string::npos) << s;
}

TEST(PackWriterTest, VerifyCountsEveryBadSampleAndNamesIt) {
  std::unique_ptr<ImageFolderSource> folder = Folder("pack_w_verify");
  const std::string dir = testing::MakeTempDir("pack_w_verify_out");
  PackWriteOptions options;
  options.group_size = 4;
  absl::StatusOr<PackIndex> index = WritePack(*folder, dir, options);
  ASSERT_TRUE(index.ok());
  absl::StatusOr<PackVerifyReport> clean = VerifyPack(dir);
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_EQ(clean->bad, 0u);
  const std::string shard = dir + "/" + index->shards[0];
  std::string bytes = testing::ReadFile(shard);
  for (uint64_t id : {2, 9}) bytes[index->samples[id].offset + 5] ^= 0x11;
  bytes[index->samples[12].offset - kTarBlock + 130] ^= 0x01;  // a header's size field
  testing::WriteFile(shard, bytes);
  absl::StatusOr<PackVerifyReport> report = VerifyPack(dir);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->samples, 15u);
  ASSERT_EQ(report->bad, 3u);
  EXPECT_NE(report->errors[0].find("sample 2 ('" + index->samples[2].path), std::string::npos)
      << report->errors[0];
  EXPECT_NE(report->errors[1].find("sample 9 "), std::string::npos) << report->errors[1];
  EXPECT_NE(report->errors[2].find("sample 12 "), std::string::npos) << report->errors[2];
}

// `index` refuses what the server would refuse to read: a shard or
// classes.txt linked to a file outside the folder; verify too.
TEST(PackWriterTest, IndexAndVerifyRefuseAFileLinkedFromOutsideNamingIt) {
  std::unique_ptr<ImageFolderSource> folder = Folder("pack_w_link_src");
  const std::string dir = testing::MakeTempDir("pack_w_link");
  const std::string outside = testing::MakeTempDir("pack_w_link_outside");
  PackWriteOptions options;
  options.group_size = 4;
  options.shard_bytes = 1;
  absl::StatusOr<PackIndex> written = WritePack(*folder, dir, options);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(std::filesystem::remove(dir + "/" + kPackIndexName));
  const std::string shard = dir + "/" + written->shards[1];
  std::filesystem::rename(shard, outside + "/moved.tar");
  std::filesystem::create_symlink(outside + "/moved.tar", shard);
  absl::Status s = IndexShards(dir, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find(shard + ": resolves to"), std::string::npos) << s;
  EXPECT_NE(s.message().find("PackSourceOptions.follow_symlinks is inside"), std::string::npos)
      << s;
  EXPECT_FALSE(IsPackFolder(dir));
  absl::StatusOr<PackIndex> all = IndexShards(dir, 4, nullptr, FollowSymlinks::kAll);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->samples.size(), 15u);
  s = VerifyPack(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find(shard), std::string::npos) << s;
  absl::StatusOr<PackVerifyReport> report = VerifyPack(dir, nullptr, FollowSymlinks::kAll);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->bad, 0u);
  // The shard back in place, classes.txt linked from outside.
  std::filesystem::remove(shard);
  std::filesystem::rename(outside + "/moved.tar", shard);
  std::filesystem::rename(dir + "/classes.txt", outside + "/classes.txt");
  std::filesystem::create_symlink(outside + "/classes.txt", dir + "/classes.txt");
  s = IndexShards(dir, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find(dir + "/classes.txt: resolves to"), std::string::npos) << s;
}

}  // namespace
}  // namespace sophon
