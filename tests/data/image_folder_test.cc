#include "sophon/data/image_folder.h"

#include <filesystem>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace sophon {
namespace {

TEST(ImageFolderSourceTest, ManifestIsSortedWithLabelsFromDirectories) {
  const std::string root = testing::MakeTempDir("dataset_sorted");
  testing::WriteFile(root + "/zebra/b.jpg", "bb");
  testing::WriteFile(root + "/zebra/a.JPEG", "a");
  testing::WriteFile(root + "/ant/x.jpg", "xxx");
  testing::WriteFile(root + "/ant/notes.txt", "ignored");
  testing::WriteFile(root + "/ant/.hidden.jpg", "ignored");
  absl::StatusOr<std::unique_ptr<ImageFolderSource>> ds = ImageFolderSource::Open(root);
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

TEST(ImageFolderSourceTest, FingerprintChangesWithTheFileList) {
  const std::string root = testing::MakeTempDir("dataset_fp");
  testing::WriteFile(root + "/c/a.jpg", "a");
  const uint64_t before = (*ImageFolderSource::Open(root))->fingerprint();
  EXPECT_EQ(before, (*ImageFolderSource::Open(root))->fingerprint());
  testing::WriteFile(root + "/c/b.jpg", "b");
  EXPECT_NE(before, (*ImageFolderSource::Open(root))->fingerprint());
}

TEST(ImageFolderSourceTest, ErrorsNameTheProblem) {
  absl::StatusOr<std::unique_ptr<ImageFolderSource>> missing = ImageFolderSource::Open("/no/such/dir");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/no/such/dir"), std::string::npos);

  const std::string empty = testing::MakeTempDir("dataset_empty");
  EXPECT_EQ(ImageFolderSource::Open(empty).status().code(),
            absl::StatusCode::kFailedPrecondition);

  const std::string root = testing::MakeTempDir("dataset_oor");
  testing::WriteFile(root + "/c/a.jpg", "a");
  std::unique_ptr<ImageFolderSource> ds = *ImageFolderSource::Open(root);
  absl::Status outside = ds->Read(1).status();
  EXPECT_EQ(outside.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(outside.message().find("sample 1"), std::string::npos);
  std::filesystem::remove(root + "/c/a.jpg");
  absl::Status gone = ds->Read(0).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(gone.message().find("c/a.jpg"), std::string::npos);
  EXPECT_NE(gone.message().find("sample 0"), std::string::npos);
}

// The fingerprint is keyed into saved profiles: it must not change with the
// code. The value is FNV-1a over (path, uint64 size, uint32 label) per entry.
TEST(ImageFolderSourceTest, FingerprintIsStable) {
  const std::string root = testing::MakeTempDir("image_folder_fp_golden");
  testing::WriteFile(root + "/a/x.jpg", "xxx");
  testing::WriteFile(root + "/b/y.jpeg", "yy");
  std::unique_ptr<ImageFolderSource> ds = *ImageFolderSource::Open(root);
  EXPECT_EQ(ds->fingerprint(), 0x1fbda725d1e9f9bcULL);
  EXPECT_EQ(ds->fingerprint(), ManifestFingerprint(ds->entries()));
}

// Callers that only hold the interface see the same manifest and bytes.
TEST(ImageFolderSourceTest, ServesThroughTheSampleSourceInterface) {
  const std::string root = testing::MakeTempDir("image_folder_interface");
  testing::WriteFile(root + "/dogs/1.jpg", "one");
  testing::WriteFile(root + "/cats/2.jpg", "two!");
  std::unique_ptr<ImageFolderSource> folder = *ImageFolderSource::Open(root + "/");
  const SampleSource& source = *folder;
  EXPECT_EQ(source.name(), std::filesystem::path(root).filename().string());
  ASSERT_EQ(source.size(), 2u);
  EXPECT_EQ(source.class_names(), (std::vector<std::string>{"cats", "dogs"}));
  EXPECT_EQ(source.entry(1).relative_path, "dogs/1.jpg");
  EXPECT_EQ(*source.Read(0), "two!");
  EXPECT_EQ(source.FilePaths(),
            (std::vector<std::string>{root + "/cats/2.jpg", root + "/dogs/1.jpg"}));
}

}  // namespace
}  // namespace sophon
