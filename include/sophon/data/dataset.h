// A dataset on a storage node: an ImageFolder tree (one sub-directory per
// class, as torchvision's ImageFolder) and its deterministic manifest.
#ifndef SOPHON_DATA_DATASET_H_
#define SOPHON_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sophon {

struct ManifestEntry {
  std::string relative_path;  // "class_name/file.jpg"
  uint32_t label = 0;         // index into class_names
  uint64_t raw_size = 0;      // bytes of the file when the manifest was built
};

// Immutable after Open(); all methods are thread-safe.
class Dataset {
 public:
  // Scans `root`: classes are the sorted sub-directory names, samples the
  // sorted *.jpg / *.jpeg files (any case) within each, in class order.
  // NotFound if root is missing, FailedPrecondition if it holds no samples.
  static absl::StatusOr<std::unique_ptr<Dataset>> OpenImageFolder(const std::string& root);

  const std::string& root() const { return root_; }
  // Last path component of root.
  std::string name() const;
  size_t size() const { return entries_.size(); }
  const ManifestEntry& entry(uint64_t id) const { return entries_[id]; }
  const std::vector<ManifestEntry>& entries() const { return entries_; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  // Hash of every (relative path, size, label): identifies this file list.
  uint64_t fingerprint() const { return fingerprint_; }

  // Reads a sample's file. OutOfRange for an id outside the manifest; errors
  // name the id and the path.
  absl::StatusOr<std::string> Read(uint64_t id) const;

 private:
  Dataset() = default;

  std::string root_;
  std::vector<std::string> class_names_;
  std::vector<ManifestEntry> entries_;
  uint64_t fingerprint_ = 0;
};

}  // namespace sophon

#endif  // SOPHON_DATA_DATASET_H_
