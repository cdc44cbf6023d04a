#include "sophon/data/cached_source.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "sophon/base/escape.h"

namespace sophon {

absl::StatusOr<CachePolicy> ParseCachePolicy(absl::string_view text) {
  if (text == "noevict") return CachePolicy::kNoEvict;
  if (text == "lru") return CachePolicy::kLru;
  return absl::InvalidArgumentError(absl::StrCat(
      "CacheOptions.policy must be noevict or lru, got '", EscapeName(text), "'"));
}

absl::string_view CachePolicyName(CachePolicy policy) {
  return policy == CachePolicy::kLru ? "lru" : "noevict";
}

absl::Status CacheOptions::Validate() const {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CacheOptions.bytes must be >= 0 (0 = no cache), got ", bytes));
  }
  if (policy != CachePolicy::kNoEvict && policy != CachePolicy::kLru) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CacheOptions.policy must be noevict or lru, got ", static_cast<int>(policy)));
  }
  return absl::OkStatus();
}

CachedSource::CachedSource(std::unique_ptr<SampleSource> inner, const CacheOptions& options)
    : inner_(std::move(inner)), options_(options) {
  stats_.capacity_bytes = options.bytes;
}

absl::StatusOr<std::string> CachedSource::Read(uint64_t id) const {
  ReadInfo info;
  return ReadWithInfo(id, &info);
}

absl::StatusOr<std::string> CachedSource::ReadWithInfo(uint64_t id, ReadInfo* info) const {
  std::shared_ptr<const std::string> cached;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = index_.find(id); it != index_.end()) {
      cached = it->second->bytes;
      if (options_.policy == CachePolicy::kLru) {
        order_.splice(order_.begin(), order_, it->second);  // iterators stay valid
      }
      ++stats_.hits;
    } else {
      ++stats_.misses;
    }
  }
  if (cached != nullptr) {
    *info = ReadInfo();
    info->cache_hit = true;
    return std::string(*cached);  // copied outside the lock
  }

  absl::StatusOr<std::string> bytes = inner_->ReadWithInfo(id, info);
  if (!bytes.ok()) return bytes;
  const int64_t charge = static_cast<int64_t>(bytes->size()) + kCacheEntryOverheadBytes;
  {
    absl::MutexLock lock(&mu_);
    if (!MightInsertLocked(id, charge)) return bytes;
  }
  // The copy kept, made outside the lock (its capacity is its size).
  auto copy = std::make_shared<const std::string>(*bytes);
  absl::MutexLock lock(&mu_);
  InsertLocked(id, std::move(copy));
  return bytes;
}

bool CachedSource::MightInsertLocked(uint64_t id, int64_t charge) const {
  if (charge > options_.bytes || index_.contains(id)) return false;
  return options_.policy == CachePolicy::kLru || stats_.bytes + charge <= options_.bytes;
}

void CachedSource::InsertLocked(uint64_t id, std::shared_ptr<const std::string> bytes) const {
  const int64_t charge = static_cast<int64_t>(bytes->capacity()) + kCacheEntryOverheadBytes;
  // Checked again: another reader may have inserted this sample, or filled
  // the cache, while this one copied.
  if (!MightInsertLocked(id, charge)) return;
  while (stats_.bytes + charge > options_.bytes) {  // kLru only (MightInsertLocked)
    const Entry& victim = order_.back();
    stats_.bytes -= victim.charge;
    index_.erase(victim.id);
    order_.pop_back();
    ++stats_.evicted;
  }
  order_.push_front(Entry{id, std::move(bytes), charge});
  index_.emplace(id, order_.begin());
  stats_.bytes += charge;
  ++stats_.inserted;
}

bool CachedSource::Contains(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  return index_.contains(id);
}

CacheStats CachedSource::stats() const {
  absl::MutexLock lock(&mu_);
  CacheStats out = stats_;
  out.entries = index_.size();
  return out;
}

}  // namespace sophon
