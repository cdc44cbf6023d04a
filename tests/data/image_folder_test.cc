#include "sophon/data/image_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
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

// A file edited to the same size keeps the fingerprint (replicas copied at
// other times hold the same samples) but gets another version: what a
// training node's cache checks before it serves an entry.
TEST(ImageFolderSourceTest, AnEditToTheSameSizeChangesTheVersionNotTheFingerprint) {
  const std::string root = testing::MakeTempDir("dataset_version");
  const std::string path = root + "/c/a.jpg";
  testing::WriteFile(path, "abcd");
  testing::WriteFile(root + "/c/b.jpg", "b");
  std::unique_ptr<ImageFolderSource> before = *ImageFolderSource::Open(root);
  EXPECT_NE(before->manifest().version(0), 0u);
  testing::WriteFile(path, "abce");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  const struct timespec times[2] = {st.st_atim, {st.st_mtim.tv_sec + 1, st.st_mtim.tv_nsec}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  std::unique_ptr<ImageFolderSource> after = *ImageFolderSource::Open(root);
  EXPECT_EQ(after->fingerprint(), before->fingerprint());
  EXPECT_NE(after->manifest().version(0), before->manifest().version(0));
  EXPECT_EQ(after->manifest().version(1), before->manifest().version(1));
  EXPECT_EQ(after->entry(0).version, after->manifest().version(0));
}

// The fingerprint is keyed into saved profiles: it must not change with the
// code. The value is FNV-1a over (path, uint64 size, uint32 label) per entry.
TEST(ImageFolderSourceTest, FingerprintIsStable) {
  const std::string root = testing::MakeTempDir("image_folder_fp_golden");
  testing::WriteFile(root + "/a/x.jpg", "xxx");
  testing::WriteFile(root + "/b/y.jpeg", "yy");
  std::unique_ptr<ImageFolderSource> ds = *ImageFolderSource::Open(root);
  EXPECT_EQ(ds->fingerprint(), 0x1fbda725d1e9f9bcULL);
  EXPECT_EQ(ds->fingerprint(), ManifestFingerprint({ds->entry(0), ds->entry(1)}));
}

ImageFolderOptions Follow(FollowSymlinks follow) {
  ImageFolderOptions options;
  options.follow_symlinks = follow;
  return options;
}

bool Contains(const absl::Status& status, const std::string& text) {
  return status.message().find(text) != absl::string_view::npos;
}

TEST(ImageFolderOptionsTest, ValidatesAndParses) {
  EXPECT_TRUE(ImageFolderOptions().Validate().ok());
  ImageFolderOptions options;
  options.max_file_bytes = 0;
  EXPECT_TRUE(Contains(options.Validate(), "ImageFolderOptions.max_file_bytes"));
  options.max_file_bytes = int64_t{2} << 30;  // past protobuf's message limit
  EXPECT_TRUE(Contains(options.Validate(), "ImageFolderOptions.max_file_bytes"));
  EXPECT_EQ(*ParseFollowSymlinks("inside"), FollowSymlinks::kInside);
  EXPECT_EQ(*ParseFollowSymlinks("all"), FollowSymlinks::kAll);
  EXPECT_TRUE(Contains(ParseFollowSymlinks("some").status(), "ImageFolderOptions.follow_symlinks"));
  const std::string root = testing::MakeTempDir("dataset_bad_options");
  testing::WriteFile(root + "/c/a.jpg", "a");
  EXPECT_EQ(ImageFolderSource::Open(root, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Class 3: a file over the cap fails before anything is read. The 3 GiB file
// is sparse (ftruncate), so it costs no disk; reading it whole would take
// 3 GiB of memory and exceed protobuf's message limit.
TEST(ImageFolderSourceTest, RefusesFilesOverTheSizeCap) {
  const std::string root = testing::MakeTempDir("dataset_size_cap");
  testing::WriteFile(root + "/c/big.jpg", "");
  testing::WriteFile(root + "/c/small.jpg", "small");
  ASSERT_EQ(::truncate((root + "/c/big.jpg").c_str(), int64_t{3} << 30), 0);
  std::unique_ptr<ImageFolderSource> ds = *ImageFolderSource::Open(root);
  ASSERT_EQ(ds->size(), 2u);
  EXPECT_EQ(ds->entry(0).raw_size, uint64_t{3} << 30);
  absl::Status big = ds->Read(0).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << big;
  EXPECT_TRUE(Contains(big, "sample 0 (c/big.jpg)")) << big;
  EXPECT_TRUE(Contains(big, "ImageFolderOptions.max_file_bytes (67108864)")) << big;
  EXPECT_EQ(*ds->Read(1), "small");

  // A file that grew past the cap after Open is refused as well; one at the
  // cap is read whole.
  ImageFolderOptions options;
  options.max_file_bytes = 5;
  std::unique_ptr<ImageFolderSource> capped = *ImageFolderSource::Open(root, options);
  EXPECT_EQ(*capped->Read(1), "small");
  testing::WriteFile(root + "/c/small.jpg", "small!");
  absl::Status grown = capped->Read(1).status();
  EXPECT_EQ(grown.code(), absl::StatusCode::kResourceExhausted) << grown;
  EXPECT_TRUE(Contains(grown, "ImageFolderOptions.max_file_bytes (5)")) << grown;
}

// Class 7: a FIFO swapped in for a sample after Open fails at once. Without
// O_NONBLOCK the open would wait for a writer forever; the watchdog then
// fails the test and opens the FIFO's write end to set the reader free.
TEST(ImageFolderSourceTest, FifoSwappedInAfterOpenFailsWithoutBlocking) {
  const std::string root = testing::MakeTempDir("dataset_fifo");
  const std::string file = root + "/c/a.jpg";
  testing::WriteFile(file, "a");
  testing::WriteFile(root + "/c/b.jpg", "b");
  std::unique_ptr<ImageFolderSource> ds = *ImageFolderSource::Open(root);
  ASSERT_EQ(ds->size(), 2u);
  std::filesystem::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);

  std::promise<absl::Status> done;
  std::future<absl::Status> result = done.get_future();
  std::thread reader([&] { done.set_value(ds->Read(0).status()); });
  if (result.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "Read blocked on a FIFO";
    const int fd = ::open(file.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  reader.join();
  const absl::Status status = result.get();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_TRUE(Contains(status, "sample 0 (c/a.jpg)")) << status;
  EXPECT_TRUE(Contains(status, "FIFO")) << status;
  EXPECT_EQ(*ds->Read(1), "b");  // the others are still served

  // A FIFO present at Open is no sample at all.
  std::unique_ptr<ImageFolderSource> reopened = *ImageFolderSource::Open(root);
  ASSERT_EQ(reopened->size(), 1u);
  EXPECT_EQ(reopened->entry(0).relative_path, "c/b.jpg");
}

// Class 7: links. A secret outside the root (as /proc/self/environ was).
TEST(ImageFolderSourceTest, LinksOutsideTheRootAreSkippedUnlessAllAreFollowed) {
  const std::string outside = testing::MakeTempDir("dataset_links_outside");
  testing::WriteFile(outside + "/secret.jpg", "secret");
  testing::WriteFile(outside + "/cls/other.jpg", "other");
  const std::string root = testing::MakeTempDir("dataset_links");
  testing::WriteFile(root + "/c/a.jpg", "a");
  std::filesystem::create_symlink(outside + "/secret.jpg", root + "/c/leak.jpg");
  std::filesystem::create_symlink("../c/a.jpg", root + "/c/same.jpg");  // inside: fine
  std::filesystem::create_symlink(outside + "/cls", root + "/linked_class");
  std::filesystem::create_directories(root + "/d");
  std::filesystem::create_symlink("c", root + "/e");  // a class linked inside

  std::unique_ptr<ImageFolderSource> inside = *ImageFolderSource::Open(root);
  EXPECT_EQ(inside->class_names(), (std::vector<std::string>{"c", "d", "e"}));
  ASSERT_EQ(inside->size(), 4u);
  EXPECT_EQ(inside->entry(0).relative_path, "c/a.jpg");
  EXPECT_EQ(inside->entry(1).relative_path, "c/same.jpg");
  EXPECT_EQ(inside->entry(2).relative_path, "e/a.jpg");
  EXPECT_EQ(*inside->Read(1), "a");
  EXPECT_EQ(*inside->Read(2), "a");

  std::unique_ptr<ImageFolderSource> all =
      *ImageFolderSource::Open(root, Follow(FollowSymlinks::kAll));
  EXPECT_EQ(all->class_names(), (std::vector<std::string>{"c", "d", "e", "linked_class"}));
  ASSERT_EQ(all->size(), 7u);
  EXPECT_EQ(all->entry(1).relative_path, "c/leak.jpg");
  EXPECT_EQ(*all->Read(1), "secret");
  EXPECT_EQ(all->entry(6).relative_path, "linked_class/other.jpg");
  EXPECT_EQ(*all->Read(6), "other");

  // A link swapped in after Open, for a file and for a class directory, is
  // refused at read time under kInside.
  std::filesystem::remove(root + "/c/a.jpg");
  std::filesystem::create_symlink(outside + "/secret.jpg", root + "/c/a.jpg");
  absl::Status swapped = inside->Read(0).status();
  EXPECT_EQ(swapped.code(), absl::StatusCode::kPermissionDenied) << swapped;
  EXPECT_TRUE(Contains(swapped, "sample 0 (c/a.jpg)")) << swapped;
  EXPECT_TRUE(Contains(swapped, "ImageFolderOptions.follow_symlinks")) << swapped;
  EXPECT_EQ(inside->Read(1).status().code(), absl::StatusCode::kPermissionDenied);  // via c/a.jpg
  std::filesystem::remove(root + "/e");
  std::filesystem::create_symlink(outside + "/cls", root + "/e");
  std::filesystem::create_symlink(outside + "/cls/other.jpg", outside + "/cls/a.jpg");
  EXPECT_EQ(inside->Read(2).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(*all->Read(0), "secret");  // kAll follows it

  // Only links outside: the error says why the dataset is empty.
  const std::string only_links = testing::MakeTempDir("dataset_only_links");
  std::filesystem::create_directories(only_links + "/c");
  std::filesystem::create_symlink(outside + "/secret.jpg", only_links + "/c/x.jpg");
  absl::Status empty = ImageFolderSource::Open(only_links).status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(empty, "1 links to outside the root were skipped")) << empty;
}

// Class 6: names that are not UTF-8 or hold control characters are served;
// the manifest carries them escaped (valid UTF-8, one line).
TEST(ImageFolderSourceTest, ServesOddNamesAndEscapesThemInTheManifest) {
  const std::string root = testing::MakeTempDir("dataset_odd_names");
  testing::WriteFile(root + "/caf\xe9/x.jpg", "latin1 class");
  testing::WriteFile(root + "/c/evil\n[info] forged.jpg", "newline");
  testing::WriteFile(root + "/c/\xff\xfe.jpg", "invalid");
  testing::WriteFile(root + "/c/ok.jpg", "ok");
  std::unique_ptr<ImageFolderSource> ds = *ImageFolderSource::Open(root);
  ASSERT_EQ(ds->size(), 4u);
  EXPECT_EQ(ds->class_names(), (std::vector<std::string>{"c", "caf\\xe9"}));
  EXPECT_EQ(ds->entry(0).relative_path, "c/evil\\n[info] forged.jpg");
  EXPECT_EQ(ds->entry(1).relative_path, "c/ok.jpg");
  EXPECT_EQ(ds->entry(2).relative_path, "c/\\xff\\xfe.jpg");
  EXPECT_EQ(ds->entry(3).relative_path, "caf\\xe9/x.jpg");
  EXPECT_EQ(*ds->Read(0), "newline");
  EXPECT_EQ(*ds->Read(2), "invalid");
  EXPECT_EQ(*ds->Read(3), "latin1 class");
  EXPECT_EQ(ds->FilePaths()[2], root + "/c/\xff\xfe.jpg");  // real paths for the page cache
  // The fingerprint hashes the names on disk.
  std::vector<ManifestEntry> on_disk;
  for (uint64_t id = 0; id < ds->size(); ++id) on_disk.push_back(ds->entry(id));
  on_disk[0].relative_path = "c/evil\n[info] forged.jpg";
  on_disk[2].relative_path = "c/\xff\xfe.jpg";
  on_disk[3].relative_path = "caf\xe9/x.jpg";
  EXPECT_EQ(ds->fingerprint(), ManifestFingerprint(on_disk));
  // The dataset's name (the root's last component) goes into the manifest too.
  const std::string odd_root = testing::MakeTempDir("dataset_\xff");
  testing::WriteFile(odd_root + "/c/a.jpg", "a");
  EXPECT_EQ((*ImageFolderSource::Open(odd_root))->name(),
            absl::StrCat("sophon_dataset_\\xff_", ::getpid()));
  std::filesystem::remove(root + "/c/\xff\xfe.jpg");
  absl::Status gone = ds->Read(2).status();
  EXPECT_TRUE(Contains(gone, "sample 2 (c/\\xff\\xfe.jpg)")) << gone;
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
