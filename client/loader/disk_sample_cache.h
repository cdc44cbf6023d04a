// The training node's sample cache on local disk (sophon-train
// --local-cache-dir): whole sample files kept across runs, so that a
// restarted or a later job over the same dataset starts warm, and shared by
// every process of the node that opens the same folder (ranks, Python
// loaders, other jobs): one copy on disk, one in the page cache.
//
// Layout:
//   DIR/usage                 the bytes every dataset's entries take (the node's bound)
//   DIR/<fingerprint>/        one folder a dataset (16 hex digits), mode 0700
//     usage                   the bytes this dataset's entries take
//     in-use                  held with a shared flock by every process that has the
//                             dataset open; its mtime is when one last opened it
//     <id % 256, 2 hex>/<id>  an entry: a header (magic, fingerprint, id, size, CRC-32
//                             of the bytes, the version of the sample's file it was
//                             written for) and the sample's bytes, mode 0600
// An entry is written to a temporary file and renamed into place (no fsync:
// an entry a machine crash left short fails its checks). Another dataset
// (another fingerprint) has another folder: its entries are never read. A
// file edited since its entry was written, even to the same size, has
// another version in the manifest (DiskSampleCacheOptions.versions): the
// entry is removed unread and the sample fetched again.
//
// Bounded in bytes for the whole folder DIR (max_bytes, each entry's file
// size counted), whatever the datasets: opening a dataset that needs room
// reclaims the folders of the datasets opened longest ago that no process
// has open. Within a dataset, noevict: once the bound is reached nothing
// more is written (a job's epochs read every sample, each once, in random
// order: evicting one cached sample for another gains nothing, as with the
// memory tier, sample_cache.h). Both counters are kept under one flock on
// DIR/usage; the first process to open a dataset's folder (no other has it
// open) counts the folder again from its files, removing what is not an
// entry (a temporary file a killed process left, a file of the wrong size or
// type), so a counter that drifted (a process killed between counting and
// writing) is exact again. An entry written twice by two processes at once is
// counted twice until then (the bound holds, conservatively).
//
// On tmpfs (DIR under /dev/shm: a node-wide memory cache that every process
// of the node shares, one copy) a dataset's folder is removed when the last
// process that has it open leaves: memory is not kept for no one.
//
// A write that fails (a full disk, a quota, an I/O error) stops this
// process's filling, said once: later epochs do not fetch files whole to fill
// a cache that cannot grow.
//
// Every entry is checked before it is read: a path that is not a regular
// file, a file whose size is not its header's, one larger than the bound or
// with another dataset's header is removed without reading it whole; a
// checksum that fails removes it too. Each counts as a miss.
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
  int64_t max_bytes = 0;    // > 0: what the folder may hold, every dataset's entries together
  uint64_t fingerprint = 0; // the dataset's (its manifest's) fingerprint
  uint64_t num_samples = 0; // ids are below it
  // The bytes the whole dataset takes as entries (its files plus a header
  // each); 0 = unknown. Opening reclaims older datasets' folders until this
  // dataset fits (or the bound is all free).
  int64_t dataset_bytes = 0;
  // By sample id: what changes when its file is edited, even to the same size
  // (the manifest's versions, ServerManifest.versions). An entry written for
  // another version is stale: dropped, never served, and written again when
  // the sample arrives. Empty or 0 = unknown: not checked.
  std::vector<uint32_t> versions;

  absl::Status Validate() const;  // names the field
};

struct DiskSampleCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t corrupt = 0;   // entries removed because they failed their checks
  uint64_t stale = 0;     // entries removed because their sample's file changed (versions)
  uint64_t written = 0;
  uint64_t rejected = 0;  // not written: the folder is full, or filling has stopped
  uint64_t write_errors = 0;  // writes that failed (the first one stops the filling)
  uint64_t reclaimed_datasets = 0;  // older datasets' folders removed when this one opened
  // The folder's usage, every dataset's: the counter every process of the node adds to,
  // read when the stats are taken (as this process last wrote it when it cannot be read).
  int64_t usage_bytes = 0;
};

class DiskSampleCache {
 public:
  // Creates DIR/<fingerprint>/, counts it again when no other process has
  // it open, reclaims older datasets' folders for room (logged), and holds
  // the dataset open until destroyed. Errors name the folder.
  static absl::StatusOr<std::unique_ptr<DiskSampleCache>> Open(
      const DiskSampleCacheOptions& options);
  ~DiskSampleCache();

  // Sample `id`'s bytes when its entry is there and intact (and their
  // CRC-32 in *crc when given); an entry that fails a check is removed and
  // counted, never read whole when its size or type is wrong. Thread-safe.
  bool Get(uint64_t id, std::string* out, uint32_t* crc = nullptr);
  // Writes sample `id`'s entry unless it is there, the folder is full or
  // filling has stopped; whether it is there afterwards. A failed write
  // stops the filling and is logged once. Thread-safe.
  bool Put(uint64_t id, absl::string_view bytes);
  // Whether there is an entry for `id`: known to this process (found when
  // opened, written or read since), or written by another process since (a
  // stat of its path). Thread-safe.
  bool Contains(uint64_t id) const;
  // What can still be written: 0 once filling has stopped.
  int64_t RoomBytes() const;

  DiskSampleCacheStats stats() const;
  const std::string& folder() const { return folder_; }
  const DiskSampleCacheOptions& options() const { return options_; }
  std::string EntryPath(uint64_t id) const;

  static constexpr int64_t kHeaderBytes = 40;

 private:
  DiskSampleCache(const DiskSampleCacheOptions& options, std::string folder, int in_use_fd)
      : options_(options),
        folder_(std::move(folder)),
        in_use_fd_(in_use_fd),
        known_(options.num_samples, 0) {}
  // Adds `delta` to this dataset's and the node's usage under the node's
  // flock when the node's stays within max_bytes (or delta <= 0); the node's
  // new usage, or -1 when it would not fit or the counters cannot be kept.
  int64_t AddUsage(int64_t delta) const;
  // The node's usage as the counter says now (under flock); -1 when it cannot be read.
  int64_t ReadUsage() const;
  // Removes the file at `path` (`bytes` long) that failed a check, counted.
  enum class Dropped {
    kDamaged,       // failed its checks when read (a miss)
    kStale,         // written for another version of the sample's file (a miss)
    kStaleOnWrite,  // found stale (or damaged) where a fresh copy is written
  };
  void Drop(const std::string& path, int64_t bytes, uint64_t id, Dropped why);
  // Whether an entry written for `version` is current for sample `id`.
  bool CurrentVersion(uint64_t id, uint32_t version) const;
  void MarkKnown(uint64_t id, bool known) const;

  const DiskSampleCacheOptions options_;
  const std::string folder_;  // DIR/<fingerprint>
  const int in_use_fd_;       // DIR/<fingerprint>/in-use, shared flock held
  mutable absl::Mutex mu_;
  mutable std::vector<char> known_ ABSL_GUARDED_BY(mu_);  // entry seen by this process
  DiskSampleCacheStats stats_ ABSL_GUARDED_BY(mu_);
  bool filling_stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_DISK_SAMPLE_CACHE_H_
