// An ImageFolder tree as a SampleSource: one sub-directory per class, as
// torchvision's ImageFolder, one JPEG file per sample.
#ifndef SOPHON_DATA_IMAGE_FOLDER_H_
#define SOPHON_DATA_IMAGE_FOLDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sophon/data/follow_symlinks.h"
#include "sophon/data/sample_source.h"

namespace sophon {

class SymlinkPolicy;

// How far the files of a dataset are trusted.
struct ImageFolderOptions {
  // Largest sample file read; a larger one fails its sample before anything
  // is read (and a file that grows past it while read fails too). In
  // [1, 1 GiB]: a sample travels in one protobuf message (2 GiB at most).
  int64_t max_file_bytes = int64_t{64} << 20;
  // Which links (to a class directory or a sample file) are followed.
  // kInside: a link whose target resolves outside the root is skipped when
  // the manifest is built (with a warning) and refused when read (a link
  // swapped in after Open included).
  FollowSymlinks follow_symlinks = FollowSymlinks::kInside;

  absl::Status Validate() const;
};

// Immutable after Open(); all methods are thread-safe. Read opens the file
// on every call (no cache of its own: the page cache is the cache).
//
// Names on disk are untrusted: the manifest (manifest(), class_names()) holds
// them escaped (EscapeName: valid UTF-8 without control characters, so a
// manifest always serialises and a log line cannot be forged), while reads
// use the names as they are on disk (kept a second time only for the rare
// names that escaping changes). The fingerprint hashes the names on disk, so
// it is the same as before names were escaped.
class ImageFolderSource final : public SampleSource {
 public:
  // Scans `root`: classes are the sorted sub-directory names, samples the
  // sorted *.jpg / *.jpeg files (any case) within each, in class order;
  // hidden names (a leading '.') are skipped, and so are links that
  // options.follow_symlinks refuses. NotFound if root is missing,
  // FailedPrecondition if it cannot be listed or holds no samples,
  // InvalidArgument for bad options; errors name the directory or option.
  static absl::StatusOr<std::unique_ptr<ImageFolderSource>> Open(
      const std::string& root, const ImageFolderOptions& options = {});

  // The directory given to Open.
  const std::string& root() const { return root_; }
  const ImageFolderOptions& options() const { return options_; }

  // Last path component of root (escaped).
  std::string name() const override;
  const ManifestTable& manifest() const override { return manifest_; }
  const std::vector<std::string>& class_names() const override { return class_names_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  // Reads the sample's file, never blocking on it and never reading more than
  // max_file_bytes + 1 bytes. OutOfRange for an id outside the manifest,
  // NotFound if the file is gone, FailedPrecondition if it is not a regular
  // file (a FIFO, a device), PermissionDenied if it resolves outside the root
  // under kInside, ResourceExhausted if it is larger than max_file_bytes,
  // DataLoss if reading fails; errors name the id, the (escaped) relative
  // path and the option.
  absl::StatusOr<std::string> Read(uint64_t id) const override;
  // root/relative_path of every sample as on disk, in manifest order.
  std::vector<std::string> FilePaths() const override;
  // ImageFolderOptions.max_file_bytes: a larger file fails before it is read.
  uint64_t max_sample_bytes() const override {
    return static_cast<uint64_t>(options_.max_file_bytes);
  }

 private:
  ImageFolderSource() = default;
  // Sample `id`'s relative path as on disk.
  absl::string_view DiskPath(uint64_t id) const;
  // options_.follow_symlinks over real_root_ (src/data/symlink_policy.h).
  SymlinkPolicy policy() const;

  std::string root_;
  std::string real_root_;  // root_ with every link resolved (realpath)
  ImageFolderOptions options_;
  std::vector<std::string> class_names_;  // escaped
  ManifestTable manifest_;                // relative paths escaped
  // The relative paths on disk of the samples whose escaped path differs.
  std::unordered_map<uint64_t, std::string> disk_paths_;
  uint64_t fingerprint_ = 0;
};

}  // namespace sophon

#endif  // SOPHON_DATA_IMAGE_FOLDER_H_
