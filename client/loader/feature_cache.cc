#include "client/loader/feature_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "sophon/base/half.h"

namespace sophon {

FeatureCache::FeatureCache(uint64_t num_samples, int feature_size, int64_t max_bytes)
    : feature_size_(std::max(1, feature_size)),
      capacity_(std::min<int64_t>(
          std::max<int64_t>(0, max_bytes) / (int64_t{2} * std::max(1, feature_size)),
          std::min<uint64_t>(num_samples, std::numeric_limits<int32_t>::max()))),
      slot_of_id_(capacity_ > 0 ? num_samples : 0, -1) {}

bool FeatureCache::Get(uint64_t id, float* out) const {
  absl::MutexLock lock(&mu_);
  if (id >= slot_of_id_.size() || slot_of_id_[id] < 0) return false;
  HalvesToFloats(arena_.data() + static_cast<size_t>(slot_of_id_[id]) * feature_size_,
                 feature_size_, out);
  return true;
}

void FeatureCache::Put(uint64_t id, const uint16_t* halves) {
  absl::MutexLock lock(&mu_);
  if (id >= slot_of_id_.size() || slot_of_id_[id] >= 0) return;
  const int64_t held = static_cast<int64_t>(arena_.size()) / feature_size_;
  if (held >= capacity_) return;
  slot_of_id_[id] = static_cast<int32_t>(held);
  if (arena_.capacity() == 0) arena_.reserve(static_cast<size_t>(capacity_) * feature_size_);
  arena_.insert(arena_.end(), halves, halves + feature_size_);
}

int64_t FeatureCache::held_samples() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(arena_.size()) / feature_size_;
}

int64_t FeatureCache::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(arena_.size() * sizeof(uint16_t));
}

}  // namespace sophon
