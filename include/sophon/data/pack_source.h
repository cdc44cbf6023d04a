// A pack (a folder of WebDataset tar shards and their index, pack_index.h) as
// a SampleSource. A sample is read with its group: the bytes of the group's
// samples lie together in one shard and are read with one I/O, and the
// samples of a group read while that I/O is in flight, or soon after it,
// share it (a bounded table of group buffers, each dropped once every sample
// of it has been read, or evicted least recently used).
#ifndef SOPHON_DATA_PACK_SOURCE_H_
#define SOPHON_DATA_PACK_SOURCE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sophon/data/follow_symlinks.h"
#include "sophon/data/pack_index.h"
#include "sophon/data/sample_source.h"

namespace sophon {

struct PackSourceOptions {
  // Largest sample (image bytes) the index may name; a larger one fails
  // Open. In [1, 1 GiB], as ImageFolderOptions.max_file_bytes.
  int64_t max_sample_bytes = int64_t{64} << 20;
  // Memory for group buffers (the groups being read and those whose samples
  // are not all read yet). A group larger than this is read sample by sample.
  int64_t group_buffer_bytes = int64_t{128} << 20;
  // Which symbolic links among the pack's files (its index and shards) are
  // followed. kInside: a file that resolves outside the pack folder fails
  // Open (a link to another file of the folder is fine); kAll: any. The
  // shards are held open from Open on, so a link swapped in later is never
  // read. OpenSampleSource sets it from ImageFolderOptions.follow_symlinks.
  FollowSymlinks follow_symlinks = FollowSymlinks::kInside;
  // Largest index file read; a larger one fails Open before it is read
  // (ResourceExhausted). >= 1. The index is read whole only once its size
  // fits its header's counts and its checksum (read in bounded chunks) passes.
  int64_t max_index_bytes = kDefaultMaxPackIndexBytes;

  absl::Status Validate() const;
};

// How many I/Os the source made (for tests and benchmarks).
struct PackReadStats {
  uint64_t group_reads = 0;   // one pread of a whole group
  uint64_t sample_reads = 0;  // one pread of one sample
  uint64_t shared = 0;        // samples served from a group buffer already read or being read
  uint64_t evicted = 0;       // group buffers dropped before all their samples were read
};

class PackSource final : public SampleSource {
 public:
  // Reads dir/sophon-pack.idx (ReadPackIndex) and opens every shard it names
  // (kept open). Errors name the folder, the file and the sample: NotFound
  // without an index or a shard, FailedPrecondition for a shard that is not
  // a regular file, PermissionDenied for an index or shard that resolves
  // outside the folder under follow_symlinks kInside (naming the option),
  // InvalidArgument for a sample past the end of its shard or larger than
  // max_sample_bytes, and ReadPackIndex's errors.
  static absl::StatusOr<std::unique_ptr<PackSource>> Open(const std::string& dir,
                                                          const PackSourceOptions& options = {});
  ~PackSource() override;

  std::string name() const override;
  const ManifestTable& manifest() const override { return manifest_; }
  const std::vector<std::string>& class_names() const override { return class_names_; }
  // ManifestHasher over (path, size, label) in pack order.
  uint64_t fingerprint() const override { return fingerprint_; }
  // The sample's bytes, checked against its CRC-32: DataLoss naming the id,
  // the path, the shard and the offset when they differ (that sample's error
  // only) or when its shard cannot be read.
  absl::StatusOr<std::string> Read(uint64_t id) const override;
  // The shards.
  std::vector<std::string> FilePaths() const override;
  uint64_t max_sample_bytes() const override {
    return static_cast<uint64_t>(options_.max_sample_bytes);
  }
  uint32_t group_size() const override { return group_size_; }
  // PackSourceOptions.group_buffer_bytes.
  uint64_t buffer_bytes() const override {
    return static_cast<uint64_t>(options_.group_buffer_bytes);
  }

  // The fingerprint of the dataset the pack was made from (0 if unknown).
  uint64_t source_fingerprint() const { return source_fingerprint_; }
  PackReadStats read_stats() const;

 private:
  struct Location {
    uint32_t shard;
    uint32_t crc32;
    uint64_t offset;
  };
  // The bytes of one group (or of the part of it in one shard) being read or
  // read: samples [first, first + count) at shard offsets from `begin`.
  struct GroupBuffer {
    uint64_t begin = 0;
    uint64_t reserved = 0;  // bytes counted in buffered_bytes_
    std::string bytes;
    bool ready = false;
    absl::Status status;
    uint64_t unread = 0;      // samples not read from it yet
    std::vector<bool> taken;  // per sample of the run
    std::list<uint64_t>::iterator lru;
  };
  // Readers of a buffer being read hold it by shared_ptr, so a failed read
  // can drop it from the table while they wake.
  // The samples of `id`'s group that lie in its shard: [first, end).
  void GroupRun(uint64_t id, uint64_t* first, uint64_t* end) const;
  absl::StatusOr<std::string> ReadSample(uint64_t id) const;
  absl::Status ReadRange(uint32_t shard, uint64_t offset, uint64_t size, std::string* out) const;
  absl::StatusOr<std::string> Checked(uint64_t id, std::string bytes) const;
  std::string Describe(uint64_t id) const;
  // Copies sample `id` out of `group` (ready, keyed by `first`), marks it
  // read and drops the buffer once every sample of it was read.
  std::string Take(const std::shared_ptr<GroupBuffer>& group, uint64_t id, uint64_t first) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops least recently used ready buffers until `need` more bytes fit.
  void MakeRoom(uint64_t need) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(uint64_t key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PackSource() = default;

  std::string dir_;
  PackSourceOptions options_;
  std::vector<std::string> shards_;
  std::vector<int> fds_;
  std::vector<std::string> class_names_;
  ManifestTable manifest_;
  std::vector<Location> locations_;
  uint32_t group_size_ = 1;
  uint64_t fingerprint_ = 0;
  uint64_t source_fingerprint_ = 0;

  mutable absl::Mutex mu_;
  // Keyed by the run's first sample.
  mutable absl::flat_hash_map<uint64_t, std::shared_ptr<GroupBuffer>> groups_
      ABSL_GUARDED_BY(mu_);
  mutable std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);  // ready buffers, oldest first
  mutable uint64_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  mutable PackReadStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sophon

#endif  // SOPHON_DATA_PACK_SOURCE_H_
