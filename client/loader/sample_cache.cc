#include "client/loader/sample_cache.h"

#include <zlib.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

uint32_t Crc32(absl::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes at most 4 GiB a call.
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

int64_t Cost(size_t bytes) { return static_cast<int64_t>(bytes) + SampleCache::kEntryOverhead; }

}  // namespace

absl::StatusOr<SampleCachePolicy> ParseSampleCachePolicy(absl::string_view name) {
  if (name == "noevict") return SampleCachePolicy::kNoEvict;
  if (name == "lru") return SampleCachePolicy::kLru;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown sample cache policy '", name, "' (valid: noevict, lru)"));
}

const char* SampleCachePolicyName(SampleCachePolicy policy) {
  return policy == SampleCachePolicy::kLru ? "lru" : "noevict";
}

absl::Status SampleCacheOptions::Validate() const {
  if (max_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampleCacheOptions.max_bytes must be >= 0 (got ", max_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SampleCache>> SampleCache::Create(
    const SampleCacheOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return std::unique_ptr<SampleCache>(new SampleCache(options));
}

bool SampleCache::Get(uint64_t id, std::string* out) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    ++stats_.misses;
    return false;
  }
  Entry& entry = it->second;
  if (Crc32(entry.bytes) != entry.crc) {
    ++stats_.corrupt;
    ++stats_.misses;
    EraseLocked(id);
    return false;
  }
  if (options_.policy == SampleCachePolicy::kLru) lru_.splice(lru_.begin(), lru_, entry.lru);
  *out = entry.bytes;
  ++stats_.hits;
  stats_.hit_bytes += entry.bytes.size();
  return true;
}

bool SampleCache::Put(uint64_t id, absl::string_view bytes) {
  const int64_t cost = Cost(bytes.size());
  // The checksum outside the lock: it reads only the caller's bytes.
  const uint32_t crc = Crc32(bytes);
  absl::MutexLock lock(&mu_);
  if (entries_.contains(id)) return true;
  if (cost > options_.max_bytes) {
    ++stats_.rejected;
    return false;
  }
  if (options_.policy == SampleCachePolicy::kLru) {
    while (stats_.bytes + cost > options_.max_bytes && !lru_.empty()) {
      EraseLocked(lru_.back());
      ++stats_.evicted;
    }
  } else if (stats_.bytes + cost > options_.max_bytes) {
    ++stats_.rejected;
    return false;
  }
  Entry entry;
  entry.bytes.assign(bytes.data(), bytes.size());
  entry.crc = crc;
  if (options_.policy == SampleCachePolicy::kLru) {
    lru_.push_front(id);
    entry.lru = lru_.begin();
  }
  entries_.emplace(id, std::move(entry));
  stats_.bytes += cost;
  ++stats_.entries;
  ++stats_.inserted;
  return true;
}

bool SampleCache::Contains(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return entries_.contains(id);
}

SampleCacheStats SampleCache::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool SampleCache::CorruptForTest(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.bytes.empty()) return false;
  it->second.bytes[0] = static_cast<char>(it->second.bytes[0] ^ 0x5a);
  return true;
}

void SampleCache::EraseLocked(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  stats_.bytes -= Cost(it->second.bytes.size());
  --stats_.entries;
  if (options_.policy == SampleCachePolicy::kLru) lru_.erase(it->second.lru);
  entries_.erase(it);
}

}  // namespace sophon
