// AtomicFileWriter: the destination holds its old content until Commit, the
// whole new content after, and no temporary file is ever left behind.
#include "sophon/base/atomic_file.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::WriteFile;

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AtomicFileWriterTest, OldContentUntilCommitThenAllOfTheNew) {
  const std::string dir = testing::MakeTempDir("atomic_file_commit");
  const std::string path = dir + "/state.bin";
  WriteFile(path, "old");
  auto writer = AtomicFileWriter::Open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append("new ", 4).ok());
  ASSERT_TRUE((*writer)->Append("content", 7).ok());
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_EQ(ReadFile((*writer)->temp_path()), "new content");
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(ReadFile(path), "new content");
  writer->reset();
  EXPECT_THAT(Entries(dir), ElementsAre("state.bin"));
}

TEST(AtomicFileWriterTest, AbandonedWriteLeavesNothing) {
  const std::string dir = testing::MakeTempDir("atomic_file_abandon");
  const std::string path = dir + "/state.bin";
  WriteFile(path, "old");
  {
    auto writer = AtomicFileWriter::Open(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Append("partial", 7).ok());
  }
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_THAT(Entries(dir), ElementsAre("state.bin"));
}

TEST(AtomicFileWriterTest, MissingFolderFailsNamingThePath) {
  const std::string dir = testing::MakeTempDir("atomic_file_missing");
  const std::string path = dir + "/no/such/folder/state.bin";
  auto writer = AtomicFileWriter::Open(path);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(writer.status().message(), HasSubstr(path));
  EXPECT_TRUE(Entries(dir).empty());
}

TEST(AtomicFileWriterTest, FailedRenameRemovesTheTemporaryFile) {
  // The destination is a non-empty folder: rename(2) refuses to replace it.
  const std::string dir = testing::MakeTempDir("atomic_file_rename");
  const std::string path = dir + "/state.bin";
  WriteFile(path + "/inside", "kept");
  auto writer = AtomicFileWriter::Open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append("new", 3).ok());
  const absl::Status commit = (*writer)->Commit();
  ASSERT_FALSE(commit.ok());
  EXPECT_THAT(commit.message(), HasSubstr("cannot rename"));
  EXPECT_THAT(commit.message(), HasSubstr(path));
  EXPECT_THAT(Entries(dir), ElementsAre("state.bin"));
  EXPECT_EQ(ReadFile(path + "/inside"), "kept");
  // The error sticks.
  EXPECT_EQ((*writer)->Append("x", 1), commit);
  EXPECT_EQ((*writer)->Commit(), commit);
}

}  // namespace
}  // namespace sophon
