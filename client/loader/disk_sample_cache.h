// The training node's sample cache on local disk (sophon-train
// --local-cache-dir): whole sample files kept across runs, so that a
// restarted or a later job over the same dataset starts warm, and shared by
// every process of the node that opens the same folder (ranks, Python
// loaders): one copy on disk, one in the page cache.
//
// Layout: DIR/<dataset fingerprint, 16 hex digits>/<id % 256, 2 hex>/<id>,
// each file a header (magic, fingerprint, id, size, CRC-32 of the bytes) and
// the sample's bytes, written to a temporary file and renamed into place (no
// fsync: an entry a crash left short fails its checksum). Another dataset
// (another fingerprint) has another folder: its entries are never read.
//
// Bounded in bytes per dataset folder (max_bytes, each entry's file size
// counted), noevict: once full, nothing more is written. The usage is one
// counter in DIR/<fingerprint>/usage that every process updates under
// flock, so the processes of a node share the bound; an entry written twice
// by two processes at once is counted twice (the bound holds, conservatively).
#ifndef SOPHON_CLIENT_LOADER_DISK_SAMPLE_CACHE_H_
#define SOPHON_CLIENT_LOADER_DISK_SAMPLE_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace sophon {

struct DiskSampleCacheOptions {
  std::string dir;          // the cache's folder (created)
  int64_t max_bytes = 0;    // > 0: what the dataset's folder may hold
  uint64_t fingerprint = 0; // the dataset's (its manifest's) fingerprint
  uint64_t num_samples = 0; // ids are below it

  absl::Status Validate() const;  // names the field
};

struct DiskSampleCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t corrupt = 0;   // entries removed because they failed their checks
  uint64_t written = 0;
  uint64_t rejected = 0;  // not written: the folder is full
  // The folder's usage: the counter every process of the node adds to, read when the
  // stats are taken (as this process last wrote it when the counter cannot be read).
  int64_t usage_bytes = 0;
};

class DiskSampleCache {
 public:
  // Creates DIR/<fingerprint>/ and its usage counter (summing the entries
  // found when there is none). Errors name the folder.
  static absl::StatusOr<std::unique_ptr<DiskSampleCache>> Open(
      const DiskSampleCacheOptions& options);

  // Sample `id`'s bytes when its entry is there and intact (and their
  // CRC-32 in *crc when given); a damaged entry is removed and counted.
  // Thread-safe.
  bool Get(uint64_t id, std::string* out, uint32_t* crc = nullptr);
  // Writes sample `id`'s entry unless it is there or the folder is full;
  // whether it is there afterwards. Errors of the file system are logged
  // once and make it a no-op. Thread-safe.
  bool Put(uint64_t id, absl::string_view bytes);
  // Whether this process knows of an entry for `id`: found when opened,
  // written or read since. Entries other processes wrote since are found by
  // Get. Thread-safe.
  bool Contains(uint64_t id) const;

  DiskSampleCacheStats stats() const;
  const std::string& folder() const { return folder_; }
  const DiskSampleCacheOptions& options() const { return options_; }
  std::string EntryPath(uint64_t id) const;

  static constexpr int64_t kHeaderBytes = 40;

 private:
  DiskSampleCache(const DiskSampleCacheOptions& options, std::string folder)
      : options_(options), folder_(std::move(folder)), known_(options.num_samples, 0) {}
  // Adds `delta` to the folder's usage under flock when the result stays
  // within max_bytes (or delta <= 0); the new usage, or -1 when it would not.
  int64_t AddUsage(int64_t delta);
  // The folder's usage as the counter says now (under flock); -1 when it cannot be read.
  int64_t ReadUsage() const;

  const DiskSampleCacheOptions options_;
  const std::string folder_;  // DIR/<fingerprint>
  mutable absl::Mutex mu_;
  std::vector<char> known_ ABSL_GUARDED_BY(mu_);  // entry seen by this process
  DiskSampleCacheStats stats_ ABSL_GUARDED_BY(mu_);
  bool write_error_logged_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_DISK_SAMPLE_CACHE_H_
