// An ImageFolder tree as a SampleSource: one sub-directory per class, as
// torchvision's ImageFolder, one JPEG file per sample.
#ifndef SOPHON_DATA_IMAGE_FOLDER_H_
#define SOPHON_DATA_IMAGE_FOLDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sophon/data/sample_source.h"

namespace sophon {

// Immutable after Open(); all methods are thread-safe. Read opens the file
// on every call (no cache of its own: the page cache is the cache).
class ImageFolderSource final : public SampleSource {
 public:
  // Scans `root`: classes are the sorted sub-directory names, samples the
  // sorted *.jpg / *.jpeg files (any case) within each, in class order;
  // hidden names (a leading '.') are skipped. NotFound if root is missing,
  // FailedPrecondition if it cannot be listed or holds no samples; errors
  // name the directory.
  static absl::StatusOr<std::unique_ptr<ImageFolderSource>> Open(const std::string& root);

  // The directory given to Open.
  const std::string& root() const { return root_; }

  // Last path component of root.
  std::string name() const override;
  const std::vector<ManifestEntry>& entries() const override { return entries_; }
  const std::vector<std::string>& class_names() const override { return class_names_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  // Reads the sample's file. OutOfRange for an id outside the manifest,
  // NotFound if the file is gone, DataLoss if reading fails; errors name the
  // id and the relative path.
  absl::StatusOr<std::string> Read(uint64_t id) const override;
  // root/relative_path of every sample, in manifest order.
  std::vector<std::string> FilePaths() const override;

 private:
  ImageFolderSource() = default;

  std::string root_;
  std::vector<std::string> class_names_;
  std::vector<ManifestEntry> entries_;
  uint64_t fingerprint_ = 0;
};

}  // namespace sophon

#endif  // SOPHON_DATA_IMAGE_FOLDER_H_
