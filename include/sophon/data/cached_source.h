// A cache of raw sample bytes in front of another SampleSource, bounded by a
// byte budget (sophon-server --cache-bytes, --cache-policy). A storage node
// whose dataset does not fit in its page cache serves the cached part from
// memory: with kNoEvict (CoorDL's MinIO) the first samples read fill the
// cache and stay, so each later epoch hits exactly the same samples whatever
// its order; with kLru the least recently read samples make room.
#ifndef SOPHON_DATA_CACHED_SOURCE_H_
#define SOPHON_DATA_CACHED_SOURCE_H_

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
#include "sophon/data/sample_source.h"

namespace sophon {

enum class CachePolicy {
  kNoEvict,  // insert while there is room, never evict: the cached set is fixed once full
  kLru,      // evict the least recently read samples to make room
};

// "noevict" or "lru"; InvalidArgument naming CacheOptions.policy.
absl::StatusOr<CachePolicy> ParseCachePolicy(absl::string_view text);
// "noevict" or "lru".
absl::string_view CachePolicyName(CachePolicy policy);

// What one cached sample costs besides its bytes: the list node and the hash
// slot that find and order it (the slot counted at the table's lowest load
// after growing), the shared string and its control block, and malloc's
// headers and rounding. Counted per entry, so that the budget bounds memory,
// not only payload (a dataset of small files pays a few percent for it).
inline constexpr int64_t kCacheEntryOverheadBytes = 256;

struct CacheOptions {
  // Memory the cache may hold: every entry's bytes (its string's capacity)
  // plus kCacheEntryOverheadBytes. 0 = no cache. A sample that costs more than
  // all of it is never cached.
  int64_t bytes = 0;
  CachePolicy policy = CachePolicy::kNoEvict;

  bool enabled() const { return bytes > 0; }
  // InvalidArgument naming the field ("CacheOptions.bytes must be ...").
  absl::Status Validate() const;
};

struct CacheStats {
  uint64_t hits = 0;      // reads answered from the cache
  uint64_t misses = 0;    // reads passed to the inner source (failed ones included)
  uint64_t inserted = 0;  // samples put in the cache
  uint64_t evicted = 0;   // samples taken out to make room (kLru only)
  int64_t bytes = 0;      // memory held now, entries' overhead included; <= capacity_bytes
  uint64_t entries = 0;   // samples held now (inserted - evicted)
  int64_t capacity_bytes = 0;  // CacheOptions.bytes
};

// Every method is thread-safe. Read never holds the lock while the inner
// source reads: two concurrent misses of the same sample both read it and
// only the first to finish inserts it. A hit copies the bytes after the lock
// is released (an entry evicted meanwhile lives until its copy is done).
// Errors of the inner source pass through unchanged and are never cached.
class CachedSource final : public SampleSource {
 public:
  // REQUIRES: inner != nullptr, options validated.
  CachedSource(std::unique_ptr<SampleSource> inner, const CacheOptions& options);

  // Forwarded to the inner source.
  std::string name() const override { return inner_->name(); }
  const ManifestTable& manifest() const override { return inner_->manifest(); }
  const std::vector<std::string>& class_names() const override {
    return inner_->class_names();
  }
  uint64_t fingerprint() const override { return inner_->fingerprint(); }
  std::vector<std::string> FilePaths() const override { return inner_->FilePaths(); }
  uint64_t max_sample_bytes() const override { return inner_->max_sample_bytes(); }
  uint32_t group_size() const override { return inner_->group_size(); }
  uint64_t buffer_bytes() const override { return inner_->buffer_bytes(); }

  // The cached bytes, or the inner source's (inserted when the policy lets).
  absl::StatusOr<std::string> Read(uint64_t id) const override;
  // As Read; info->cache_hit says whether the bytes came from this cache (on a
  // miss, what the inner source reported).
  absl::StatusOr<std::string> ReadWithInfo(uint64_t id, ReadInfo* info) const override;

  bool Contains(uint64_t id) const;
  CacheStats stats() const;
  const CacheOptions& options() const { return options_; }
  const SampleSource& inner() const { return *inner_; }

 private:
  struct Entry {
    uint64_t id;
    std::shared_ptr<const std::string> bytes;
    int64_t charge;  // bytes->capacity() + kCacheEntryOverheadBytes
  };
  using Order = std::list<Entry>;  // most recently read first (kLru), else insertion order

  // Whether an entry of `charge` bytes could go in now (maybe after evictions).
  bool MightInsertLocked(uint64_t id, int64_t charge) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts `bytes` as sample `id` unless it is there already or does not fit.
  void InsertLocked(uint64_t id, std::shared_ptr<const std::string> bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::unique_ptr<SampleSource> inner_;
  const CacheOptions options_;

  // The cache is state behind const reads (Read is const in SampleSource).
  mutable absl::Mutex mu_;
  mutable Order order_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_map<uint64_t, Order::iterator> index_ ABSL_GUARDED_BY(mu_);
  mutable CacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sophon

#endif  // SOPHON_DATA_CACHED_SOURCE_H_
