#include "client/loader/sample_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sophon/base/cpu_time.h"
#include "sophon/data/crc32.h"

namespace sophon {
namespace {

int64_t Cost(size_t bytes) { return static_cast<int64_t>(bytes) + kCacheEntryOverheadBytes; }

// A hit's checksum and copy, timed on a 1 MiB buffer (the best of three).
double CalibrateSecondsPerByte() {
  const std::string buffer(1 << 20, 'x');
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const double start = ThreadCpuSeconds();
    std::string copy = buffer;
    const uint32_t crc = Crc32(copy);
    const double took = ThreadCpuSeconds() - start;
    if (crc == 0) copy.clear();  // keeps the work from being optimised away
    if (i == 0 || took < best) best = took;
  }
  return std::max(0.0, best) / static_cast<double>(buffer.size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<SampleCache>> SampleCache::Create(
    const CacheOptions& options, std::unique_ptr<DiskSampleCache> disk) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return std::unique_ptr<SampleCache>(
      new SampleCache(options, std::move(disk), CalibrateSecondsPerByte()));
}

void SampleCache::CountHitLocked(size_t bytes, double cpu_seconds) {
  ++stats_.hits;
  stats_.hit_bytes += bytes;
  stats_.hit_cpu_seconds += std::max(0.0, cpu_seconds);
}

double SampleCache::ReadSecondsPerByte() const {
  absl::MutexLock lock(&mu_);
  if (stats_.hit_bytes >= (8u << 20)) {
    return stats_.hit_cpu_seconds / static_cast<double>(stats_.hit_bytes);
  }
  return calibrated_seconds_per_byte_;
}

bool SampleCache::Get(uint64_t id, std::string* out) {
  const double start = ThreadCpuSeconds();
  bool held = false;
  uint32_t crc = 0;
  std::string copy;  // *out is left as it is unless this is a hit
  {
    // Only the copy under the lock; it is checked against the entry's
    // checksum outside it.
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(id);
    if (it != entries_.end()) {
      held = true;
      copy = it->second.bytes;
      crc = it->second.crc;
      if (options_.policy == CachePolicy::kLru) lru_.splice(lru_.begin(), lru_, it->second.lru);
    }
  }
  if (held) {
    const bool intact = Crc32(copy) == crc;
    absl::MutexLock lock(&mu_);
    if (intact) {
      *out = std::move(copy);
      CountHitLocked(out->size(), ThreadCpuSeconds() - start);
      return true;
    }
    ++stats_.corrupt;
    auto it = entries_.find(id);
    if (it != entries_.end() && it->second.crc == crc) EraseLocked(id);
  }
  if (disk_ == nullptr) {
    absl::MutexLock lock(&mu_);
    ++stats_.misses;
    return false;
  }
  // The disk tier, without this cache's lock (it checks its own entries).
  if (!disk_->Get(id, out, &crc)) {
    absl::MutexLock lock(&mu_);
    ++stats_.misses;
    return false;
  }
  if (options_.bytes > 0) PutInMemory(id, *out, crc);
  absl::MutexLock lock(&mu_);
  CountHitLocked(out->size(), ThreadCpuSeconds() - start);
  ++stats_.disk_hits;
  return true;
}

bool SampleCache::Put(uint64_t id, absl::string_view bytes) {
  // The checksum outside the lock: it reads only the caller's bytes.
  const bool in_memory = PutInMemory(id, bytes, Crc32(bytes));
  const bool on_disk = disk_ != nullptr && disk_->Put(id, bytes);
  return in_memory || on_disk;
}

bool SampleCache::PutInMemory(uint64_t id, absl::string_view bytes, uint32_t crc) {
  if (options_.bytes == 0) return false;  // no memory tier
  const int64_t cost = Cost(bytes.size());
  absl::MutexLock lock(&mu_);
  if (entries_.contains(id)) return true;
  if (cost > options_.bytes) {
    ++stats_.rejected;
    return false;
  }
  if (options_.policy == CachePolicy::kLru) {
    while (stats_.bytes + cost > options_.bytes && !lru_.empty()) {
      EraseLocked(lru_.back());
      ++stats_.evicted;
    }
  } else if (stats_.bytes + cost > options_.bytes) {
    ++stats_.rejected;
    return false;
  }
  Entry entry;
  entry.bytes.assign(bytes.data(), bytes.size());
  entry.crc = crc;
  if (options_.policy == CachePolicy::kLru) {
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
  {
    absl::MutexLock lock(&mu_);
    if (entries_.contains(id)) return true;
  }
  return disk_ != nullptr && disk_->Contains(id);
}

int64_t SampleCache::RoomBytes() const {
  if (disk_ != nullptr) return disk_->RoomBytes();
  if (options_.policy != CachePolicy::kNoEvict) return 0;
  absl::MutexLock lock(&mu_);
  return std::max<int64_t>(0, options_.bytes - stats_.bytes);
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
  if (options_.policy == CachePolicy::kLru) lru_.erase(it->second.lru);
  entries_.erase(it);
}

absl::Status LocalCacheOptions::Validate() const {
  if (memory_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LocalCacheOptions.memory_bytes must be >= 0 (got ", memory_bytes, ")"));
  }
  if (!dir.empty() && dir_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LocalCacheOptions.dir_bytes must be > 0 with a folder (got ", dir_bytes, ")"));
  }
  if (dir.empty() && dir_bytes != 0) {
    return absl::InvalidArgumentError("LocalCacheOptions.dir_bytes needs LocalCacheOptions.dir");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<SampleCache>> OpenSampleCache(const LocalCacheOptions& options,
                                                            uint64_t fingerprint,
                                                            uint64_t num_samples,
                                                            int64_t dataset_bytes,
                                                            std::vector<uint32_t> versions) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!options.enabled()) return std::shared_ptr<SampleCache>();
  std::unique_ptr<DiskSampleCache> disk;
  if (!options.dir.empty()) {
    DiskSampleCacheOptions disk_options;
    disk_options.dir = options.dir;
    disk_options.max_bytes = options.dir_bytes;
    disk_options.fingerprint = fingerprint;
    disk_options.num_samples = num_samples;
    disk_options.dataset_bytes = dataset_bytes;
    disk_options.versions = std::move(versions);
    absl::StatusOr<std::unique_ptr<DiskSampleCache>> opened = DiskSampleCache::Open(disk_options);
    if (!opened.ok()) {
      return absl::Status(opened.status().code(),
                          absl::StrCat("LocalCacheOptions.dir: ", opened.status().message()));
    }
    disk = *std::move(opened);
  }
  CacheOptions memory;
  memory.bytes = options.memory_bytes;
  memory.policy = options.policy;
  absl::StatusOr<std::unique_ptr<SampleCache>> cache = SampleCache::Create(memory, std::move(disk));
  if (!cache.ok()) return cache.status();
  return std::shared_ptr<SampleCache>(*std::move(cache));
}

}  // namespace sophon
