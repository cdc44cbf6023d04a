// A dataset's manifest as a sample source holds it: per sample a label, a
// size, a version and a relative path, with every path in one buffer (no
// string object per sample: about 24 bytes of fixed fields and the path's own
// bytes).
#ifndef SOPHON_DATA_MANIFEST_TABLE_H_
#define SOPHON_DATA_MANIFEST_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace sophon {

// One sample of a manifest, as a copy (ManifestTable::entry) or as a test
// writes one. A sample's id is its index in the manifest.
struct ManifestEntry {
  // Where the sample lives in its source ("class_name/file.jpg"), as valid
  // UTF-8 without control characters (EscapeName) for manifests and logs.
  std::string relative_path;
  uint32_t label = 0;     // index into the source's class names
  uint64_t raw_size = 0;  // bytes of the sample when the manifest was built
  uint32_t version = 0;   // SampleVersion when the manifest was built; 0 = unknown
};

// What changes when a sample's file is edited, even to the same size: a
// digest of its modification time (image folders) or its CRC-32 (packs),
// never 0 (0 = unknown). Not part of the fingerprint, so that replicas whose
// copies differ in time still hold the same samples; a training node's cache
// serves an entry only while its version matches.
uint32_t SampleVersion(int64_t mtime_seconds, int64_t mtime_nanoseconds);
inline uint32_t SampleVersionOfCrc(uint32_t crc32) { return crc32 == 0 ? 1 : crc32; }

// Append-only while it is built, then read-only (reads are thread-safe).
class ManifestTable {
 public:
  // Room for `samples` samples whose paths take `path_bytes` in all, so that
  // building the table does not grow its arrays by doubling (which holds up
  // to three times the data at once).
  void Reserve(size_t samples, size_t path_bytes);
  // Appends sample size().
  void Add(absl::string_view relative_path, uint32_t label, uint64_t raw_size,
           uint32_t version = 0);
  // Gives back spare capacity, when there is more than an eighth to spare.
  void ShrinkToFit();

  size_t size() const { return labels_.size(); }
  // REQUIRES (all four): id < size().
  uint32_t label(uint64_t id) const { return labels_[id]; }
  uint64_t raw_size(uint64_t id) const { return raw_sizes_[id]; }
  uint32_t version(uint64_t id) const { return versions_[id]; }
  // Valid as long as the table.
  absl::string_view relative_path(uint64_t id) const;
  ManifestEntry entry(uint64_t id) const;

  // Bytes of memory the table holds (its arrays' capacity).
  size_t memory_bytes() const;

 private:
  std::string paths_;                // every relative path, back to back
  std::vector<uint64_t> path_ends_;  // sample id's path ends at path_ends_[id]
  std::vector<uint32_t> labels_;
  std::vector<uint64_t> raw_sizes_;
  std::vector<uint32_t> versions_;
};

// FNV-1a (64 bit) over every sample's (relative path, raw size, label), in
// order: the fingerprint every SampleSource reports.
class ManifestHasher {
 public:
  void Add(absl::string_view relative_path, uint64_t raw_size, uint32_t label);
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

// ManifestHasher over `entries`.
uint64_t ManifestFingerprint(const std::vector<ManifestEntry>& entries);

}  // namespace sophon

#endif  // SOPHON_DATA_MANIFEST_TABLE_H_
