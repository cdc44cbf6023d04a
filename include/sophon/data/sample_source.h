// Where a storage node reads sample bytes from: an ImageFolder tree
// (image_folder.h) or a pack of WebDataset shards (pack_source.h). The server, the
// profiler and the page-cache tools see only this interface; only the code
// that opens a source names its kind.
#ifndef SOPHON_DATA_SAMPLE_SOURCE_H_
#define SOPHON_DATA_SAMPLE_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sophon/data/manifest_table.h"

namespace sophon {

// The manifest and the sample bytes of one dataset. The manifest is fixed
// when the source is opened (deterministic order: the same files give the
// same ids). Implementations must make every method thread-safe; the server
// calls Read from all its prep workers at once.
class SampleSource {
 public:
  virtual ~SampleSource() = default;

  // Short name of the dataset (ImageFolder: the last component of its root),
  // reported to clients and used to name profiles.
  virtual std::string name() const = 0;
  // The manifest, in id order (labels, sizes and escaped relative paths).
  virtual const ManifestTable& manifest() const = 0;
  // Class names, indexed by label.
  virtual const std::vector<std::string>& class_names() const = 0;
  // Identifies the manifest: ManifestHasher over the samples for every
  // source (with the relative paths as the source stores them, before any
  // escaping for display), so that a profile or a client can tell whether the
  // samples changed.
  virtual uint64_t fingerprint() const = 0;

  // The bytes of sample `id` (for an image dataset: the encoded file).
  // OutOfRange for an id outside the manifest; every error names the sample
  // id and its relative path.
  virtual absl::StatusOr<std::string> Read(uint64_t id) const = 0;

  // What a read learned besides the bytes.
  struct ReadInfo {
    // The bytes came from memory (a CachedSource, cached_source.h), not from
    // the files; the server reports it per sample (Sample.cache_hit).
    bool cache_hit = false;
  };
  // Read, also telling where the bytes came from. The default reads and
  // reports no cache hit; a source that keeps bytes in memory overrides it.
  // REQUIRES: info != nullptr.
  virtual absl::StatusOr<std::string> ReadWithInfo(uint64_t id, ReadInfo* info) const {
    *info = ReadInfo();
    return Read(id);
  }

  // The local files that hold the samples' bytes, as paths that can be
  // opened (page-cache control warms or evicts them). A source with one file
  // per sample lists them in manifest order. Empty if nothing is on disk.
  virtual std::vector<std::string> FilePaths() const = 0;

  // The most bytes Read can return for one sample (a source's size cap);
  // the server reserves at most this much for a sample before reading it.
  virtual uint64_t max_sample_bytes() const { return UINT64_MAX; }

  // Samples [k * g, (k + 1) * g) of g = group_size() are stored together and
  // read with one I/O (a pack, pack_source.h): an order that visits a group's
  // samples close together reads less. 1 = every sample alone.
  virtual uint32_t group_size() const { return 1; }
  // The most memory the source holds for reads besides the manifest (a
  // pack's group buffers); the server's memory bound counts it.
  virtual uint64_t buffer_bytes() const { return 0; }

  size_t size() const { return manifest().size(); }
  // A copy of sample `id`'s entry (for messages and tests; hot paths read
  // manifest().label(id) and the like). REQUIRES: id < size().
  ManifestEntry entry(uint64_t id) const { return manifest().entry(id); }
};

}  // namespace sophon

#endif  // SOPHON_DATA_SAMPLE_SOURCE_H_
