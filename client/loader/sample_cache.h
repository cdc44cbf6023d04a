// The training node's cache of whole sample files, so that a later epoch need
// not fetch a sample again: filled from samples that arrive whole (RAW), each
// entry checksummed, every byte counted against a bound.
//
// It takes the storage node's cache options and policies
// (sophon/data/cached_source.h: CacheOptions, CachePolicy, and
// kCacheEntryOverheadBytes charged per entry). kNoEvict (the default) keeps
// what arrives while there is room and never evicts: under random access every
// later epoch then hits capacity / dataset of its samples, where LRU evicts
// the entries an epoch is about to want (CoorDL's observation). kLru evicts
// the least recently used entries to make room.
//
// A corrupt entry (its CRC-32 no longer matches) is dropped and reported as a
// miss, so the sample is fetched again and never trained on.
//
// With a disk tier (DiskSampleCache: kept across runs, shared by the
// processes of a node), a sample missing in memory is looked up on disk (and
// kept in memory if there is room), and every file kept is also written
// there. Memory may then be 0 bytes: the page cache holds what is read.
#ifndef SOPHON_CLIENT_LOADER_SAMPLE_CACHE_H_
#define SOPHON_CLIENT_LOADER_SAMPLE_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/loader/disk_sample_cache.h"
#include "sophon/data/cached_source.h"

namespace sophon {

struct SampleCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;        // corrupt entries included
  uint64_t corrupt = 0;       // entries dropped because their checksum failed
  uint64_t inserted = 0;
  uint64_t evicted = 0;       // kLru only
  uint64_t rejected = 0;      // Puts not kept: no room (kNoEvict) or larger than the bound
  uint64_t hit_bytes = 0;     // the sample bytes that hits returned (what was not fetched)
  uint64_t disk_hits = 0;     // hits found on the disk tier (counted in hits too)
  double hit_cpu_seconds = 0; // the calling threads' CPU time in hits (checksum, copy, disk read)
  int64_t entries = 0;
  int64_t bytes = 0;          // held, kCacheEntryOverheadBytes per entry included; <= options.bytes
};

class SampleCache {
 public:
  // InvalidArgument naming the field for options that do not validate.
  // `disk`: the disk tier, or null.
  static absl::StatusOr<std::unique_ptr<SampleCache>> Create(
      const CacheOptions& options, std::unique_ptr<DiskSampleCache> disk = nullptr);

  // Copies sample `id`'s file into *out and returns true when it is held and
  // intact; a corrupt entry is dropped and counted. Thread-safe.
  bool Get(uint64_t id, std::string* out);
  // Keeps a copy of sample `id`'s file if the policy makes room for it;
  // returns whether it is held afterwards. A sample held already is left as
  // it is. Thread-safe.
  bool Put(uint64_t id, absl::string_view bytes);
  bool Contains(uint64_t id) const;  // in memory or known on disk
  const DiskSampleCache* disk() const { return disk_.get(); }

  SampleCacheStats stats() const;
  const CacheOptions& options() const { return options_; }
  // The CPU seconds a hit costs per byte of the file: as measured over the
  // hits so far once they add up to 8 MiB, else the checksum and the copy
  // timed on a 1 MiB buffer when the cache was made. For the planner.
  double ReadSecondsPerByte() const;

  // What a noevict cache can still keep: the disk tier's room when there is
  // one (it keeps every file kept; 0 once its filling stopped), else
  // memory's; 0 for LRU.
  int64_t RoomBytes() const;

  // Flips a byte of a held entry (tests of the checksum); false if not held.
  bool CorruptForTest(uint64_t id);

 private:
  struct Entry {
    std::string bytes;
    uint32_t crc = 0;
    std::list<uint64_t>::iterator lru;  // kLru: position in lru_
  };
  SampleCache(const CacheOptions& options, std::unique_ptr<DiskSampleCache> disk,
              double calibrated_seconds_per_byte)
      : options_(options),
        disk_(std::move(disk)),
        calibrated_seconds_per_byte_(calibrated_seconds_per_byte) {}
  // What Get costs after the lookup: the hit's bytes and CPU time counted.
  void CountHitLocked(size_t bytes, double cpu_seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The memory tier's part of Put.
  bool PutInMemory(uint64_t id, absl::string_view bytes, uint32_t crc);

  const CacheOptions options_;
  const std::unique_ptr<DiskSampleCache> disk_;  // null: memory only
  const double calibrated_seconds_per_byte_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<uint64_t> lru_ ABSL_GUARDED_BY(mu_);  // most recently used first (kLru)
  SampleCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

// What sophon-train's --local-cache-* flags and sophon.Loader's local_cache_*
// arguments set.
struct LocalCacheOptions {
  int64_t memory_bytes = 0;  // the memory tier's bound; 0 = none
  CachePolicy policy = CachePolicy::kNoEvict;
  std::string dir;           // the disk tier's folder; "" = none
  int64_t dir_bytes = 0;     // its bound (> 0 with a folder)

  bool enabled() const { return memory_bytes > 0 || !dir.empty(); }
  absl::Status Validate() const;  // names the field
};

// The cache for a dataset whose manifest has `fingerprint` and
// `num_samples`, its files `dataset_bytes` in all (0 = unknown: the disk
// tier then reclaims older datasets' folders only beyond its bound), its
// samples' versions `versions` (the disk tier serves an entry only for the
// version it was written for; empty = unknown): null when !options.enabled().
// Errors name the LocalCacheOptions field (or the folder).
absl::StatusOr<std::shared_ptr<SampleCache>> OpenSampleCache(
    const LocalCacheOptions& options, uint64_t fingerprint, uint64_t num_samples,
    int64_t dataset_bytes = 0, std::vector<uint32_t> versions = {});

}  // namespace sophon

#endif  // SOPHON_CLIENT_LOADER_SAMPLE_CACHE_H_
