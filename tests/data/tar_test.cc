#include "sophon/data/tar.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

// Every member of an archive held in `bytes`, parsed header by header.
absl::StatusOr<std::vector<TarMember>> Members(const std::string& bytes) {
  std::vector<TarMember> out;
  uint64_t offset = 0;
  while (offset + kTarBlock <= bytes.size()) {
    absl::StatusOr<std::optional<TarMember>> m =
        ParseTarHeader(absl::string_view(bytes).substr(offset, kTarBlock), offset, bytes.size(),
                       "shard.tar");
    if (!m.ok()) return m.status();
    if (!m->has_value()) break;
    out.push_back(**m);
    offset = (*m)->next_offset();
  }
  return out;
}

std::string Archive() {
  std::string tar;
  EXPECT_TRUE(AppendTarMember("000001.jpg", std::string(700, 'j'), &tar).ok());
  EXPECT_TRUE(AppendTarMember("000001.cls", "3", &tar).ok());
  EXPECT_TRUE(AppendTarMember("dir/000002.jpg", std::string(512, 'k'), &tar).ok());
  // A long name: a prefix and a name split at a '/'.
  EXPECT_TRUE(AppendTarMember(std::string(120, 'p') + "/" + std::string(90, 'n') + ".cls", "",
                              &tar)
                  .ok());
  AppendTarEnd(&tar);
  return tar;
}

TEST(TarTest, MembersRoundTripWithTheirOffsets) {
  const std::string tar = Archive();
  EXPECT_EQ(tar.size(), TarMemberBytes(700) + TarMemberBytes(1) + TarMemberBytes(512) +
                            TarMemberBytes(0) + 2 * kTarBlock);
  absl::StatusOr<std::vector<TarMember>> members = Members(tar);
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 4u);
  EXPECT_EQ((*members)[0].name, "000001.jpg");
  EXPECT_EQ((*members)[0].size, 700u);
  EXPECT_EQ(tar.substr((*members)[0].data_offset, 700), std::string(700, 'j'));
  EXPECT_EQ((*members)[1].name, "000001.cls");
  EXPECT_EQ(tar.substr((*members)[1].data_offset, 1), "3");
  EXPECT_EQ((*members)[2].name, "dir/000002.jpg");
  EXPECT_EQ((*members)[3].name, std::string(120, 'p') + "/" + std::string(90, 'n') + ".cls");
  EXPECT_EQ((*members)[3].size, 0u);
}

TEST(TarTest, PythonsTarfileReadsWhatWeWrite) {
  const std::string dir = testing::MakeTempDir("tar_python");
  {
    std::ofstream out(dir + "/shard.tar", std::ios::binary);
    out << Archive();
  }
  const std::string command = "/usr/bin/python3 -c \"import tarfile,sys\n"
                              "for m in tarfile.open(sys.argv[1]):\n"
                              "  print(m.name, m.size, m.isreg(), m.mode)\" " +
                              dir + "/shard.tar";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string listing;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) listing += buffer;
  ASSERT_EQ(pclose(pipe), 0) << listing;
  EXPECT_EQ(listing, "000001.jpg 700 True 420\n000001.cls 1 True 420\n"
                     "dir/000002.jpg 512 True 420\n" +
                         std::string(120, 'p') + "/" + std::string(90, 'n') + ".cls 0 True 420\n");
}

TEST(TarTest, BadNamesAreRefusedWhenWriting) {
  std::string tar;
  for (const std::string& name :
       {std::string(""), std::string("/etc/passwd"), std::string("a/../b.jpg"),
        std::string("./a.jpg"), std::string("a//b"), std::string("a\nb"),
        std::string(101, 'x'), std::string(156, 'p') + "/x"}) {
    const absl::Status s = AppendTarMember(name, "data", &tar);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << absl::CEscape(name);
  }
  EXPECT_TRUE(tar.empty());
}

TEST(TarTest, HostileHeadersAreRefusedNamingTheFileAndOffset) {
  const std::string good = Archive();
  const auto first = [](const std::string& tar) {
    return ParseTarHeader(absl::string_view(tar).substr(0, kTarBlock), 0, tar.size(), "s.tar")
        .status();
  };
  ASSERT_TRUE(first(good).ok());
  // A flipped byte: the checksum no longer matches.
  std::string flipped = good;
  flipped[5] ^= 1;
  absl::Status s = first(flipped);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("s.tar: the tar header at offset 0 has a bad checksum"),
            std::string::npos)
      << s;
  // Re-checksummed headers that lie: a size past the end of the file, a
  // symlink, a name that climbs out, a size that is not octal.
  const auto rewrite = [&](size_t at, const std::string& bytes) {
    std::string tar = good;
    tar.replace(at, bytes.size(), bytes);
    uint64_t sum = 0;
    for (size_t i = 0; i < kTarBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(tar[i]);
    }
    char field[8];
    std::snprintf(field, sizeof(field), "%06o", static_cast<unsigned>(sum));
    tar.replace(148, 7, std::string(field, 7));
    return tar;
  };
  s = first(rewrite(124, "77777777777"));
  EXPECT_NE(s.message().find("past the end"), std::string::npos) << s;
  s = first(rewrite(156, "2"));
  EXPECT_NE(s.message().find("regular files only"), std::string::npos) << s;
  s = first(rewrite(0, "../x.jpg"));
  EXPECT_NE(s.message().find("'..'"), std::string::npos) << s;
  s = first(rewrite(124, "0000009x000"));
  EXPECT_NE(s.message().find("bad size field"), std::string::npos) << s;
  s = first(rewrite(257, "gnutar"));
  EXPECT_NE(s.message().find("not a ustar header"), std::string::npos) << s;
  // A truncated file: the first member's data is cut.
  s = ParseTarHeader(absl::string_view(good).substr(0, kTarBlock), 0, 600, "s.tar").status();
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;
  // A short block.
  s = ParseTarHeader(absl::string_view(good).substr(0, 100), 0, good.size(), "s.tar").status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

}  // namespace
}  // namespace sophon
