#include "sophon/data/dataset.h"

#include <filesystem>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

TEST(DatasetTest, ManifestIsSortedWithLabelsFromDirectories) {
  const std::string root = testing::MakeTempDir("dataset_sorted");
  testing::WriteFile(root + "/zebra/b.jpg", "bb");
  testing::WriteFile(root + "/zebra/a.JPEG", "a");
  testing::WriteFile(root + "/ant/x.jpg", "xxx");
  testing::WriteFile(root + "/ant/notes.txt", "ignored");
  testing::WriteFile(root + "/ant/.hidden.jpg", "ignored");
  absl::StatusOr<std::unique_ptr<Dataset>> ds = Dataset::OpenImageFolder(root);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 3u);
  EXPECT_EQ((*ds)->class_names(), (std::vector<std::string>{"ant", "zebra"}));
  EXPECT_EQ((*ds)->entry(0).relative_path, "ant/x.jpg");
  EXPECT_EQ((*ds)->entry(0).label, 0u);
  EXPECT_EQ((*ds)->entry(1).relative_path, "zebra/a.JPEG");
  EXPECT_EQ((*ds)->entry(2).label, 1u);
  EXPECT_EQ((*ds)->entry(2).raw_size, 2u);
  absl::StatusOr<std::string> bytes = (*ds)->Read(2);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, "bb");
}

TEST(DatasetTest, FingerprintChangesWithTheFileList) {
  const std::string root = testing::MakeTempDir("dataset_fp");
  testing::WriteFile(root + "/c/a.jpg", "a");
  const uint64_t before = (*Dataset::OpenImageFolder(root))->fingerprint();
  EXPECT_EQ(before, (*Dataset::OpenImageFolder(root))->fingerprint());
  testing::WriteFile(root + "/c/b.jpg", "b");
  EXPECT_NE(before, (*Dataset::OpenImageFolder(root))->fingerprint());
}

TEST(DatasetTest, ErrorsNameTheProblem) {
  absl::StatusOr<std::unique_ptr<Dataset>> missing = Dataset::OpenImageFolder("/no/such/dir");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/no/such/dir"), std::string::npos);

  const std::string empty = testing::MakeTempDir("dataset_empty");
  EXPECT_EQ(Dataset::OpenImageFolder(empty).status().code(),
            absl::StatusCode::kFailedPrecondition);

  const std::string root = testing::MakeTempDir("dataset_oor");
  testing::WriteFile(root + "/c/a.jpg", "a");
  std::unique_ptr<Dataset> ds = *Dataset::OpenImageFolder(root);
  EXPECT_EQ(ds->Read(1).status().code(), absl::StatusCode::kOutOfRange);
  std::filesystem::remove(root + "/c/a.jpg");
  absl::Status gone = ds->Read(0).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(gone.message().find("c/a.jpg"), std::string::npos);
}

}  // namespace
}  // namespace sophon
